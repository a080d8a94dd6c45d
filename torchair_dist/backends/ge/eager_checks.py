"""Ops eager refuses for the graph's inputs, found when the graph is converted and raised when
it is called (never at compile time: Dynamo would wrap a compile-time error in
BackendCompilerFailed, while the user expects eager's error from the call).

GE ops tie their operands' types, and the converters carry an operand of another dtype as the
op's (:mod:`.converters.context`): ``mm(float32, int64)`` would silently compute in float32
where eager raises "expected m1 and m2 to have the same dtype". The ops below refuse such
inputs in eager; for each node of one of them whose inputs match the refusal's condition, the
eager op is run once on stand-in tensors of the same dtypes and shapes (zero strides: one
element of storage each), and the error it raises, if any, is kept with the node. The runner
raises the first one on every call (:class:`~torchair_dist.errors.EagerOpError`, a
RuntimeError, with eager's message, or eager's own class when it is not a RuntimeError).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.fx.node import map_aggregate

from ...errors import EagerOpError

aten = torch.ops.aten


def _mixed(tensors: List[Any]) -> bool:
    return len({t.dtype for t in tensors}) > 1


def _bool_input(tensors: List[Any]) -> bool:
    return bool(tensors) and tensors[0].dtype == torch.bool


# op -> when eager may refuse it (checked on the FX meta values of its tensor arguments)
CONDITIONS: Dict[Any, Callable[[List[Any]], bool]] = {
    **{op: _mixed for op in (
        aten.mm.default, aten.bmm.default, aten.addmm.default, aten.addbmm.default,
        aten.baddbmm.default, aten.mv.default, aten.addmv.default, aten.dot.default,
        aten.vdot.default, aten.matmul.default, aten.linear.default,
        aten.convolution.default, aten._convolution.default)},
    aten.abs.default: _bool_input,
}


def _stand_in(val: Any) -> Any:
    if not isinstance(val, torch.Tensor):
        return val
    shape = [int(d) if isinstance(d, int) else int(d.node.hint) if getattr(d.node, "hint", None)
             is not None else 1 for d in val.shape]
    return torch.empty_strided(shape, [0] * len(shape), dtype=val.dtype)


def _probe(node: torch.fx.Node) -> Optional[BaseException]:
    def value(a: Any) -> Any:
        return _stand_in(a.meta.get("val")) if isinstance(a, torch.fx.Node) else a

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        args = map_aggregate(node.args, value)
        kwargs = map_aggregate(node.kwargs, value)
        try:
            node.target(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - eager's refusal, kept for the call
            return exc
    return None


def eager_refusals(gm: torch.fx.GraphModule) -> List[Tuple[str, BaseException]]:
    """(FX node name, the error eager raises) for every node eager refuses for its inputs."""
    found = []
    for node in gm.graph.nodes:
        cond = CONDITIONS.get(node.target) if node.op == "call_function" else None
        if cond is None:
            continue
        tensors = [a.meta.get("val") for a in node.all_input_nodes]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        if cond(tensors):
            exc = _probe(node)
            if exc is not None:
                found.append((node.name, exc))
    return found


def call_errors(gm: torch.fx.GraphModule) -> List[Tuple[type, str]]:
    """(class, message) of the error a call of ``gm`` raises, one per refused node: eager's
    message, and :class:`EagerOpError` (a RuntimeError) for a plain RuntimeError, any other class as
    eager raised it."""
    out = []
    targets = {n.name: n.target for n in gm.graph.nodes}
    for name, exc in eager_refusals(gm):
        message = f"{exc} (eager refuses {targets[name]} for these inputs: FX node %{name})"
        cls = EagerOpError if type(exc) is RuntimeError else type(exc)
        try:
            cls(message)
        except Exception:  # noqa: BLE001 - a class that takes other arguments
            cls = EagerOpError
        out.append((cls, message))
    return out
