"""The ``scope_ops`` stage: TorchAir's scope ops lowered, for post-grad passes written against
TorchAir.

A TorchAir pass marks a region of the AOT graph by inserting
``torch.ops.air.scope_enter(keys, values)`` ... ``torch.ops.air.scope_exit()`` (npugraph_ex:
``torch.ops.npugraph_ex.scope_enter`` / ``scope_exit``; both namespaces are defined by
:mod:`torchair_dist.streams.scope_ops`, unless TorchAir itself already defined them; the
lowering matches them by name), and the ``scope_ops`` pipeline stage (:func:`lower_scope_ops`,
after the user's post pass) lowers them:

* a scope whose keys hold ``_user_stream_label`` (what ``npu_stream_switch`` writes, with
  ``_user_stream_priority``) becomes ``stream_enter(label, priority)`` / ``stream_exit(label)``
  of :mod:`torchair_dist.streams.stream_ops`, and the graph forks the side streams after its
  inputs and joins them before its output, as :func:`.stream_rewrite.rewrite_streams` does;
* any other key/value pair goes to ``node.meta["custom"]`` of every op inside the scope (where
  ``torchair_dist.scope``'s annotations put them), and the scope ops are removed.

Requires: node order is the execution order. Guarantees: no scope op is left; scopes are
balanced (else ``GraphValidationError`` naming the node).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from ..errors import GraphValidationError
from ..streams.scope_ops import NAMESPACES
from ..streams.stream_ops import ops
from .stream_rewrite import add_fork_join, where


def _kind(node: torch.fx.Node) -> str:
    """"enter" / "exit" for a scope op (either namespace), else ""."""
    if node.op != "call_function":
        return ""
    name = getattr(node.target, "name", lambda: "")()
    for ns in NAMESPACES:
        if name in (f"{ns}::scope_enter", f"{ns}::scope_exit"):
            return name.split("_")[-1]
    return ""


def lower_scope_ops(gm: torch.fx.GraphModule, example_inputs, config):
    """Pipeline stage: see the module docstring."""
    graph = gm.graph
    if not any(_kind(n) for n in graph.nodes):
        return gm
    stack: List[Tuple[str, object, torch.fx.Node]] = []   # ("stream", label) | ("attrs", dict)
    side: List[str] = []
    for node in list(graph.nodes):
        kind = _kind(node)
        if kind == "enter":
            keys, values = list(node.args[0]), [str(v) for v in node.args[1]]
            if len(keys) != len(values):
                raise GraphValidationError(f"scope_enter at {where(node)}: {len(keys)} keys "
                                           f"but {len(values)} values")
            attrs: Dict[str, str] = dict(zip(keys, values))
            label = attrs.pop("_user_stream_label", None)
            if label is not None:
                priority = int(attrs.pop("_user_stream_priority", "0") or 0)
                attrs.pop("_enable_inner_parallel", None)
                with graph.inserting_before(node):
                    graph.call_function(ops.stream_enter.default, (label, priority))
                if label not in side:
                    side.append(label)
            stack.append(("stream" if label is not None else "attrs",
                          (label, attrs), node))
            graph.erase_node(node)
        elif kind == "exit":
            if not stack:
                raise GraphValidationError(f"scope_exit at {where(node)} has no open scope")
            what, (label, _), _ = stack.pop()
            if what == "stream":
                with graph.inserting_before(node):
                    graph.call_function(ops.stream_exit.default, (label,))
            graph.erase_node(node)
        elif node.op == "call_function" and stack:
            merged: Dict[str, str] = {}
            for _, (_, attrs), _ in stack:
                merged.update(attrs)
            if merged:
                node.meta["custom"] = {**(node.meta.get("custom") or {}), **merged}
    if stack:
        raise GraphValidationError(f"scope_enter at {where(stack[-1][2])} is never exited")
    add_fork_join(graph, side)
    graph.lint()
    gm.recompile()
    return gm
