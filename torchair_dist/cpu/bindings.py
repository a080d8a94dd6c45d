"""The cheapest way to re-issue one recorded aten call: its Python binding, where it provably
dispatches the same call.

A recorded op is an ``OpOverload``; calling its dispatcher entry (``overload._op``) matches the
arguments against the schema on every call. torch's generated Python bindings
(``torch._C._VariableFunctions.add``, ``torch.Tensor.add_``, ``torch._C._nn.linear`` ...)
parse arguments faster, but pick an overload themselves and may decompose on the way. So a
binding is only used after a probe: it is called once under a dispatch mode that stops the
call at the dispatcher, and it must reach *the same overload with the same arguments*.
Nothing runs during a probe (no kernel, no write to ``out=``).

Arguments are compared as a dispatch mode sees them: tensors by identity, anything else by
type and value (a Python number for a ``Tensor`` argument shows as the number on both paths).

Bindings run ``TorchFunctionMode`` objects and ``_op`` does not: probes and replays run with none on
the stack (:func:`torchair_dist.base.util.without_function_modes`).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..base.util import without_function_modes

# Where torch's generated bindings live, searched in this order; then Tensor methods.
_MODULES = ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft")
_NUMBER_DTYPES = {int: torch.int64, float: torch.float64, complex: torch.complex128}


class _Stop(Exception):
    pass


class _Probe(TorchDispatchMode):
    """Records the first dispatched call and stops it before any kernel runs."""

    def __init__(self):
        super().__init__()
        self.seen: Optional[tuple] = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen = (func, tuple(args), dict(kwargs or {}))
        raise _Stop


def _probe(fn: Callable, args, kwargs) -> Optional[tuple]:
    probe = _Probe()
    try:
        with probe, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a binding's deprecation notes are not the user's
            fn(*args, **kwargs)
    except _Stop:
        return probe.seen
    except Exception:  # noqa: BLE001 - the binding does not take these arguments
        return None
    return None  # returned without dispatching (a Python-side shortcut): not the same call


def _candidates(op: torch._ops.OpOverload):
    name = op._schema.name.split("::", 1)[1]
    for module in _MODULES:
        fn = getattr(getattr(torch._C, module), name, None)
        if fn is not None:
            yield fn
    method = getattr(torch._C.TensorBase, name, None)
    if method is not None:
        yield method


def _same(want, got) -> bool:
    """``got`` (an argument the binding dispatched) is ``want`` (the recorded one): tensors by
    identity, sequences item by item, anything else by type and value."""
    if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
        return want is got
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(want) == len(got) and all(_same(w, g) for w, g in zip(want, got))
    return type(want) is type(got) and (want == got or (want != want and got != got))  # nan


def _dispatches(fn: Callable, op, args: tuple, kwargs: dict) -> bool:
    """``fn(*args, **kwargs)`` reaches the dispatcher as exactly ``op(*args, **kwargs)``."""
    seen = _probe(fn, args, kwargs)
    if seen is None or seen[0] is not op or set(seen[2]) != set(kwargs):
        return False
    return _same(list(args), list(seen[1])) and all(_same(v, seen[2][k])
                                                    for k, v in kwargs.items())


def fast_call(op, args: tuple, kwargs: dict) -> Tuple[Callable, tuple]:
    """(callable, args) that re-issue ``op(*args, **kwargs)``: a Python binding that
    dispatches exactly that call (see :func:`prewrapped` for the args), else the overload's
    dispatcher entry with ``args`` unchanged."""
    direct = getattr(op, "_op", op)
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return direct, args
    with torch.no_grad():  # as a replay runs: grad off, no torch-function mode
        found = next((fn for fn in _candidates(op)
                      if without_function_modes(_dispatches, fn, op, args, kwargs)), None)
    if found is None:
        return direct, args
    return found, prewrapped(found, op, args, kwargs)


def prewrapped(fn: Callable, op, args: tuple, kwargs: dict) -> tuple:
    """``args`` with a Python number passed as ``other`` of a binary op replaced by a 0-dim
    tensor holding it, where that provably computes the same: ``self`` has dimensions (so the
    0-dim tensor, like the number, only decides the result dtype when its category is higher)
    and ``torch.result_type`` is the same either way. Saves wrapping the number on every call.
    """
    if (len(args) < 2 or type(args[1]) not in _NUMBER_DTYPES
            or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0
            or not isinstance(op._schema.arguments[1].type, torch._C.TensorType)):
        return args
    number = args[1]
    try:
        held = torch.tensor(number, dtype=_NUMBER_DTYPES[type(number)])
    except (OverflowError, RuntimeError):  # an int beyond int64
        return args
    if held.item() != number or torch.result_type(args[0], number) != torch.result_type(
            args[0], held):
        return args
    new_args = (args[0], held) + tuple(args[2:])
    with torch.no_grad():
        same = without_function_modes(_dispatches, fn, op, new_args, kwargs)
    return new_args if same else args
