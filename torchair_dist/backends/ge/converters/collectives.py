"""Converters: ``_c10d_functional`` collectives -> Hcom* GE ops (which Hcom op each becomes is
in the collectives' spec table; :func:`register_collective` reads it).

The ``group`` attribute is :func:`~torchair_dist.collectives.groups.ge_group_attr`: the HCCL
communicator name on Ascend, else the stable group name (``tag=<tag>;ranks=<r0>,<r1>,...``),
identical on every rank, which the reference runtime resolves back to a live process group. Counts
and displacements of ``HcomAllToAllV`` are in elements.
"""
from __future__ import annotations

import math
from typing import Any, List, Sequence

import torch

from ....collectives import spec
from ....collectives.groups import ge_group_attr, stable_name_of
from ....errors import UnsupportedOpError
from .registry import register

c10d = torch.ops._c10d_functional


def register_collective(op: str, *helpers: str):
    """Register the converter of the collective ``op`` (``ns::name``, a row of the spec table,
    :mod:`torchair_dist.collectives.spec`): for its default overload, declaring the row's GE
    ops plus the ``helpers`` ops the converter also emits."""
    row = spec.SPECS[op]
    return register([row.overload()], row.ge_ops + helpers)

# reduce op names of _c10d_functional -> GE's ``reduction`` attribute
_REDUCTIONS = {"sum": "sum", "product": "prod", "prod": "prod", "min": "min", "max": "max"}


def _reduction(op: str) -> str:
    name = str(op).lower()
    if name in _REDUCTIONS:
        return _REDUCTIONS[name]
    raise UnsupportedOpError(
        f"GE collectives support the reductions sum/product/min/max (and avg as sum + divide); "
        f"got {op!r}")


def _avg(cx, y, group_size: int):
    """GE has no average reduction: divide the sum by the group size."""
    dtype = y.dtype
    return cx.emit1("RealDiv", [("x1", y), ("x2", cx.const(group_size, dtype))], None,
                    (dtype, y.shape))


@register_collective("_c10d_functional::all_reduce", "RealDiv", "Const")
def _all_reduce(cx, x, reduce_op: str, group_name: Any):
    group = stable_name_of(group_name)
    avg = str(reduce_op).lower() == "avg"
    y = cx.emit1("HcomAllReduce", [("x", x)], {
        "reduction": "sum" if avg else _reduction(reduce_op), "group": ge_group_attr(group),
        "fusion": 0})
    return _avg(cx, y, len(group.split("ranks=")[1].split(","))) if avg else y


@register_collective("_c10d_functional::all_reduce_coalesced", "RealDiv", "Const")
def _all_reduce_coalesced(cx, xs: Sequence[Any], reduce_op: str, group_name: Any):
    return [_coalesced_one(cx, x, reduce_op, group_name, cx.out(i)) for i, x in enumerate(xs)]


def _coalesced_one(cx, x, reduce_op, group_name, desc):
    group = stable_name_of(group_name)
    avg = str(reduce_op).lower() == "avg"
    (y,) = cx.emit("HcomAllReduce", [("x", x)], {
        "reduction": "sum" if avg else _reduction(reduce_op), "group": ge_group_attr(group),
        "fusion": 0},
        [("y", desc)])
    return _avg(cx, y, len(group.split("ranks=")[1].split(","))) if avg else y


@register_collective("_c10d_functional::all_gather_into_tensor")
def _all_gather(cx, x, group_size: int, group_name: Any):
    return cx.emit1("HcomAllGather", [("x", x)], {
        "rank_size": int(group_size), "group": ge_group_attr(group_name), "fusion": 0})


@register_collective("_c10d_functional::reduce_scatter_tensor", "RealDiv", "Const")
def _reduce_scatter(cx, x, reduce_op: str, group_size: int, group_name: Any):
    avg = str(reduce_op).lower() == "avg"
    y = cx.emit1("HcomReduceScatter", [("x", x)], {
        "reduction": "sum" if avg else _reduction(reduce_op), "fusion": 0,
        "group": ge_group_attr(group_name), "rank_size": int(group_size)})
    return _avg(cx, y, int(group_size)) if avg else y


@register_collective("_c10d_functional::broadcast")
def _broadcast(cx, x, src: int, group_name: Any):
    """``src`` is the root's rank within the group (what c10d's functional broadcast uses)."""
    return cx.emit("HcomBroadcast", [("x", [x])], {
        "root_rank": int(src), "group": ge_group_attr(group_name), "fusion": 0},
        [("y", [cx.out()])])[0]


def _counts(cx, splits: Sequence[Any], row: Any):
    """Element counts (int64 1-D) and their exclusive prefix sums from row split sizes; ``row``
    (elements per row) is an int or a shape-[] int64 ref."""
    if all(isinstance(s, int) for s in splits) and isinstance(row, int):
        counts = [s * row for s in splits]
        displs = [sum(counts[:i]) for i in range(len(counts))]
        return cx.const(counts, torch.int64), cx.const(displs, torch.int64)
    n = (len(splits),)
    counts = cx.emit1("Mul", [("x1", cx.int_list(list(splits))), ("x2", cx.tensor(row, torch.int64))],
                      None, (torch.int64, n))
    displs = cx.emit1("Cumsum", [("x", counts), ("axis", cx.const(0, torch.int64))],
                      {"exclusive": True}, (torch.int64, n))
    return counts, displs


def _row_elements(cx, x) -> Any:
    """Elements per dim-0 row of x: an int, or a ref when a trailing dim is symbolic."""
    if all(d >= 0 for d in x.shape[1:]):
        return math.prod(x.shape[1:])
    dims = cx.dims(x)[1:]
    return cx.emit1("ReduceProd", [("x", cx.int_list(dims)), ("axes", cx.const([0], torch.int64))],
                    {"keep_dims": False}, (torch.int64, ()))


@register_collective("_c10d_functional::all_to_all_single", "Reshape", "Const", "Pack", "Mul",
                     "Cumsum", "Cast", "Shape", "GatherV2", "ReduceProd")
def _all_to_all_single(cx, x, output_split_sizes: List[Any], input_split_sizes: List[Any],
                       group_name: Any):
    group = stable_name_of(group_name)
    dtype, out_shape = cx.out()
    if not output_split_sizes and not input_split_sizes:
        # No split lists: even by definition on every rank -> HcomAllToAll, as TorchAir does.
        # Explicit lists always lower to HcomAllToAllV, even when this rank's sizes happen to
        # be even: the choice must follow what every rank shares (the program's form), never
        # one rank's sizes, or ranks would issue different HCCL ops and hang.
        return cx.emit1("HcomAllToAll", [("x", x)], {"group": ge_group_attr(group)})
    row = _row_elements(cx, x)
    send_counts, send_displs = _counts(cx, input_split_sizes, row)
    recv_counts, recv_displs = _counts(cx, output_split_sizes, row)
    total = -1 if any(d < 0 for d in out_shape) else math.prod(out_shape)
    flat = cx.emit1("HcomAllToAllV", [
        ("send_data", x), ("send_counts", send_counts), ("send_displacements", send_displs),
        ("recv_counts", recv_counts), ("recv_displacements", recv_displs)],
        {"group": ge_group_attr(group)}, (dtype, (total,)), port="recv_data")
    return cx.reshape(flat, [-1] + cx.dims(x)[1:], out_shape)


@register([c10d.wait_tensor.default], ["Identity"])
def _wait_tensor(cx, x):
    return cx.emit1("Identity", [("x", x)])
