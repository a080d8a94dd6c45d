"""The ``out=`` form of a recorded aten op: how the record stand-in (:mod:`.record`) writes a
result into a tensor made at capture (a captured output, or an intermediate placed by
:mod:`.record_static`)."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch


def out_overload(func, out) -> Optional[torch._ops.OpOverload]:
    """The ``out=`` overload of the functional aten op ``func`` taking the same arguments, for
    a plain (non-view) tensor result; None otherwise."""
    if (not isinstance(out, torch.Tensor) or not isinstance(func, torch._ops.OpOverload)
            or func.namespace != "aten" or out._base is not None):
        return None
    if func not in _OUT_OVERLOADS:
        _OUT_OVERLOADS[func] = _find_out_overload(func)
    return _OUT_OVERLOADS[func]


_OUT_OVERLOADS: Dict[Any, Optional[torch._ops.OpOverload]] = {}
_OUT_KERNELS: Dict[Any, bool] = {}


def kernel_out_overload(func, out) -> Optional[torch._ops.OpOverload]:
    """:func:`out_overload` where the ``out=`` form has a CPU kernel of its own (not the
    generated wrapper that runs the functional op and copies its result into ``out``: for an
    intermediate that is a copy more than the fresh result)."""
    found = out_overload(func, out)
    if found is None:
        return None
    if found not in _OUT_KERNELS:
        _OUT_KERNELS[found] = torch._C._dispatch_has_kernel_for_dispatch_key(
            found.name(), "CPU")
    return found if _OUT_KERNELS[found] else None


def _find_out_overload(func) -> Optional[torch._ops.OpOverload]:
    schema = func._schema
    if schema.is_mutable or len(schema.returns) != 1:
        return None
    want = [(a.name, str(a.type)) for a in schema.arguments]
    packet = func.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)
        args = candidate._schema.arguments
        outs = [a for a in args if a.is_out]
        if (len(outs) == 1 and outs[0].name == "out" and
                [(a.name, str(a.type)) for a in args if not a.is_out] == want):
            return candidate
    return None
