"""Graph validation run after the common passes, before any backend."""
from __future__ import annotations

import math
import operator

import torch
import torch.fx

from ..errors import GraphValidationError
from ..base.util import source_line

_PY_OK = {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
          operator.truediv, operator.mod, operator.neg, operator.eq, operator.ne, operator.lt,
          operator.le, operator.gt, operator.ge, operator.pow, operator.abs, operator.pos,
          operator.and_, operator.or_, operator.xor, operator.not_,
          # Python builtins on symbolic sizes (round(n / 2), math.trunc(n / 3))
          round, abs, math.trunc, math.floor, math.ceil}


def _where(node: torch.fx.Node) -> str:
    line = source_line(node)
    return f" (from {line})" if not line.startswith("node ") else ""


def validate_graph(gm: torch.fx.GraphModule) -> None:
    """Check what every backend relies on.

    Guarantees on success: the graph lints; placeholders come first; every call is an aten /
    custom op, a higher-order op, a symbolic-size helper or an operator on sizes.
    Raises GraphValidationError naming the node otherwise.
    """
    try:
        gm.graph.lint()
    except Exception as exc:
        raise GraphValidationError(f"the captured graph is malformed: {exc}") from exc
    seen_compute = False
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if seen_compute:
                raise GraphValidationError(f"placeholder {node.name} comes after compute nodes")
            continue
        seen_compute = True
        if node.op == "call_module":
            raise GraphValidationError(
                f"node {node.name} calls module {node.target!r}; AOT graphs must be flat")
        if node.op != "call_function":
            continue
        t = node.target
        ok = (isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket,
                             torch._ops.HigherOrderOperator))
              or t in _PY_OK or getattr(t, "__module__", "").startswith("torch"))
        if not ok:
            raise GraphValidationError(
                f"node {node.name} calls {t!r}, which is not a torch op{_where(node)}; wrap it "
                f"in a torch.library custom op or keep it out of the compiled region")


def validate_pass(gm: torch.fx.GraphModule, example_inputs, config) -> torch.fx.GraphModule:
    """:func:`validate_graph` as a pipeline stage (a pass that changes nothing)."""
    validate_graph(gm)
    return gm
