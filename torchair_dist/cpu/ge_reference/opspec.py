"""A GE op decoded from its ``OpDef`` into plain Python: what a kernel factory receives."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch

from ...backends.ge.decode import decode_attr, decode_tensor  # noqa: F401  (kernels read them here)
from ...backends.ge.dtypes import torch_dtype
from ...backends.ge.proto import OpDef
from ...errors import GeRuntimeError  # noqa: F401  (kernels raise it)


@dataclasses.dataclass
class OpSpec:
    """One op: type, name, attrs, input port names, Const inputs, output descriptors."""

    type: str
    name: str
    attrs: Dict[str, Any]
    in_names: List[str]
    consts: Dict[int, torch.Tensor]  # input position -> value, for inputs fed by a Const
    outputs: List[Tuple[torch.dtype, Tuple[int, ...]]]
    state: Dict[str, Any] = dataclasses.field(default_factory=dict)  # shared by a graph's kernels

    def port(self, name: str) -> Optional[int]:
        """Position of input port ``name`` among the fed inputs (None when omitted)."""
        return self.in_names.index(name) if name in self.in_names else None

    def const_ints(self, name: str) -> Optional[Tuple[int, ...]]:
        """A Const-fed int input as a tuple (0-d -> 1-tuple), None when fed at run time."""
        pos = self.port(name)
        if pos is None or pos not in self.consts:
            return None
        return tuple(int(v) for v in self.consts[pos].reshape(-1).tolist())

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


# Private attributes (``_name``, not GE's) a reference kernel reads: Assert's message.
_KERNEL_READS = frozenset({"_message"})


def op_spec(op: OpDef, consts: Dict[str, torch.Tensor],
            state: Optional[Dict[str, Any]] = None) -> OpSpec:
    attrs = {k: decode_attr(v) for k, v in op.attr.items()
             if not k.startswith("_") or k in _KERNEL_READS}
    data_inputs = [i for i in op.input if not i.endswith(":-1")]
    const_in = {}
    for pos, inp in enumerate(data_inputs):
        src = inp.rpartition(":")[0]
        if src in consts:
            const_in[pos] = consts[src]
    outs = [(torch_dtype(d.dtype), tuple(d.shape.dim)) for d in op.output_desc]
    return OpSpec(op.type, op.name, attrs, [d.name for d in op.input_desc], const_in, outs,
                  state if state is not None else {})
