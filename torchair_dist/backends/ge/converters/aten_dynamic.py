"""Converters: ops that only a data-dependent count or offset stands between and a GE graph:
segment reductions (``segment_reduce``, ``embedding_bag``: the rows of each segment are known
only from the lengths/offsets values, the output shape is static) and the storage offset Dynamo
records for a slice at data-dependent bounds (``tensor_split`` by a tensor of indices).

Segments become per-row segment ids computed in the graph, reduced by GE's
UnsortedSegment{Sum,Max,Min,Prod}. Outputs whose LENGTH depends on the values (nonzero,
masked_select, unique, unique_consecutive, bincount) carry a -1 dim in the GE desc; the
executor computes the real size on every run. (put, masked_scatter, nonzero_static, whose
shapes are static, live in :mod:`.aten_order`.)
"""
from __future__ import annotations

import operator

import torch

from ....errors import UnsupportedOpError
from .aten_order import _flat, _numel
from .registry import register

aten = torch.ops.aten




@register([aten.sym_storage_offset.default], ["Const"])
def _sym_storage_offset(cx, x):
    """Refused: Dynamo records a view's storage offset when a graph returns a view of an input
    at a data-dependent place (``tensor_split`` by a tensor of indices). AOT then rebuilds that
    output from the input with the compiled output's own storage offset — and a GE output is a
    fresh tensor (offset 0), so the caller would get the wrong window (measured: bool
    tensor_split returned rows 0:2 for 1:3). Only a real view of the input could be right."""
    raise UnsupportedOpError(
        f"%{cx.node.name}: the graph returns a view of an input at a storage offset that "
        "depends on the input values (e.g. tensor_split by a tensor of indices): AOT rebuilds "
        "it from the GE output's offset, which a GE tensor does not have; clone the pieces, "
        "or compile with mode='npugraph_ex'")


_SEGMENT_OPS = {"sum": "UnsortedSegmentSum", "mean": "UnsortedSegmentSum",
                "max": "UnsortedSegmentMax", "min": "UnsortedSegmentMin",
                "prod": "UnsortedSegmentProd"}


def _segment_ids(cx, starts, n: int, s: int):
    """Per row 0..n-1, the index of the last of the s+1 ``starts`` at or before it (the row's
    segment), -1 for rows before the first start or at/after the last one (dropped by GE's
    UnsortedSegment* ops)."""
    i64 = torch.int64
    rows = cx.const(torch.arange(n, dtype=i64).reshape(n, 1), i64)
    at_or_before = cx.emit1("LessEqual", [("x1", cx.reshape(starts, [1, s + 1], (1, s + 1))),
                                          ("x2", rows)], None, (torch.bool, (n, s + 1)))
    ids = cx.emit1("ReduceSum", [("x", cx.cast(at_or_before, i64)),
                                 ("axes", cx.const([1], i64))], {"keep_dims": False}, (i64, (n,)))
    ids = cx.emit1("Sub", [("x1", ids), ("x2", cx.const(1, i64))], None, (i64, (n,)))
    past = cx.emit1("GreaterEqual", [("x1", ids), ("x2", cx.const(s, i64))], None,
                    (torch.bool, (n,)))
    return cx.emit1("SelectV2", [("condition", past), ("then", cx.const(-1, i64)),
                                 ("else", ids)], None, (i64, (n,)), port="result")


@register([aten.segment_reduce.default],
          ["UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin",
           "UnsortedSegmentProd", "Cumsum", "ConcatV2", "GatherV2", "Sub", "LessEqual",
           "GreaterEqual", "Equal", "ReduceSum", "SelectV2", "Maximum", "Minimum", "Mul", "Add",
           "RealDiv", "Reshape", "Cast", "Const"])
def _segment_reduce(cx, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                    unsafe=False, initial=None):
    """Reduce consecutive row segments of ``data`` (axis 0) given by 1-D ``lengths`` or
    ``offsets``. Each row gets a segment id (the number of segment starts at or before it,
    minus one; rows outside every segment get -1, which GE's UnsortedSegment* ops drop), then
    UnsortedSegment{Sum,Max,Min,Prod} reduces; ``initial`` joins every segment's reduction,
    and an empty segment gives ``initial`` or torch's identity (0, 1, -inf, inf; NaN for
    mean). Like the other dropped runtime checks, lengths not summing to the row count is not
    re-checked (rows past the last segment are dropped)."""
    dtype, shape = cx.out()
    if reduce not in _SEGMENT_OPS or indices is not None:
        raise UnsupportedOpError(f"%{cx.node.name}: aten.segment_reduce reduce={reduce!r}"
                                 f"{' with indices' if indices is not None else ''}: not converted")
    bounds = lengths if lengths is not None else offsets
    if bounds is None or len(bounds.shape) != 1 or axis % max(len(data.shape), 1) != 0 \
            or any(d < 0 for d in tuple(data.shape) + tuple(bounds.shape)):
        raise UnsupportedOpError(f"%{cx.node.name}: aten.segment_reduce along axis {axis} or with "
                                 "batched/symbolic lengths/offsets: GE lowering takes static "
                                 "1-D lengths or offsets along axis 0")
    n, s = data.shape[0], shape[0]
    bounds = cx.cast(bounds, torch.int64)
    i64 = torch.int64
    if lengths is not None:  # segment starts: 0, then the running sum of lengths
        ends = cx.emit1("Cumsum", [("x", bounds), ("axis", cx.const(0, torch.int32))], None,
                        (i64, (s,)))
        starts = cx.emit1("ConcatV2", [("x", [cx.const([0], i64), ends]),
                                       ("concat_dim", cx.const(0, torch.int32))], {"N": 2},
                          (i64, (s + 1,)))
        lens = bounds
    else:
        starts = bounds

        def part(lo):
            return cx.emit1("GatherV2", [("x", bounds), ("indices", cx.const(
                list(range(lo, lo + s)), i64)), ("axis", cx.const(0, i64))], None, (i64, (s,)))
        lens = cx.emit1("Sub", [("x1", part(1)), ("x2", part(0))], None, (i64, (s,)))
    ids = _segment_ids(cx, starts, n, s)
    y = cx.emit1(_SEGMENT_OPS[reduce], [("x", cx.cast(data, dtype)), ("segment_ids", ids),
                                         ("num_segments", cx.const(s, i64))])
    empty = cx.emit1("Equal", [("x1", lens), ("x2", cx.const(0, i64))], None, (torch.bool, (s,)))
    empty = cx.reshape(empty, [s] + [1] * (len(shape) - 1), (s,) + (1,) * (len(shape) - 1))
    if initial is not None:
        init = cx.const(initial, dtype)
        join = {"sum": "Add", "mean": "Add", "prod": "Mul", "max": "Maximum",
                "min": "Minimum"}[reduce]
        y = cx.emit1(join, [("x1", y), ("x2", init)])
    if reduce == "mean":
        count = cx.emit1("Maximum", [("x1", lens), ("x2", cx.const(1, i64))], None, (i64, (s,)))
        count = cx.reshape(cx.cast(count, dtype), [s] + [1] * (len(shape) - 1),
                           (s,) + (1,) * (len(shape) - 1))
        y = cx.emit1("RealDiv", [("x1", y), ("x2", count)])
    fill = initial if initial is not None else {
        "sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf"),
        "mean": float("nan")}[reduce]
    return cx.emit1("SelectV2", [("condition", empty), ("then", cx.const(fill, dtype)),
                                 ("else", y)], None, (dtype, tuple(shape)), port="result")


@register([aten._embedding_bag_forward_only.default, aten._embedding_bag.default],
          ["GatherV2", "UnsortedSegmentSum", "UnsortedSegmentMax", "ConcatV2", "LessEqual",
           "GreaterEqual", "Equal", "ReduceSum", "SelectV2", "Sub", "Mul", "Maximum", "RealDiv",
           "Reshape", "Cast", "Const"])
def _embedding_bag(cx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of embedding rows reduced (0 sum, 1 mean, 2 max): the rows gathered (GatherV2),
    scaled by per_sample_weights, each given its bag (segment ids from ``offsets``; rows equal
    to ``padding_idx`` get -1 and are left out), then UnsortedSegmentSum / Max; an empty bag
    is 0, as in torch. Only the bags output converts (offset2bag, bag_size and max_indices are
    torch's bookkeeping for the backward)."""
    for user in cx.node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target}: only its first output "
                                     "(the bags) converts to GE")
    if len(indices.shape) != 1 or len(offsets.shape) != 1 or mode not in (0, 1, 2) \
            or any(d < 0 for d in tuple(weight.shape) + tuple(indices.shape) + tuple(offsets.shape)):
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} with symbolic sizes, "
                                 f"non-1-D indices/offsets or mode {mode}: not converted")
    if include_last_offset and mode != 0:
        # torch's mean/max then treat the last bag as running to the end of ``indices`` while
        # sum stops at offsets[-1]: no single GE lowering matches both when they differ
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} with include_last_offset "
                                 "in mean/max mode: not converted (torch's result depends on "
                                 "whether offsets[-1] equals the number of indices)")
    dtype, shape = cx.out(0)
    i64 = torch.int64
    n, d = indices.shape[0], weight.shape[1]
    s = shape[0]
    idx = cx.cast(indices, i64)
    starts = cx.cast(offsets, i64)
    if not include_last_offset:
        starts = cx.emit1("ConcatV2", [("x", [starts, cx.const([n], i64)]),
                                       ("concat_dim", cx.const(0, torch.int32))], {"N": 2},
                          (i64, (s + 1,)))
    ids = _segment_ids(cx, starts, n, s)
    if padding_idx is not None and padding_idx >= 0:
        pad = cx.emit1("Equal", [("x1", idx), ("x2", cx.const(int(padding_idx), i64))], None,
                       (torch.bool, (n,)))
        ids = cx.emit1("SelectV2", [("condition", pad), ("then", cx.const(-1, i64)),
                                    ("else", ids)], None, (i64, (n,)), port="result")
    rows = cx.emit1("GatherV2", [("x", cx.cast(weight, dtype)), ("indices", idx),
                                 ("axis", cx.const(0, i64))], None, (dtype, (n, d)))
    if per_sample_weights is not None:
        psw = cx.reshape(cx.cast(per_sample_weights, dtype), [n, 1], (n, 1))
        rows = cx.emit1("Mul", [("x1", rows), ("x2", psw)], None, (dtype, (n, d)))
    count = cx.emit1("UnsortedSegmentSum", [("x", cx.const(torch.ones(n, dtype=i64), i64)),
                                            ("segment_ids", ids),
                                            ("num_segments", cx.const(s, i64))], None, (i64, (s,)))
    count = cx.reshape(count, [s, 1], (s, 1))
    op = "UnsortedSegmentMax" if mode == 2 else "UnsortedSegmentSum"
    y = cx.emit1(op, [("x", rows), ("segment_ids", ids), ("num_segments", cx.const(s, i64))],
                 None, (dtype, (s, d)))
    if mode == 1:
        div = cx.cast(cx.emit1("Maximum", [("x1", count), ("x2", cx.const(1, i64))], None,
                               (i64, (s, 1))), dtype)
        y = cx.emit1("RealDiv", [("x1", y), ("x2", div)], None, (dtype, (s, d)))
    if mode == 2:
        empty = cx.emit1("Equal", [("x1", count), ("x2", cx.const(0, i64))], None,
                         (torch.bool, (s, 1)))
        y = cx.emit1("SelectV2", [("condition", empty), ("then", cx.const(0, dtype)),
                                  ("else", y)], None, (dtype, (s, d)), port="result")
    outs = [y]
    for i in range(1, 4):  # unread (checked above): placeholders of the right descriptor
        o_dtype, o_shape = cx.out(i)
        outs.append(cx.const(torch.zeros([max(v, 0) for v in o_shape], dtype=o_dtype), o_dtype))
    return tuple(outs)


# -- outputs whose length depends on the values (a -1 dim in the GE desc) -------------------------
@register([aten.nonzero.default], ["NonZero"])
def _nonzero(cx, x):
    """The coordinates of the nonzeros, row-major, one row each: GE's NonZero (its row count
    is known when the graph runs)."""
    return cx.emit1("NonZero", [("x", x)], {"transpose": False, "dtype": torch.int64},
                    (torch.int64, (-1, len(x.shape))))


@register([aten.masked_select.default], ["BroadcastTo", "NonZero", "Unpack", "Index", "Const",
                                         "Cast", "Shape"])
def _masked_select(cx, x, mask):
    """x[mask] with both broadcast to their common shape: GE's Index with the mask's
    coordinates (NonZero) as the indices of every dim."""
    from .indexing import int_indices

    shape = _common_shape(cx, x, mask)
    # the target shape: a Const when static, else the run-time shape of the side that has it
    target = (cx.const(list(shape), torch.int64) if all(d >= 0 for d in shape) else
              cx.shape_of(x) if tuple(x.shape) == shape else
              cx.shape_of(mask) if tuple(mask.shape) == shape else None)
    if target is None:
        raise UnsupportedOpError(f"%{cx.node.name}: masked_select where both {tuple(x.shape)} "
                                 f"and {tuple(mask.shape)} broadcast to a symbolic shape has no "
                                 f"lowering")
    if tuple(x.shape) != shape:
        x = cx.emit1("BroadcastTo", [("x", x), ("shape", target)], desc=(x.dtype, shape))
    if tuple(mask.shape) != shape:
        mask = cx.emit1("BroadcastTo", [("x", mask), ("shape", target)],
                        desc=(torch.bool, shape))
    if not shape:  # 0-d: x[mask] of a 0-d mask is x[None][mask[None]]
        x, mask = cx.reshape(x, [1], (1,)), cx.reshape(mask, [1], (1,))
    given = int_indices(cx, [mask])
    n = len(given)
    return cx.emit1("Index", [("x", x), ("indexed_sizes", cx.const([1] * n, torch.int64)),
                              ("indexed_strides", cx.const([0] * n, torch.int64)),
                              ("indices", given)], desc=(x.dtype, (-1,)))


def _common_shape(cx, x, mask) -> tuple:
    """The shape x and mask broadcast to, as a GE descriptor (-1: symbolic). Symbolic dims are
    matched through the FX values (the same symbol, or 1 against anything); a symbolic dim
    against another one that may differ is refused by name (its size is known only at run
    time, and masked_select would need a run-time broadcast)."""
    xs, ms = tuple(x.shape), tuple(mask.shape)
    if all(d >= 0 for d in xs + ms):
        return tuple(torch.broadcast_shapes(xs, ms))
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None
            for a in cx.node.args[:2]]
    xv, mv = [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in vals]
    out = []
    for k in range(1, max(len(xs), len(ms)) + 1):
        a = xs[-k] if k <= len(xs) else 1
        b = ms[-k] if k <= len(ms) else 1
        if (a == b and a >= 0) or b == 1:
            out.append(a)
        elif a == 1:
            out.append(b)
        elif xv is not None and mv is not None and k <= len(xv) and k <= len(mv) and \
                str(xv[-k]) == str(mv[-k]):
            out.append(-1)  # the same symbol on both sides
        else:
            raise UnsupportedOpError(f"%{cx.node.name}: masked_select of shapes {xs} and {ms} "
                                     f"(-1: symbolic) that broadcast only at run time has no "
                                     f"lowering; mark the dims static or make them equal")
    return tuple(reversed(out))


def _empty_long(cx, i):
    """An output torch leaves empty (inverse/counts not asked for): a Const of its shape."""
    shape = cx.out(i)[1]
    return cx.const(torch.zeros(shape, dtype=torch.int64))


@register([aten._unique2.default], ["Reshape", "UniqueWithCountsAndSorting", "Const"])
def _unique2(cx, x, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique (sorted on every platform torch runs, whatever ``sorted`` says): GE's
    UniqueWithCountsAndSorting of the flattened tensor; the inverse gets x's shape back."""
    flat = _flat(cx, x) if x.shape != (_numel(x.shape),) else x
    n = flat.shape[0]
    y, inv, counts = cx.emit("UniqueWithCountsAndSorting", [("x", flat)],
                             {"return_inverse": True, "return_counts": True, "sorted": True},
                             [("y", (x.dtype, (-1,))), ("indices", (torch.int64, (n,))),
                              ("counts", (torch.int64, (-1,)))])
    inv = cx.reshape(inv, list(x.shape), tuple(x.shape)) if return_inverse else _empty_long(cx, 1)
    return [y, inv, counts if return_counts else _empty_long(cx, 2)]


@register([aten.unique_consecutive.default], ["Reshape", "UniqueConsecutive", "Const"])
def _unique_consecutive(cx, x, return_inverse=False, return_counts=False, dim=None):
    """GE's UniqueConsecutive; ``axis`` 1000 is GE's "flatten first" (torch's dim=None)."""
    if dim is not None:
        raise UnsupportedOpError(f"%{cx.node.name}: unique_consecutive(dim={dim}) has no "
                                 "lowering (dim=None does)")
    flat = _flat(cx, x)
    n = flat.shape[0]
    y, inv, counts = cx.emit("UniqueConsecutive", [("x", flat)],
                             {"return_idx": True, "return_counts": True, "axis": 1000},
                             [("y", (x.dtype, (-1,))), ("idx", (torch.int64, (n,))),
                              ("count", (torch.int64, (-1,)))])
    inv = cx.reshape(inv, list(x.shape), tuple(x.shape)) if return_inverse else _empty_long(cx, 1)
    return [y, inv, counts if return_counts else _empty_long(cx, 2)]


@register([aten.bincount.default], ["Cast", "ReduceMax", "Add", "Maximum", "Fill", "Bincount",
                                    "Const", "ConcatV2", "Shape"])
def _bincount(cx, x, weights=None, minlength=0):
    """GE's Bincount with size = max(max(x) + 1, minlength) computed in the graph; without
    weights every element counts 1 (int64, torch's result type). A symbolic length (dynamic
    shapes) takes the weights' shape from x at run time, and the maximum over x with a -1
    appended (an empty x then gives minlength, as torch does)."""
    dtype = cx.out_dtype
    if weights is not None and weights.dtype.is_floating_point and \
            not dtype.is_floating_point:
        # torch 2.11's fake bincount says int64 for float weights (eager: the weights' float
        # type): the graph was traced with the wrong type, and casting the sums to it would
        # truncate them
        raise UnsupportedOpError(
            f"%{cx.node.name}: aten.bincount with {weights.dtype} weights was traced with "
            f"output type {dtype} (torch {torch.__version__}'s fake bincount; eager gives "
            f"{weights.dtype}): the sums would be truncated; use torch 2.13+ or "
            f"mode='npugraph_ex'")
    n = _numel(x.shape)
    arr = cx.cast(x, torch.int32)
    if n == 0:
        size = cx.const(int(minlength), torch.int32)
    else:
        over = arr
        if n < 0:
            over = cx.emit1("ConcatV2", [("x", [arr, cx.const([-1], torch.int32)]),
                                         ("concat_dim", cx.const(0, torch.int32))], {"N": 2},
                            (torch.int32, (-1,)))
        top = cx.emit1("ReduceMax", [("x", over), ("axes", cx.const([0], torch.int64))],
                       {"keep_dims": False}, (torch.int32, ()))
        size = cx.emit1("Add", [("x1", top), ("x2", cx.const(1, torch.int32))],
                        desc=(torch.int32, ()))
        size = cx.emit1("Maximum", [("x1", size), ("x2", cx.const(int(minlength), torch.int32))],
                        desc=(torch.int32, ()))
    if weights is None:
        dims = cx.const([n], torch.int64) if n >= 0 else cx.shape_of(x)
        w = cx.emit1("Fill", [("dims", dims), ("value", cx.const(1, dtype))],
                     desc=(dtype, (n,) if n >= 0 else (-1,)))
    else:
        w = cx.cast(weights, dtype)
    return cx.emit1("Bincount", [("array", arr), ("size", size), ("weights", w)],
                    desc=(dtype, (-1,)), port="bins")


@register([aten.repeat_interleave.Tensor], ["RepeatInterleave", "Range", "Cast", "Const"])
def _repeat_interleave_counts(cx, repeats, *, output_size=None):
    """repeat_interleave(repeats): index i repeated repeats[i] times, GE's RepeatInterleave of
    arange(len(repeats)); the length is ``output_size`` when given, else data-dependent."""
    n = repeats.shape[0]
    dtype = cx.out_dtype
    count = cx.tensor(n if n >= 0 else cx.dim(repeats, 0), dtype)
    index = cx.emit1("Range", [("start", cx.const(0, dtype)), ("limit", count),
                               ("delta", cx.const(1, dtype))], desc=(dtype, (n,)))
    return cx.emit1("RepeatInterleave", [("x", index), ("repeats", cx.cast(repeats, torch.int64))],
                    {"axis": 0})
