"""Converters: searches, NaN-aware medians and mode, reductions into indexed places, and writes
into computed positions (diagonal/as_strided scatters, put, masked_scatter, nonzero_static).
Outputs whose length depends on the values live in :mod:`.aten_dynamic`.

Writes whose positions are known at conversion time (a diagonal, an ``as_strided`` window of a
contiguous tensor) are one ``ScatterElements`` of the flattened tensor with a Const index; the
ones that depend on values (put, masked_scatter, nonzero_static) compute the index in the graph.
"""
from __future__ import annotations

import math

import torch

from ....errors import UnsupportedOpError
from .registry import register
from .series import Ew

aten = torch.ops.aten
prims = torch.ops.prims


def _numel(shape) -> int:
    """The element count of a descriptor shape; -1 when a dim is symbolic (-1)."""
    if any(d < 0 for d in shape):
        return -1
    return int(math.prod(shape)) if shape else 1


def _flat(cx, x):
    n = _numel(x.shape)
    return cx.reshape(x, [n], (n,)) if tuple(x.shape) != (n,) else x


def _scatter_flat(cx, x, positions: torch.Tensor, src):
    """``x`` with its elements at flat ``positions`` (a LongTensor shaped like ``src``)
    replaced by ``src``'s, in order."""
    pos = positions.reshape(-1)
    if pos.numel() != pos.unique().numel():
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} writes one element twice "
                                 "(overlapping strides): which write wins is not defined")
    dtype, shape = cx.out()
    flat = _flat(cx, cx.cast(x, dtype))
    if pos.numel():
        flat = cx.emit1("ScatterElements", [("data", flat), ("indices", cx.const(pos)),
                                            ("updates", _flat(cx, cx.cast(src, dtype)))],
                        {"axis": 0, "reduction": "none"}, (dtype, flat.shape))
    return cx.reshape(flat, cx.dims(x), shape)  # x's own shape (run-time where symbolic)


_SCATTER = ["ScatterElements", "Reshape", "Cast", "Const", "Shape", "GatherV2", "Pack"]


@register([aten.diagonal_scatter.default], _SCATTER)
def _diagonal_scatter(cx, x, src, offset=0, dim1=0, dim2=1):
    where = torch.arange(_numel(x.shape)).reshape(x.shape).diagonal(offset, dim1, dim2)
    return _scatter_flat(cx, x, where, src)


@register([aten.as_strided_scatter.default, prims.as_strided_scatter.default], _SCATTER)
def _as_strided_scatter(cx, x, src, size, stride, storage_offset=0):
    """Positions in the storage of a contiguous ``x`` (what the graph's value of x is)."""
    fx = cx.node.args
    val = fx[0].meta.get("val")
    if val is not None and not val.is_contiguous():
        raise UnsupportedOpError(f"%{cx.node.name}: as_strided_scatter into a non-contiguous "
                                 "tensor: its storage layout is not a GE tensor's")
    # the positions are computed here: symbolic sizes, strides and offset are fixed by guards
    x = cx.static_shape(x, fx[0], "input")
    size = cx.static_ints(list(size), fx[2] if len(fx) > 2 else None, "size")
    stride = cx.static_ints(list(stride), fx[3] if len(fx) > 3 else None, "stride")
    offset = cx.static_int(storage_offset or 0, fx[4] if len(fx) > 4 else
                           cx.node.kwargs.get("storage_offset"), "storage_offset")
    where = torch.arange(_numel(x.shape)).as_strided(size, stride, offset)
    return _scatter_flat(cx, x, where, src)


# -- reductions into indexed places ------------------------------------------------------------
_SCATTER_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def scatter_reduce_value(cx, x, axis, index, src, reduce, include_self):
    """scatter_reduce of ``src`` into ``x`` along ``axis``: ScatterElements with a reduction
    (ONNX semantics: reduces into the existing values); without ``include_self`` the places
    are first overwritten with the reduction's identity; "mean" is :func:`scatter_mean`."""
    if reduce == "mean":
        return scatter_mean(cx, x, axis, index, src, include_self)
    if reduce not in _SCATTER_REDUCE:
        raise UnsupportedOpError(f"%{cx.node.name}: scatter_reduce(reduce={reduce!r}) has no GE "
                                 "lowering (sum/prod/mean/amax/amin do)")
    if not include_self:  # first overwrite the scattered-to places with the identity
        dtype = x.dtype
        ident = {"sum": 0, "prod": 1}.get(reduce)
        if ident is None and dtype == torch.bool:
            ident = reduce == "amin"  # max over {False, True} starts at False, min at True
        elif ident is None:
            big = torch.finfo(dtype).max if dtype.is_floating_point else torch.iinfo(dtype).max
            ident = -big if reduce == "amax" else big
            if dtype.is_floating_point:
                ident = float("-inf") if reduce == "amax" else float("inf")
        fill = cx.emit1("Fill", [("dims", cx.shape_of(src)),
                                 ("value", cx.const(ident, dtype))], desc=(dtype, src.shape))
        x = cx.emit1("ScatterElements", [("data", x), ("indices", index), ("updates", fill)],
                     {"axis": axis, "reduction": "none"}, desc=(dtype, x.shape))
    return cx.emit1("ScatterElements", [("data", x), ("indices", index), ("updates", src)],
                    {"axis": axis, "reduction": _SCATTER_REDUCE[reduce]}, desc=(x.dtype, x.shape))


def scatter_mean(cx, x, axis, index, src, include_self):
    """torch's scatter_reduce(reduce="mean"): sum and count per place (the place's own value
    counts once when ``include_self``); places nothing is scattered to keep x; integers divide
    with floor (torch's rule)."""
    dtype, shape = x.dtype, tuple(x.shape)
    ones_src = cx.emit1("Fill", [("dims", cx.shape_of(src)),
                                 ("value", cx.const(1, dtype))], desc=(dtype, src.shape))
    start = cx.emit1("Fill", [("dims", cx.shape_of(x)),
                              ("value", cx.const(1 if include_self else 0, dtype))],
                     desc=(dtype, shape))
    count = cx.emit1("ScatterElements", [("data", start), ("indices", index),
                                         ("updates", ones_src)],
                     {"axis": axis, "reduction": "add"}, (dtype, shape))
    base = x
    if not include_self:
        zeros = cx.emit1("Fill", [("dims", cx.shape_of(src)),
                                  ("value", cx.const(0, dtype))], desc=(dtype, src.shape))
        base = cx.emit1("ScatterElements", [("data", x), ("indices", index), ("updates", zeros)],
                        {"axis": axis, "reduction": "none"}, (dtype, shape))
    total = cx.emit1("ScatterElements", [("data", base), ("indices", index), ("updates", src)],
                     {"axis": axis, "reduction": "add"}, (dtype, shape))
    e = Ew(cx, dtype, shape)
    empty = e.equal(count, 0)
    safe = e.where(empty, 1, count)
    mean = (e.div(total, safe) if dtype.is_floating_point
            else cx.emit1("FloorDiv", [("x1", total), ("x2", safe)], desc=(dtype, shape)))
    return e.where(empty, x, mean)


@register([aten.index_reduce.default], ["Reshape", "BroadcastTo", "ScatterElements", "Fill",
                                        "RealDiv", "FloorDiv", "Equal", "SelectV2", "Cast",
                                        "Const", "Shape"])
def _index_reduce(cx, x, dim, index, source, reduce, *, include_self=True):
    """index_reduce is scatter_reduce with the 1-D index broadcast along ``dim`` of source."""
    if not source.shape:  # a 0-d source/self: one place, scattered as a [1] tensor
        one = cx.reshape(cx.cast(index, torch.int64), [1], (1,))
        y = scatter_reduce_value(cx, cx.reshape(x, [1], (1,)), 0, one,
                                 cx.reshape(source, [1], (1,)), reduce, include_self)
        return cx.reshape(y, [], ())
    rank = len(source.shape)
    d = dim % rank
    view = [1] * rank
    view[d] = index.shape[0] if index.shape else 1
    idx = cx.reshape(cx.cast(index, torch.int64), view, tuple(view))
    if tuple(view) != tuple(source.shape):
        idx = cx.emit1("BroadcastTo", [("x", idx), ("shape", cx.shape_of(source))],
                       desc=(torch.int64, tuple(source.shape)))
    return scatter_reduce_value(cx, x, d, idx, source, reduce, include_self)


# -- searches ----------------------------------------------------------------------------------
def _search_dtype(cx, seq):
    """GE's SearchSorted takes no float64 or bool; a float32 copy could merge distinct
    float64 values, so those are refused by name."""
    if seq.dtype in (torch.float64, torch.bool):
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of {seq.dtype}: GE's "
                                 "SearchSorted takes no float64/bool (a float32 copy could merge "
                                 "distinct values)")


@register([aten.searchsorted.Tensor], ["SearchSorted", "Cast"])
def _searchsorted(cx, sorted_sequence, values, *, out_int32=False, right=False, side=None,
                  sorter=None):
    right = bool(right) or side == "right"
    _search_dtype(cx, sorted_sequence)
    inputs = [("sorted_sequence", sorted_sequence), ("values", cx.cast(values,
                                                                        sorted_sequence.dtype))]
    if sorter is not None:
        inputs.append(("sorter", cx.cast(sorter, torch.int64)))
    out = torch.int32 if out_int32 else torch.int64
    return cx.emit1("SearchSorted", inputs, {"dtype": out, "right": right},
                    (out, tuple(values.shape)), port="out")


@register([aten.bucketize.Tensor], ["SearchSorted", "Cast"])
def _bucketize(cx, x, boundaries, *, out_int32=False, right=False):
    """bucketize(x, b, right) == searchsorted(b, x, right) for a 1-D b."""
    _search_dtype(cx, boundaries)
    out = torch.int32 if out_int32 else torch.int64
    return cx.emit1("SearchSorted", [("sorted_sequence", boundaries),
                                     ("values", cx.cast(x, boundaries.dtype))],
                    {"dtype": out, "right": bool(right)}, (out, tuple(x.shape)), port="out")


# -- NaN-aware median --------------------------------------------------------------------------
def _nanmedian(cx, x, dim, keepdim, with_index):
    """The lower median of the non-NaN values: NaN is sorted as +inf (a stable ascending
    Sort), k = max((count - 1) // 2, 0) is picked with GatherElements; a slice of NaNs only
    gives NaN (its first element). If the median is +inf and a NaN precedes a +inf in the
    slice, the index may name the NaN's place (the value is right)."""
    dtype = x.dtype
    if not x.shape:
        return [x, cx.const(0, torch.int64)] if with_index else x
    d = dim % len(x.shape)
    e = Ew(cx, dtype, x.shape)
    nan = e.isnan(x)
    keys = e.where(nan, math.inf, x)
    values, order = cx.emit("Sort", [("x", keys)], {"axis": d, "descending": False,
                                                     "stable": True},
                            [("y1", (dtype, x.shape)), ("y2", (torch.int32, x.shape))])
    kept = tuple(1 if i == d else s for i, s in enumerate(x.shape))
    valid = cx.emit1("ReduceSum", [("x", cx.cast(cx.emit1("LogicalNot", [("x", nan)],
                                                         desc=(torch.bool, x.shape)),
                                                torch.int64)),
                                   ("axes", cx.const([d], torch.int64))],
                     {"keep_dims": True}, (torch.int64, kept))
    ei = Ew(cx, torch.int64, kept)
    k = cx.emit1("FloorDiv", [("x1", ei.sub(valid, 1)), ("x2", cx.const(2, torch.int64))],
                 desc=(torch.int64, kept))
    k = cx.emit1("Maximum", [("x1", k), ("x2", cx.const(0, torch.int64))],
                 desc=(torch.int64, kept))
    v = cx.emit1("GatherElements", [("x", values), ("index", k)], {"dim": d}, (dtype, kept))
    none = Ew(cx, dtype, kept)
    v = none.where(ei.equal(valid, 0), math.nan, v)
    i = cx.emit1("GatherElements", [("x", cx.cast(order, torch.int64)), ("index", k)],
                 {"dim": d}, (torch.int64, kept))
    out_shape = cx.out(0)[1] if with_index else cx.out()[1]
    if tuple(out_shape) != kept:  # keepdim=False: x's dims but d (run-time where symbolic)
        dims = [v for j, v in enumerate(cx.dims(x)) if j != d]
        v = cx.reshape(v, dims, out_shape)
        i = cx.reshape(i, dims, out_shape)
    return [v, i] if with_index else v


_MEDIAN = ["IsNan", "SelectV2", "Fill", "Sort", "LogicalNot", "ReduceSum", "Sub", "FloorDiv",
           "Maximum", "GatherElements", "Equal", "Reshape", "Cast", "Const", "Shape", "GatherV2",
           "Pack"]


@register([aten.nanmedian.default], _MEDIAN)
def _nanmedian_all(cx, x):
    if not x.shape:
        return x
    flat = _flat(cx, x)
    if not x.dtype.is_floating_point:  # no NaN: the lower median
        from .aten_select import _kth

        from .aten_select import lower_median_index

        k = lower_median_index(cx, flat, 0)
        return cx.reshape(_kth(cx, flat, k, 0, True, False), [], ())
    return _nanmedian(cx, flat, 0, False, False)


@register([aten.nanmedian.dim], _MEDIAN)
def _nanmedian_dim(cx, x, dim=0, keepdim=False):
    """Values always; the indices only when nothing reads them would be too strict, but torch
    does not define which index an all-NaN slice (or a tie) gets (its nth_element picks 0, 0,
    0, 2, 2, 3, 5 for all-NaN slices of 1..7), so a graph that reads them is refused."""
    import operator

    if any(u.target is operator.getitem and u.args[1] == 1 and u.users for u in cx.node.users):
        raise UnsupportedOpError(
            f"%{cx.node.name}: nanmedian indices: torch does not specify which index an "
            "all-NaN slice or a tie returns (its selection algorithm decides), so a lowering "
            "cannot promise torch's; use the values, or torch.sort and a gather")
    if not x.dtype.is_floating_point:
        from .aten_select import _kth

        from .aten_select import lower_median_index

        k = lower_median_index(cx, x, dim % max(len(x.shape), 1))
        return _kth(cx, x, k, dim, keepdim, True)
    return _nanmedian(cx, x, dim, keepdim, True)


# -- writes at positions computed from values ----------------------------------------------------
@register([aten.put.default], ["Reshape", "Cast", "Less", "Add", "SelectV2", "ScatterElements",
                               "Const", "ReduceProd", "Shape", "GatherV2", "Pack"])
def _put(cx, x, index, source, accumulate=False):
    """x.flatten() with source written (or added) at ``index`` (negative counts from the end),
    one ScatterElements."""
    dtype, shape = cx.out()
    n = _numel(x.shape)
    if n < 0:  # the element count a negative index counts back from, at run time
        n = cx.emit1("ReduceProd", [("x", cx.shape_of(x)), ("axes", cx.const([0], torch.int64))],
                     {"keep_dims": False}, (torch.int64, ()))
    flat = _flat(cx, cx.cast(x, dtype))
    idx = _flat(cx, cx.cast(index, torch.int64))
    if not idx.shape[0]:
        return cx.reshape(flat, cx.dims(x), shape)
    e = Ew(cx, torch.int64, idx.shape)
    idx = e.where(e.less(idx, 0), e.add(idx, n), idx)
    y = cx.emit1("ScatterElements", [("data", flat), ("indices", idx),
                                     ("updates", _flat(cx, cx.cast(source, dtype)))],
                 {"axis": 0, "reduction": "add" if accumulate else "none"}, (dtype, flat.shape))
    return cx.reshape(y, cx.dims(x), shape)


@register([aten.masked_scatter.default], ["BroadcastTo", "Reshape", "Cast", "Cumsum", "Sub",
                                          "Maximum", "GatherV2", "SelectV2", "Const", "Shape"])
def _masked_scatter(cx, x, mask, source):
    """out[i] = source[k] at the k-th True of the mask (in row-major order), else x[i]: the
    rank k is a running count of the mask; a mask with more Trues than source has elements
    gathers out of range (torch raises too)."""
    dtype, shape = cx.out()
    n = _numel(shape)
    like = x if tuple(x.shape) == tuple(shape) else mask if tuple(mask.shape) == tuple(shape) \
        else None
    if like is None and n < 0:
        raise UnsupportedOpError(f"%{cx.node.name}: masked_scatter of {tuple(x.shape)} and mask "
                                 f"{tuple(mask.shape)} broadcast to a symbolic shape: not lowered")
    if tuple(mask.shape) != tuple(shape):
        mask = cx.emit1("BroadcastTo", [("x", mask), ("shape", cx.shape_of(like) if like is not None
                                                      else cx.const(list(shape), torch.int64))],
                        desc=(torch.bool, tuple(shape)))
    m = _flat(cx, mask)
    e = Ew(cx, torch.int64, (n,))
    rank = cx.emit1("Cumsum", [("x", cx.cast(m, torch.int64)), ("axis", cx.const(0, torch.int64))],
                    desc=(torch.int64, (n,)))
    pos = cx.emit1("Maximum", [("x1", e.sub(rank, 1)), ("x2", cx.const(0, torch.int64))],
                   desc=(torch.int64, (n,)))
    src = _flat(cx, cx.cast(source, dtype))
    picked = cx.emit1("GatherV2", [("x", src), ("indices", pos),
                                   ("axis", cx.const(0, torch.int64))], desc=(dtype, (n,)))
    y = cx.emit1("SelectV2", [("condition", m), ("then", picked),
                              ("else", _flat(cx, cx.cast(x, dtype)))], desc=(dtype, (n,)),
                 port="result")
    return cx.reshape(y, cx.dims(like) if like is not None else list(shape), shape)


@register([aten.nonzero_static.default], ["NotEqual", "Reshape", "Cast", "Cumsum", "Sub",
                                          "Less", "LogicalAnd", "SelectV2", "Fill", "BroadcastTo",
                                          "ScatterElements", "StridedSlice", "Const"])
def _nonzero_static(cx, x, *, size, fill_value=-1):
    """The coordinates of the first ``size`` nonzeros (row-major), padded with fill_value:
    each nonzero's rank (a running count) picks its row; the rest go to a spare row that is
    cut off. The coordinates of every flat position are a Const."""
    if not x.shape:  # torch: (size, 0), no coordinates to write
        return cx.emit1("Fill", [("dims", cx.const([int(size), 0], torch.int64)),
                                 ("value", cx.const(int(fill_value), torch.int64))],
                        desc=(torch.int64, (int(size), 0)))
    rank, n, size = len(x.shape), _numel(x.shape), int(size)
    buffer = cx.emit1("Fill", [("dims", cx.const([size + 1, rank], torch.int64)),
                               ("value", cx.const(int(fill_value), torch.int64))],
                      desc=(torch.int64, (size + 1, rank)))
    if n == 0 or size == 0:
        out = buffer
    else:
        flat = _flat(cx, x)
        nz = cx.emit1("NotEqual", [("x1", flat), ("x2", cx.const(0, flat.dtype))],
                      desc=(torch.bool, (n,)))
        e = Ew(cx, torch.int64, (n,))
        count = cx.emit1("Cumsum", [("x", cx.cast(nz, torch.int64)),
                                    ("axis", cx.const(0, torch.int64))], desc=(torch.int64, (n,)))
        row = e.sub(count, 1)
        keep = e.and_(nz, e.less(row, size))
        row = e.where(keep, row, float(size))
        row = cx.emit1("BroadcastTo", [("x", cx.reshape(row, [n, 1], (n, 1))),
                                       ("shape", cx.const([n, rank], torch.int64))],
                       desc=(torch.int64, (n, rank)))
        coords = torch.stack(torch.unravel_index(torch.arange(n), tuple(x.shape)), 1)
        out = cx.emit1("ScatterElements", [("data", buffer), ("indices", row),
                                           ("updates", cx.const(coords))],
                       {"axis": 0, "reduction": "none"}, (torch.int64, (size + 1, rank)))
    return cx.emit1("StridedSlice", [("x", out), ("begin", cx.const([0, 0], torch.int64)),
                                     ("end", cx.const([size, rank], torch.int64)),
                                     ("strides", cx.const([1, 1], torch.int64))],
                    desc=(torch.int64, (size, rank)))


@register([aten.mode.default], ["Transpose", "Sort", "Cast", "Equal", "LogicalNot", "Range",
                                "SelectV2", "Fill", "Cummax", "Sub", "Add", "ArgMaxV2",
                                "GatherElements", "Unsqueeze", "Reshape", "ConcatV2",
                                "StridedSlice", "Const"])
def _mode(cx, x, dim=-1, keepdim=False):
    """torch.mode as torch's CPU kernel gives it: the smallest of the most frequent values and
    the index of its LAST occurrence. A stable ascending Sort keeps equal values in their
    original order, so a run's last element is that value's last occurrence; the running
    count within each run (position - run start + 1, the start carried by Cummax) first
    reaches its maximum at the end of the smallest most-frequent run."""
    (vdt, vshape), (idt, ishape) = cx.out(0), cx.out(1)
    if not x.shape:
        return [x, cx.const(0, torch.int64)]
    if any(v < 0 for v in x.shape):  # the lowering unrolls over sizes: fixed by guards
        x = cx.static_shape(x, cx.node.args[0], "input")
        vshape = ishape = tuple(cx.static_int(-1, v, "output size") for v in cx.val[0].shape)
    rank = len(x.shape)
    d = dim % rank
    if d != rank - 1:
        perm = [i for i in range(rank) if i != d] + [d]
        x = cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))],
                     desc=(x.dtype, tuple(x.shape[p] for p in perm)))
    shape = tuple(x.shape)
    n = shape[-1]
    values, order = cx.emit("Sort", [("x", x)], {"axis": -1, "descending": False, "stable": True},
                            [("y1", (x.dtype, shape)), ("y2", (torch.int32, shape))])
    prev = _shift_right(cx, values)
    same = cx.emit1("Equal", [("x1", values), ("x2", prev)], desc=(torch.bool, shape))
    pos = cx.const(torch.arange(n, dtype=torch.int64).expand(shape).contiguous())
    start = cx.emit1("SelectV2", [("condition", same), ("then", cx.const(0, torch.int64)),
                                  ("else", pos)], desc=(torch.int64, shape), port="result")
    run_start, _ = cx.emit("Cummax", [("x", start)], {"dim": rank - 1},
                           [("y", (torch.int64, shape)), ("indices", (torch.int64, shape))])
    e = Ew(cx, torch.int64, shape)
    count = e.sub(pos, run_start)
    at = cx.emit1("ArgMaxV2", [("x", count), ("dimension", cx.const(rank - 1, torch.int64))],
                  {"dtype": torch.int64}, (torch.int64, shape[:-1]))
    at = cx.emit1("Unsqueeze", [("x", at)], {"axes": [rank - 1]}, (torch.int64, shape[:-1] + (1,)))
    v = cx.emit1("GatherElements", [("x", values), ("index", at)], {"dim": rank - 1},
                 (x.dtype, shape[:-1] + (1,)))
    i = cx.emit1("GatherElements", [("x", cx.cast(order, torch.int64)), ("index", at)],
                 {"dim": rank - 1}, (torch.int64, shape[:-1] + (1,)))
    kept = shape[:-1] + (1,)
    if keepdim and d != rank - 1:
        back = list(range(d)) + [rank - 1] + list(range(d, rank - 1))
        kept = tuple(kept[p] for p in back)
        v = cx.emit1("Transpose", [("x", v), ("perm", cx.const(back, torch.int64))],
                     desc=(x.dtype, kept))
        i = cx.emit1("Transpose", [("x", i), ("perm", cx.const(back, torch.int64))],
                     desc=(torch.int64, kept))
    v = cx.reshape(v, list(vshape), tuple(vshape))
    i = cx.reshape(i, list(ishape), tuple(ishape))
    return [cx.cast(v, vdt), cx.cast(i, idt)]


def _shift_right(cx, v):
    """v[..., i - 1] with v[..., 0] repeated in front (so position 0 never equals its
    predecessor only when v[0] is NaN; the Equal below is False for i = 0 by the Select)."""
    shape = tuple(v.shape)
    n = shape[-1]
    r = len(shape)
    head = cx.emit1("StridedSlice", [("x", v), ("begin", cx.const([0] * r, torch.int64)),
                                     ("end", cx.const(list(shape[:-1]) + [n - 1], torch.int64)),
                                     ("strides", cx.const([1] * r, torch.int64))],
                    desc=(v.dtype, shape[:-1] + (n - 1,)))
    if n == 1:
        return v
    first = cx.emit1("StridedSlice", [("x", v), ("begin", cx.const([0] * r, torch.int64)),
                                      ("end", cx.const(list(shape[:-1]) + [1], torch.int64)),
                                      ("strides", cx.const([1] * r, torch.int64))],
                     desc=(v.dtype, shape[:-1] + (1,)))
    return cx.emit1("ConcatV2", [("x", [first, head]), ("concat_dim", cx.const(r - 1,
                                                                                torch.int64))],
                    {"N": 2}, (v.dtype, shape))
