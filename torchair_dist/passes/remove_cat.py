"""Remove cat ops (ACL modes, ``debug.aclgraph.remove_cat_ops``): producers write into the
concatenation's output, so the concatenation copy disappears.

AOT gives ``c = aten.cat([mm(a, b), add(x, y)], 0)``: two results, then one more buffer and a
copy of both into it. This pass allocates the cat's output once and lets each producer write
its slice through the op's ``out=`` overload::

    buf = aten.empty([n0 + n1, ...])
    aten.mm.out(a, b, out=aten.slice(buf, 0, 0, n0))
    aten.add.out(x, y, out=aten.slice(buf, 0, n0, n0 + n1))
    ... users of c read buf

Requires: node order is the execution order and nothing reorders the graph afterwards (the
readers of ``buf`` depend on the writes by position, as in the generated runner and the
capture); ``node.meta["val"]`` on the nodes involved. Guarantees: values bit-for-bit unchanged.
A cat is rewritten only when every input is produced by a listed op that has an ``out=``
overload with the same arguments, used only by this cat (once), of the cat's dtype and device,
on the cat's stream (a buffer written on one stream and read or freed on another would need
stream bookkeeping); all sizes are static; matrix products write only into contiguous slices
(a strided ``out=`` would make the kernel compute elsewhere and copy, or pick another BLAS
path). Any other cat is left as it is. Where ``experimental_config.inductor_kernels`` generates
the kernels the stage does not run (the stage table: ``yields_to="inductor_kernels"``).
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional

import torch
import torch.fx

log = logging.getLogger("torchair_dist")
aten = torch.ops.aten

# Ops whose out= overload computes exactly what the functional op computes.
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
POINTWISE_OPS = frozenset({"add", "sub", "mul", "div", "neg", "exp", "sigmoid", "tanh", "silu",
                           "rsqrt", "sqrt", "abs", "gelu", "clamp_min", "clamp_max", "where"})


def _op_name(target) -> Optional[str]:
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    return target._schema.name.split("::")[1]


def _signature(args) -> List[tuple]:
    return [(a.name, str(a.type)) for a in args]


def out_overload(target) -> Optional[torch._ops.OpOverload]:
    """The ``out=`` twin of a listed functional aten op: same arguments plus a written ``out``
    and one result; None if there is none."""
    name = _op_name(target)
    if name not in MATMUL_OPS and name not in POINTWISE_OPS:
        return None
    want = _signature(target._schema.arguments)
    packet = target.overloadpacket
    for overload in packet.overloads():
        op = getattr(packet, overload)
        args = op._schema.arguments
        if not args or len(op._schema.returns) != 1:
            continue
        out = args[-1]
        if (out.name == "out" and out.kwarg_only and out.alias_info is not None
                and out.alias_info.is_write and _signature(args[:-1]) == want):
            return op
    return None


def _static_tensor(node) -> Optional[torch.Tensor]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    if not all(type(s) is int for s in val.shape):
        return None  # symbolic sizes: slice offsets would be host values per call
    return val


def _cat_dim(cat: torch.fx.Node, ndim: int) -> int:
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    return dim + ndim if dim < 0 else dim


_STREAMS_NS = "torchair_dist_streams"


def stream_of_nodes(gm: torch.fx.GraphModule) -> Dict[torch.fx.Node, str]:
    """The stream tag each node runs on ("" the graph's stream), from the stream_enter /
    stream_exit scopes the stream rewrite left in the graph."""
    stack, found = [""], {}
    for node in gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.namespace == _STREAMS_NS:
            name = target._schema.name.split("::")[1]
            if name == "stream_enter":
                stack.append(node.args[0])
            elif name == "stream_exit" and len(stack) > 1:
                stack.pop()
        found[node] = stack[-1]
    return found


def _can_write_into(producer, cat: torch.fx.Node, out_val: torch.Tensor, dim: int,
                    streams) -> bool:
    if not isinstance(producer, torch.fx.Node) or producer.op != "call_function":
        return False
    if streams[producer] != streams[cat]:
        return False  # the buffer would be written on one stream and read/freed on another
    if set(producer.users) != {cat} or cat.args[0].count(producer) != 1:
        return False
    val = _static_tensor(producer)
    if (val is None or val.dtype != out_val.dtype or val.device != out_val.device
            or val.dim() != out_val.dim() or val.numel() == 0):
        return False
    if out_overload(producer.target) is None:
        return False
    if _op_name(producer.target) in MATMUL_OPS:
        return all(s == 1 for s in out_val.shape[:dim])  # the slice is contiguous
    return True


def _rewritable(cat: torch.fx.Node, streams) -> bool:
    inputs = cat.args[0]
    val = _static_tensor(cat)
    if val is None or len(inputs) < 2 or not val.is_contiguous():
        return False
    dim = _cat_dim(cat, val.dim())
    return all(_can_write_into(p, cat, val, dim, streams) for p in inputs)


def _rewrite(gm: torch.fx.GraphModule, cat: torch.fx.Node, order) -> None:
    graph = gm.graph
    val = cat.meta["val"]
    dim = _cat_dim(cat, val.dim())
    producers = list(cat.args[0])
    first = min(producers, key=lambda p: order[p])
    with graph.inserting_before(first):
        buf = graph.call_function(aten.empty.memory_format, (list(val.shape),),
                                  {"dtype": val.dtype, "device": val.device,
                                   "pin_memory": False})
    buf.meta["val"] = val
    start = 0
    for producer in producers:
        size = producer.meta["val"].shape[dim]
        with graph.inserting_before(producer):
            view = graph.call_function(aten.slice.Tensor, (buf, dim, start, start + size))
            view.meta["val"] = val.narrow(dim, start, size)
            write = graph.call_function(out_overload(producer.target), producer.args,
                                        {**producer.kwargs, "out": view})
        write.meta = {**producer.meta, "val": view.meta["val"]}
        producer.replace_all_uses_with(write)
        graph.erase_node(producer)
        start += size
    cat.replace_all_uses_with(buf)
    graph.erase_node(cat)


def remove_cat_ops(gm: torch.fx.GraphModule, example_inputs, config):
    """Let the producers of a cat write into its output (see the module doc)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    streams = stream_of_nodes(gm)
    cats = [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target is aten.cat.default and _rewritable(n, streams)]
    for cat in cats:
        _rewrite(gm, cat, order)
    if cats:
        gm.graph.lint()
        gm.recompile()
        log.debug("remove_cat_ops: %d cat ops written in place by their producers", len(cats))
    return gm
