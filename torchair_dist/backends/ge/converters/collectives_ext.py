"""Converters: the ``torchair_dist::`` collective ops (:mod:`torchair_dist.collectives.collective_ops`).

- ``all_gather`` (list form): equal sizes -> ``HcomAllGather`` + ``SplitV`` + ``Reshape``;
  unequal sizes -> one ``HcomBroadcast`` per group rank.
- ``all_to_all_v`` -> ``HcomAllToAllV`` (element counts/displacements) + ``Reshape``.
- ``send`` -> ``HcomSend`` (kept alive by a control edge into ``NetOutput``; the token the op
  returns is an empty Const); ``recv`` -> ``HcomReceive`` with static ``shape``/``dtype``.
``barrier`` -> ``HcomAllReduce`` of its one-element token, kept alive like ``send``.
``dst``/``src`` are global ranks in the FX graph and group ranks in GE (``dest_rank``/``src_rank``).
With ``dynamic=True`` the shapes of both ``send`` and ``recv`` are specialised (guards: one graph
per transferred shape on both ranks), since HcomReceive needs a static shape.
"""
from __future__ import annotations

import math

import torch

from ....collectives import collective_ops as dist_ops  # noqa: F401  (defines torch.ops.torchair_dist)
from ....collectives.groups import ge_group_attr, parse_group_name, stable_name_of
from ....errors import UnsupportedOpError
from .collectives import register_collective


def _group(group_name):
    """(the GE ``group`` attribute, the group's global ranks)."""
    name = stable_name_of(group_name)
    return ge_group_attr(name), parse_group_name(name)[1]


@register_collective("torchair_dist::all_gather", "SplitV", "Reshape", "Const", "Shape", "GatherV2",
                     "Pack", "Cast")
def _all_gather_list(cx, output_like, x, group_name):
    group, ranks = _group(group_name)
    me = ranks.index(cx.rank) if cx.rank in ranks else 0
    outs = [cx.out(i) for i in range(len(output_like))]
    static = all(d >= 0 for d in x.shape) and all(d >= 0 for o in output_like for d in o.shape)
    if static and all(math.prod(o.shape) == math.prod(x.shape) for o in output_like):
        n = math.prod(x.shape)
        flat = cx.reshape(x, [-1], [n])
        gathered = cx.emit1("HcomAllGather", [("x", flat)],
                            {"rank_size": len(ranks), "group": group, "fusion": 0},
                            (x.dtype, (n * len(ranks),)))
        pieces = cx.emit("SplitV", [("x", gathered), ("size_splits", cx.const([n] * len(ranks))),
                                    ("split_dim", cx.const(0, torch.int32))], {"num_split": len(ranks)},
                         [("y", [(x.dtype, (n,))] * len(ranks))])
        return [cx.reshape(p, cx.dims(like), shape)
                for p, like, (_, shape) in zip(pieces, output_like, outs)]
    results = []
    for i, (dtype, shape) in enumerate(outs):
        src = cx.reshape(x, cx.dims(output_like[i]), shape) if i == me else output_like[i]
        (y,) = cx.emit("HcomBroadcast", [("x", [src])],
                       {"root_rank": i, "group": group, "fusion": 0}, [("y", [(dtype, shape)])])
        results.append(y)
    return results


@register_collective("torchair_dist::all_to_all_v", "Reshape", "Const", "Pack", "Cast", "Shape",
                     "GatherV2")
def _all_to_all_v(cx, x, send_counts, send_displacements, recv_counts, recv_displacements,
                  group_name):
    group, _ = _group(group_name)
    dtype, out_shape = cx.out()
    total = -1 if any(d < 0 for d in out_shape) else math.prod(out_shape)
    vectors = [cx.int_list(list(v)) for v in (send_counts, send_displacements, recv_counts,
                                              recv_displacements)]
    flat = cx.emit1("HcomAllToAllV", [("send_data", x), ("send_counts", vectors[0]),
                                      ("send_displacements", vectors[1]),
                                      ("recv_counts", vectors[2]),
                                      ("recv_displacements", vectors[3])],
                    {"group": group}, (dtype, (total,)), port="recv_data")
    return cx.reshape(flat, [-1] + cx.dims(x)[1:], out_shape)


@register_collective("torchair_dist::send", "Const")
def _send(cx, x, dst, tag, group_name):
    group, ranks = _group(group_name)
    if any(d < 0 for d in x.shape) and cx.node is not None:
        _specialised_shape(cx, cx.node.args[0])  # a guard, like the receiving side's
    if dst not in ranks:
        raise UnsupportedOpError(f"send to rank {dst}, which is not in group {group}")
    cx.emit("HcomSend", [("x", x)], {"group": group, "sr_tag": int(tag),
                                     "dest_rank": ranks.index(dst)}, [])
    cx.keep_alive.append(cx.b.graph.op[-1].name)
    return cx.const(torch.empty((0,), dtype=x.dtype))


@register_collective("torchair_dist::barrier", "Const")
def _barrier(cx, token, group_name):
    """A barrier is an all-reduce of the one-element token that nothing reads (kept alive)."""
    group, _ = _group(group_name)
    cx.emit1("HcomAllReduce", [("x", token)], {"reduction": "sum", "group": group, "fusion": 0})
    cx.keep_alive.append(cx.b.graph.op[-1].name)
    return cx.const(torch.empty((0,), dtype=torch.float32))


def _specialised_shape(cx, node=None):
    """GE's HcomReceive needs a static ``shape`` attribute: a symbolic received shape is
    specialised to this compile's sizes. ``int()`` on a SymInt records a guard, so Dynamo
    compiles one graph per received shape (as TorchAir does) instead of refusing. The sending
    side specialises its tensor too, so both ranks recompile at the same sizes and their
    cross-rank checks stay in step."""
    node = node if node is not None else cx.node
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise UnsupportedOpError(
            f"GE's HcomReceive needs a static shape, and recv %{cx.node.name if cx.node else '?'}"
            f" has no size metadata to specialise; use mode='npugraph_ex'")
    return [int(d) for d in val.shape]


@register_collective("torchair_dist::recv")
def _recv(cx, like, src, tag, group_name):
    group, ranks = _group(group_name)
    dtype, shape = cx.out()
    if any(d < 0 for d in shape):
        shape = _specialised_shape(cx)
    if src not in ranks:
        raise UnsupportedOpError(f"recv from rank {src}, which is not in group {group}")
    y = cx.emit1("HcomReceive", [], {"group": group, "sr_tag": int(tag),
                                     "src_rank": ranks.index(src), "shape": list(shape),
                                     "dtype": dtype})
    cx.keep_alive.append(cx.b.graph.op[-1].name)
    return y

