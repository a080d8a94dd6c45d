"""GE's graph optimizations as FX passes: ``ge_config.oo_constant_folding`` and
``ge_config.oo_dead_code_elimination`` (max-autotune, every platform).

On Ascend the same options also reach GE as ``ge.oo.constantFolding`` /
``ge.oo.deadCodeElimination``; applying them to the graph before conversion makes them take
effect on the reference executor too. ``None`` (the default) leaves the choice to GE: nothing
happens here. ``False`` keeps the graph as traced.

- Constant folding: a pure, deterministic op whose inputs are all constants (``get_attr``
  tensors, literals, or other folded ops) is computed once at compile time; each folded value
  that a non-constant op consumes becomes a ``get_attr`` constant (a GE ``Const``).
  Never folded: random ops, collectives, in-place or impure ops, symbolic shapes.
- Dead-code elimination: ops whose results nobody uses and that have no side effect go.

Guarantees: values unchanged; side effects and collectives untouched.
"""
from __future__ import annotations

import logging
from typing import Set

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from .overlap import COMPUTE, node_kind

log = logging.getLogger("torchair_dist")


def _foldable(node: torch.fx.Node, constants: Set[torch.fx.Node]) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if node_kind(node) != COMPUTE or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or free_symbols(val):
        return False
    return all(n in constants for n in node.all_input_nodes)


def _real(value, gm):
    if isinstance(value, torch.fx.Node):
        return getattr(gm, value.target) if value.op == "get_attr" else value.meta["folded"]
    if isinstance(value, (list, tuple)):
        return type(value)(_real(v, gm) for v in value)
    return value


def fold_constants(gm: torch.fx.GraphModule, example_inputs, config):
    """Fold constant subgraphs into ``get_attr`` constants (the ``constant_folding`` stage:
    it runs when ``ge_config.oo_constant_folding`` is True)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    constants: Set[torch.fx.Node] = {n for n in gm.graph.nodes if n.op == "get_attr"}
    folded = []
    with unset_fake_temporarily():
        for node in gm.graph.nodes:
            if _foldable(node, constants):
                args = torch.fx.node.map_aggregate(node.args, lambda a: _real(a, gm))
                kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: _real(a, gm))
                node.meta["folded"] = node.target(*args, **kwargs)
                constants.add(node)
                folded.append(node)
    count = 0
    for node in folded:
        if all(u in constants for u in node.users):
            continue  # only the frontier becomes a stored constant
        name = f"_folded_constant_{count}"
        count += 1
        gm.register_buffer(name, node.meta.pop("folded"))
        with gm.graph.inserting_before(node):
            const = gm.graph.get_attr(name)
        const.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(const)
    for node in folded:
        node.meta.pop("folded", None)
    if folded:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
        log.debug("fold_constants: %d ops folded into %d constants", len(folded), count)
    return gm


def eliminate_dead_code(gm: torch.fx.GraphModule, example_inputs, config):
    """Drop unused side-effect-free ops (the ``dead_code_elimination`` stage: it runs when
    ``ge_config.oo_dead_code_elimination`` is True)."""
    if gm.graph.eliminate_dead_code():
        gm.graph.lint()
        gm.recompile()
    return gm
