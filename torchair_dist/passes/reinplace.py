"""Re-inplace functional collectives whose input buffer is dead afterwards (ACL modes).

AOT functionalizes ``dist.all_reduce(h)`` into::

    r = _c10d_functional.all_reduce(h, op, group)   # clones h, reduces the clone
    w = _c10d_functional.wait_tensor(r)
    h2 = aten.copy(h, w)                             # a fresh tensor with w's values

When nothing reads ``h`` after the collective, the clone and the copy are pure overhead: this
pass rewrites the collective to ``all_reduce_(h)`` (reduce in place) and routes the users of
``h2`` to ``w``, as inductor does. Switched off by
``debug.aclgraph.disable_reinplace_inplaceable_ops_pass``.

The same stage re-inplaces functional scatter-style aten ops whose ``self`` is a fresh buffer
read by nothing else (``index_add(new_zeros(...), ...)`` -> ``index_add_``, as an MoE dispatch
writes its buffer): no copy of the buffer inside the op.

Requires: node order is the execution order (run after scheduling passes). Guarantees: values
unchanged; a buffer is reduced in place only if it is an op's fresh result (not a graph input,
not a view, not a graph output) and every other reader runs before the collective; the order
of collectives is unchanged; nothing is reinplaced across a stream boundary (the buffer, the
op and the copies on one stream).
"""
from __future__ import annotations

import torch
import torch.fx

from ..collectives import spec
from .reinplace_inputs import SCATTER_OPS, inplace_twin, same_meta
from .stream_ordering import same_stream, streams_of

aten = torch.ops.aten
_c10d = torch.ops._c10d_functional

# functional collective -> its in-place twin (same arguments, input written in place): the
# spec rows this pass rewrites
INPLACE_TWINS = {row.overload(): spec.SPECS[row.inplace_twin].overload()
                 for row in spec.SPECS.values() if row.reinplace}


def _fresh_buffer(node) -> bool:
    """True when ``node`` is the freshly allocated result of an op (no alias of anything)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None or len(schema.returns) != 1:
        return False
    return schema.returns[0].alias_info is None and not schema.is_mutable


def _readers_after(buffer: torch.fx.Node, collective: torch.fx.Node, order) -> list:
    return [u for u in buffer.users if u is not collective and order[u] > order[collective]]


def reinplace_collectives(gm: torch.fx.GraphModule, example_inputs, config):
    """Rewrite dead-input functional collectives to their in-place twins (see module doc)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    streams = streams_of(gm.graph)
    changed = False
    for node in list(gm.graph.nodes):
        twin = INPLACE_TWINS.get(node.target)
        if twin is None:
            continue
        buffer = node.args[0]
        if not _fresh_buffer(buffer):
            continue
        waits = [u for u in node.users if u.target is _c10d.wait_tensor.default]
        if len(waits) != 1 or len(node.users) != 1:
            continue
        wait = waits[0]
        later = _readers_after(buffer, node, order)
        copies = [u for u in later if u.target is aten.copy.default and u.args[0] is buffer
                  and u.args[1] is wait]
        if len(copies) != len(later):
            continue  # someone still reads the un-reduced buffer after the collective
        if not same_stream(buffer, node, wait, *copies, streams=streams):
            continue  # never reinplace across a stream boundary
        node.target = twin
        for copy in copies:
            copy.replace_all_uses_with(wait)
            gm.graph.erase_node(copy)
        changed = True
    changed = _reinplace_scatters(gm, streams) or changed
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def _reinplace_scatters(gm: torch.fx.GraphModule, streams) -> bool:
    """``op(buf, ...)`` -> ``op_(buf, ...)`` where ``buf`` is a fresh buffer whose only reader is
    ``op`` (so nothing can see it change) and ``op_`` returns it with the same value."""
    changed = False
    for node in list(gm.graph.nodes):
        twin = inplace_twin(node.target, SCATTER_OPS) if node.op == "call_function" else None
        if twin is None or not node.args:
            continue
        buffer = node.args[0]
        if not _fresh_buffer(buffer) or len(buffer.users) != 1 or not same_meta(buffer, node):
            continue  # read elsewhere, or promoted/broadcast: the result is not the buffer
        if not same_stream(buffer, node, streams=streams):
            continue  # the buffer was made on another stream: never reinplace across streams
        node.target = twin
        changed = True
    return changed
