"""Re-inplace input mutations (ACL modes): write a mutated graph input in place.

AOT functionalizes an in-place update of a graph input, e.g. transformers' static KV cache
``self.keys.index_copy_(2, cache_position, k)``, into::

    t = aten.index_copy(keys, 2, cache_position, k)   # a full new copy of the cache
    ...                                                # later readers use t
    aten.copy_(keys, t)                                # and a full copy back into the input

This pass turns that back into ``aten.index_copy_(keys, 2, cache_position, k)`` and drops the
``copy_``: the cache is written where it lives, with no per-step copies of it. Switched off by
``debug.aclgraph.disable_reinplace_input_mutated_ops_pass`` (TorchAir's ``input_inplace_pass``).

Requires: node order is the execution order. Guarantees: values unchanged. A rewrite happens
only when the op's first argument is the input itself, the op has an in-place twin of the same
signature, the result has the input's shape and dtype, every other reader of the input runs
before the op (nobody reads the old value afterwards), no other op writes the input, and the op
runs on the stream of the write-back (never across a stream boundary).
The input stays a mutated input (``mutated_input_indices`` sees the in-place op), so the
capture/replay rules for mutated inputs still apply.
"""
from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.fx

from .stream_ordering import same_stream, streams_of

log = logging.getLogger("torchair_dist")
aten = torch.ops.aten

# Functional ops whose in-place twin (name + "_", same overload) writes its first argument:
# the scatter-style writes (also re-inplaced on fresh buffers by ``reinplace.py``) and the rest.
SCATTER_OPS = frozenset({"index_copy", "index_put", "scatter", "scatter_add", "index_add",
                         "masked_fill", "index_fill"})
REINPLACEABLE = SCATTER_OPS | {"add", "sub", "mul", "div", "copy"}


def inplace_twin(target, names=REINPLACEABLE) -> Optional[torch._ops.OpOverload]:
    """The in-place overload of the functional aten op ``target`` if its name is in ``names``."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    name = target._schema.name.split("::")[1]
    if name not in names:
        return None
    packet = getattr(aten, name + "_", None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def same_meta(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.shape == vb.shape and va.dtype == vb.dtype and va.stride() == vb.stride())


def _rewrite(gm, copy_node: torch.fx.Node, order, streams) -> bool:
    inp, src = copy_node.args[0], copy_node.args[1]
    if not (isinstance(src, torch.fx.Node) and src.op == "call_function" and src.args
            and src.args[0] is inp):
        return False
    twin = inplace_twin(src.target)
    if twin is None or not same_meta(inp, src):
        return False
    if not same_stream(src, copy_node, streams=streams):
        return False  # computed on another stream than the write-back: never across streams
    for user in inp.users:
        if user is src or user is copy_node:
            continue
        if order[user] > order[src] or user.target is aten.copy_.default:
            return False  # reads the old value after the update, or writes the input too
    src.target = twin
    copy_node.replace_all_uses_with(src)
    gm.graph.erase_node(copy_node)
    return True


def reinplace_input_mutations(gm: torch.fx.GraphModule, example_inputs, config):
    """Rewrite ``copy_(input, op(input, ...))`` to ``op_(input, ...)`` (see module doc)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    streams = streams_of(gm.graph)
    done = 0
    for node in list(gm.graph.nodes):
        if (node.op == "call_function" and node.target is aten.copy_.default
                and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder"):
            done += _rewrite(gm, node, order, streams)
    if done:
        gm.graph.lint()
        gm.recompile()
        log.debug("reinplace_input_mutations: %d input updates made in place", done)
    return gm
