"""Converters: views and reshapes, concatenation, slicing, splitting, indexing, gathers."""
from __future__ import annotations

import operator
from typing import Any, List, Sequence

import torch

from ....errors import UnsupportedOpError
from ..builder import TensorRef
from .indexing import int_indices  # noqa: F401  (converters import it from here too)
from .registry import register

aten = torch.ops.aten
_INT64_MAX = 2 ** 63 - 1


def _norm(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


@register([operator.getitem], [])
def _getitem(cx, seq, i):
    return seq[i]


@register([aten.view.default, aten.reshape.default, aten._unsafe_view.default],
          ["Reshape", "Const", "Pack", "Cast"])
def _view(cx, x, shape):
    return cx.reshape(x, list(shape), cx.out()[1])


@register([aten.unsqueeze.default], ["Unsqueeze"])
def _unsqueeze(cx, x, dim):
    return cx.emit1("Unsqueeze", [("x", x)], {"axes": [_norm(dim, len(x.shape) + 1)]})


@register([aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default], ["Squeeze"])
def _squeeze(cx, x, dims=None):
    rank = len(x.shape)
    if dims is None:
        dims = range(rank)
    elif isinstance(dims, int):
        dims = [dims]
    axis = sorted({_norm(d, rank) for d in dims if rank and x.shape[_norm(d, rank)] == 1})
    if not axis:
        return cx.emit1("Identity", [("x", x)])
    return cx.emit1("Squeeze", [("x", x)], {"axis": axis})


@register([aten.permute.default], ["Transpose", "Const"])
def _permute(cx, x, dims):
    perm = [_norm(d, len(x.shape)) for d in dims]
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))])


@register([aten.transpose.int], ["Transpose", "Const"])
def _transpose(cx, x, dim0, dim1):
    perm = list(range(len(x.shape)))
    a, b = _norm(dim0, len(perm)), _norm(dim1, len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))])


@register([aten.t.default], ["Transpose", "Identity", "Const"])
def _t(cx, x):
    if len(x.shape) < 2:
        return cx.emit1("Identity", [("x", x)])
    return _transpose(cx, x, 0, 1)


def _dim_of(cx, x: TensorRef, j: int) -> Any:
    """Dimension j of x: an int when static, else a scalar int64 ref computed at run time."""
    return cx.dim(x, j)


@register([aten.expand.default], ["BroadcastTo", "Const", "Pack", "Shape", "GatherV2"])
def _expand(cx, x, size, *, implicit=False):
    lead = len(size) - len(x.shape)
    dims: List[Any] = []
    for i, s in enumerate(size):
        dims.append(_dim_of(cx, x, i - lead) if isinstance(s, int) and s == -1 else s)
    return cx.emit1("BroadcastTo", [("x", x), ("shape", cx.int_list(dims))])


@register([aten.cat.default], ["ConcatV2", "Cast", "Const"])
def _cat(cx, tensors, dim=0):
    dtype, shape = cx.out()
    rank = len(shape)
    parts = [cx.cast(t, dtype) for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0
                                                        and rank != 1)]
    return cx.emit1("ConcatV2", [("x", parts), ("concat_dim", cx.const(_norm(dim, rank), torch.int64))],
                    {"N": len(parts)})


@register([aten.stack.default], ["Pack", "Cast"])
def _stack(cx, tensors, dim=0):
    dtype, shape = cx.out()
    parts = [cx.cast(t, dtype) for t in tensors]
    return cx.emit1("Pack", [("x", parts)], {"axis": _norm(dim, len(shape)), "N": len(parts)})


@register([aten.slice.Tensor], ["StridedSlice", "Const", "Pack", "Cast"])
def _slice(cx, x, dim=0, start=None, end=None, step=1):
    rank = len(x.shape)
    dim = _norm(dim, rank)
    others = sum(1 << i for i in range(rank) if i != dim)
    begin_mask = others | (1 << dim if start is None else 0)
    open_end = end is None or (isinstance(end, int) and (end >= _INT64_MAX or
                                                         (x.shape[dim] >= 0 and end >= x.shape[dim])))
    end_mask = others | (1 << dim if open_end else 0)
    begin = [0] * rank
    stop = [0] * rank
    begin[dim] = 0 if start is None else start
    stop[dim] = 0 if open_end else end
    strides = [1] * rank
    strides[dim] = step
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.int_list(begin)),
                                     ("end", cx.int_list(stop)), ("strides", cx.int_list(strides))],
                    {"begin_mask": begin_mask, "end_mask": end_mask})


def gather_v2(cx, x: TensorRef, indices: TensorRef, axis: int) -> TensorRef:
    """GatherV2 of ``x`` (bool, outside the IR's BasicType, travels as int8 and back)."""
    dtype, shape = cx.out()
    work = torch.int8 if x.dtype == torch.bool else x.dtype
    x = cx.cast(x, work)
    gathered = shape
    if not x.shape:  # GatherV2 needs x of rank >= 1: a 0-d x is gathered as [1]
        x = cx.reshape(x, [1], (1,))
        gathered = tuple(indices.shape)
    y = cx.emit1("GatherV2", [("x", x), ("indices", indices),
                              ("axis", cx.const(axis, torch.int64))], None, (work, gathered))
    if gathered != shape:
        y = cx.reshape(y, list(shape), shape)
    return cx.cast(y, dtype)


@register([aten.select.int], ["GatherV2", "Const", "Cast"])
def _select(cx, x, dim, index):
    dim = _norm(dim, len(x.shape))
    if isinstance(index, int) and index < 0 and x.shape[dim] >= 0:
        index += x.shape[dim]
    return gather_v2(cx, x, cx.tensor(index, torch.int64), dim)


@register([aten.split.Tensor, aten.split_with_sizes.default], ["SplitV", "Const", "Pack", "Cast"])
def _split(cx, x, split, dim=0):
    """Sizes come from the FX arguments (ints or symbols); for ``split.Tensor`` every piece but
    the last has ``split`` elements and the last is inferred (-1)."""
    dim = _norm(dim, len(x.shape))
    outs = [cx.out(i) for i in range(len(cx.val))]
    if isinstance(split, (list, tuple)) and not isinstance(split, TensorRef):  # a NamedTuple
        sizes = list(split)
    else:
        sizes = [split] * (len(outs) - 1) + [-1]
    return cx.emit("SplitV", [("x", x), ("size_splits", cx.int_list(sizes)),
                              ("split_dim", cx.const(dim, torch.int32))],
                   {"num_split": len(outs)}, [("y", outs)])


@register([aten.unbind.int], ["Unpack"])
def _unbind(cx, x, dim=0):
    outs = [cx.out(i) for i in range(len(cx.val))]
    return cx.emit("Unpack", [("x", x)], {"num": len(outs), "axis": _norm(dim, len(x.shape))},
                   [("y", outs)])


@register([aten.embedding.default], ["GatherV2", "Const"])
def _embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return cx.emit1("GatherV2", [("x", weight), ("indices", indices),
                                 ("axis", cx.const(0, torch.int64))])


@register([aten.index_select.default], ["GatherV2", "Const", "Cast"])
def _index_select(cx, x, dim, index):
    return gather_v2(cx, x, index, _norm(dim, len(x.shape)))


@register([aten.gather.default], ["GatherElements"])
def _gather(cx, x, dim, index, *, sparse_grad=False):
    return cx.emit1("GatherElements", [("x", x), ("index", index)],
                    {"dim": _norm(dim, len(x.shape))})


@register([aten.index.Tensor], ["Index", "Const", "NonZero", "Unpack", "Cast"])
def _index(cx, x, indices: Sequence[Any]):
    """GE Index: ``indexed_sizes[i]`` is 1 when dim i is indexed by the next tensor of
    ``indices``, 0 when it is taken whole (torch's ``None``); ``indexed_strides`` is unused
    by torch-style advanced indexing and written as zeros. Indices are int64 (the IR's)."""
    indices = [t if t is None else cx.cast(t, torch.int64) if t.dtype != torch.bool else t
               for t in indices]
    indices = int_indices(cx, indices)
    mask = [0 if t is None else 1 for t in indices]
    given = [t for t in indices if t is not None]
    return cx.emit1("Index", [("x", x), ("indexed_sizes", cx.const(mask, torch.int64)),
                              ("indexed_strides", cx.const([0] * len(mask), torch.int64)),
                              ("indices", given)])


def _tri(cx, ge_type, x, diagonal):
    """Triu/Tril (bool, outside the IR's BasicType, travels as int8 and back)."""
    work = torch.int8 if x.dtype == torch.bool else x.dtype
    y = cx.emit1(ge_type, [("x", cx.cast(x, work))], {"diagonal": int(diagonal)}, (work, x.shape))
    return cx.cast(y, x.dtype)


@register([aten.triu.default], ["Triu", "Cast"])
def _triu(cx, x, diagonal=0):
    return _tri(cx, "Triu", x, diagonal)


@register([aten.tril.default], ["Tril", "Cast"])
def _tril(cx, x, diagonal=0):
    return _tri(cx, "Tril", x, diagonal)


def _slice_dim(cx, x: TensorRef, dim: int, start: Any, end: Any) -> TensorRef:
    """x[..., start:end, ...] along ``dim`` (end None = to the end)."""
    rank = len(x.shape)
    shape = list(x.shape)
    if isinstance(start, int) and isinstance(end, int) and shape[dim] >= 0:
        shape[dim] = max(0, min(end, shape[dim]) - start)
    elif end is None and isinstance(start, int) and shape[dim] >= 0:
        shape[dim] = max(0, shape[dim] - start)
    else:
        shape[dim] = -1
    others = sum(1 << i for i in range(rank) if i != dim)
    begin, stop = [0] * rank, [0] * rank
    begin[dim] = start
    stop[dim] = 0 if end is None else end
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.int_list(begin)),
                                     ("end", cx.int_list(stop)), ("strides", cx.int_list([1] * rank))],
                    {"begin_mask": others, "end_mask": others | (1 << dim if end is None else 0)},
                    (x.dtype, tuple(shape)))


def _splice(cx, x: TensorRef, src: TensorRef, dim: int, start: Any, end: Any) -> TensorRef:
    """x with x[start:end] along dim replaced by src: Concat(x[:start], src, x[end:])."""
    parts = [_slice_dim(cx, x, dim, 0, start), cx.cast(src, x.dtype), _slice_dim(cx, x, dim, end, None)]
    return cx.emit1("ConcatV2", [("x", parts), ("concat_dim", cx.const(dim, torch.int64))],
                    {"N": 3})


def _bound(v: Any, size: int) -> Any:
    if isinstance(v, int) and size >= 0:
        v = v + size if v < 0 else v
        return max(0, min(v, size))
    return v


def _bound_at_run_time(cx, v: Any, size: TensorRef, default: Any) -> TensorRef:
    """A slice bound on a symbolic dim of run-time length ``size`` (int64 scalar) as torch
    clamps it: None is ``default``; a negative int counts from the end; then clamped to
    [0, size]."""
    i64 = torch.int64
    if v is None or (isinstance(v, int) and v >= _INT64_MAX):
        return cx.tensor(default, i64)
    v = cx.tensor(v, i64)
    wrapped = cx.emit1("Add", [("x1", v), ("x2", size)], None, (i64, ()))
    neg = cx.emit1("Less", [("x1", v), ("x2", cx.const(0, i64))], None, (torch.bool, ()))
    v = cx.emit1("SelectV2", [("condition", neg), ("then", wrapped), ("else", v)], None,
                 (i64, ()), port="result")
    v = cx.emit1("Maximum", [("x1", v), ("x2", cx.const(0, i64))], None, (i64, ()))
    return cx.emit1("Minimum", [("x1", v), ("x2", size)], None, (i64, ()))


@register([aten.slice_scatter.default], ["StridedSlice", "ConcatV2", "Const", "Pack", "Cast",
                                         "ScatterNdUpdate", "TensorMove", "BroadcastTo", "Reshape",
                                         "Range", "Shape", "GatherV2", "Add", "Less", "SelectV2",
                                         "Maximum", "Minimum"])
def _slice_scatter(cx, x, src, dim=0, start=None, end=None, step=1):
    dim = _norm(dim, len(x.shape))
    size = x.shape[dim]
    symbolic = size < 0 or not all(isinstance(v, int) for v in (start or 0, 0 if end is None
                                                                  else end))
    if step != 1:  # every step-th slice: an index_copy of the slice positions
        from .aten_update import _index_copy

        if not isinstance(step, int):
            raise UnsupportedOpError(f"slice_scatter with the symbolic step {step} "
                                     f"(%{cx.node.name}) has no GE lowering")
        if not symbolic:
            lo = _bound(0 if start is None else start, size)
            hi = size if end is None or end >= _INT64_MAX else _bound(end, size)
            return _index_copy(cx, x, dim, cx.const(list(range(lo, hi, step)), torch.int64), src)
        n = cx.tensor(cx.dim(x, dim), torch.int64)  # the positions computed at run time
        lo = _bound_at_run_time(cx, start, n, 0)
        hi = cx.emit1("Maximum", [("x1", _bound_at_run_time(cx, end, n, n)), ("x2", lo)], None,
                      (torch.int64, ()))
        pos = cx.emit1("Range", [("start", lo), ("limit", hi),
                                 ("delta", cx.const(step, torch.int64))], None,
                       (torch.int64, (-1,)))
        return _index_copy(cx, x, dim, pos, src)
    open_end = end is None or (isinstance(end, int) and end >= _INT64_MAX)
    if symbolic and not (open_end and isinstance(start, int) and start >= 0):
        n = cx.tensor(cx.dim(x, dim), torch.int64)
        start = _bound_at_run_time(cx, start, n, 0)
        end = cx.emit1("Maximum", [("x1", _bound_at_run_time(cx, end, n, n)), ("x2", start)],
                       None, (torch.int64, ()))  # an end before the start: empty, at start
        return _splice(cx, x, src, dim, start, end)
    start = _bound(0 if start is None else start, size)
    if open_end and size < 0:  # x[start:] on a symbolic dim: src is the whole tail
        parts = [_slice_dim(cx, x, dim, 0, start), cx.cast(src, x.dtype)]
        return cx.emit1("ConcatV2", [("x", parts), ("concat_dim", cx.const(dim, torch.int64))],
                        {"N": 2})
    end = size if open_end else _bound(end, size)
    if isinstance(start, int) and isinstance(end, int) and end < start:
        end = start  # torch: an end before the start is an empty slice at start (x[7:3])
    return _splice(cx, x, src, dim, start, end)


@register([aten.select_scatter.default],
          ["StridedSlice", "ConcatV2", "Unsqueeze", "Const", "Pack", "Cast"])
def _select_scatter(cx, x, src, dim, index):
    dim = _norm(dim, len(x.shape))
    index = _bound(index, x.shape[dim])
    src = cx.emit1("Unsqueeze", [("x", src)], {"axes": [dim]},
                   (src.dtype, tuple(src.shape[:dim]) + (1,) + tuple(src.shape[dim:])))
    end = index + 1 if isinstance(index, int) else cx.emit1(
        "Add", [("x1", index), ("x2", cx.const(1, torch.int64))], None, (torch.int64, ()))
    return _splice(cx, x, src, dim, index, end)


# InplaceIndexAdd's var/updates dtypes; others (bfloat16) accumulate in float32
@register([aten.index_add.default], ["TensorMove", "InplaceIndexAdd", "Const", "Cast"])
def _index_add(cx, x, dim, index, source, *, alpha=1):
    """``x`` with ``alpha * source`` slices added at ``index`` along ``dim`` (duplicates
    accumulate): the MoE combine. GE's InplaceIndexAdd updates its ``var`` input, so it gets a
    TensorMove copy of ``x`` (the FX graph is functional: ``x`` may have other readers)."""
    dtype = x.dtype
    work = cx.work_dtype("InplaceIndexAdd", dtype, "var")
    # the Cast to the working dtype is already a fresh buffer; otherwise TensorMove copies
    var = cx.cast(x, work) if work != dtype else cx.emit1("TensorMove", [("x", x)], None,
                                                         (dtype, x.shape))
    if index.dtype not in (torch.int32, torch.int64):
        index = cx.cast(index, torch.int64)
    updates = cx.cast(source, work)
    scale = None if alpha == 1 else cx.const(alpha, work)
    y = cx.emit1("InplaceIndexAdd", [("var", var), ("indices", index), ("updates", updates),
                                     ("alpha", scale)], {"axis": _norm(dim, len(x.shape))},
                 (work, x.shape), port="var")
    return cx.cast(y, dtype)


@register([aten.repeat.default], ["Tile", "Reshape", "Const", "Pack", "Cast"])
def _repeat(cx, x, repeats):
    """Tile; extra leading repeats first give ``x`` leading 1-dims (bool travels as int8)."""
    dtype, shape = cx.out()
    lead = len(repeats) - len(x.shape)
    if lead:
        x = cx.reshape(x, [1] * lead + cx.dims(x), (1,) * lead + tuple(x.shape))
    work = torch.int8 if dtype == torch.bool else dtype
    y = cx.emit1("Tile", [("x", cx.cast(x, work)), ("multiples", cx.int_list(list(repeats)))], None,
                 (work, shape))
    return cx.cast(y, dtype)


@register([aten.constant_pad_nd.default], ["PadV3", "Const", "Cast"])
def _constant_pad_nd(cx, x, pad, value=0):
    """PadV3 ``constant``; torch lists (before, after) from the last dim backwards, PadV3 one
    contiguous (before, after) pair per dim from the first."""
    from ....errors import UnsupportedOpError

    if any(not isinstance(p, int) or p < 0 for p in pad):
        raise UnsupportedOpError(f"%{cx.node.name}: constant_pad_nd with negative or symbolic "
                                 f"pads {list(pad)} has no GE lowering")
    rank = len(x.shape)
    pairs = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        pairs[rank - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    flat = [p for pair in pairs for p in pair]
    return cx.emit1("PadV3", [("x", x), ("paddings", cx.const(flat, torch.int64)),
                              ("constant_values", cx.tensor(value, x.dtype))],
                    {"mode": "constant", "paddings_contiguous": True})


@register([aten.flip.default], ["ReverseV2", "Const", "Cast"])
def _flip(cx, x, dims):
    """ReverseV2 (bf16, outside its IR dtypes, flips as float32: exact)."""
    dtype = x.dtype
    work = cx.work_dtype("ReverseV2", dtype)
    rank = len(x.shape)
    y = cx.emit1("ReverseV2", [("x", cx.cast(x, work)),
                               ("axis", cx.const([d % rank for d in dims], torch.int64))], None,
                 (work, x.shape))
    return cx.cast(y, dtype)


@register([aten.roll.default], ["Roll", "Cast"])
def _roll(cx, x, shifts, dims=()):
    """Roll (dims empty: the flattened tensor rolls, as in torch). Dtypes outside Roll's IR
    list (bool, int16, float64) roll as float32."""
    dtype = x.dtype
    work = cx.work_dtype("Roll", dtype)
    shifts = [int(s) for s in (shifts if isinstance(shifts, (list, tuple)) else [shifts])]
    dims = [int(d) % max(len(x.shape), 1) for d in (dims or [])]
    y = cx.emit1("Roll", [("x", cx.cast(x, work))], {"shifts": shifts, "dims": dims},
                 (work, x.shape))
    return cx.cast(y, dtype)


@register([aten.unfold.default], ["GatherV2", "Transpose", "Const", "Range", "Sub", "FloorDiv",
                                   "Add", "Mul", "Reshape", "Shape", "Cast"])
def _unfold(cx, x, dim, size, step):
    """Sliding windows along ``dim``: GatherV2 of the window positions (a [n, size] Const;
    for a symbolic dim, ``Range(n)[:, None] * step + arange(size)`` with n = (len - size) //
    step + 1 read at run time), then the window axis moved last, as torch lays it out."""
    from ....errors import UnsupportedOpError

    if not x.shape:  # a 0-d tensor unfolds as a 1-element vector
        out_shape = cx.out()[1]
        y = _unfold(cx, cx.reshape(x, [1], (1,)), 0, size, step)
        return cx.reshape(y, list(out_shape), out_shape)
    rank = len(x.shape)
    d = dim % rank
    length = x.shape[d]
    if isinstance(size, int) and isinstance(step, int) and length < 0:
        i64 = torch.int64
        span = cx.emit1("Sub", [("x1", cx.dim(x, d)), ("x2", cx.const(size, i64))], None, (i64, ()))
        n_ref = cx.emit1("Add", [("x1", cx.emit1("FloorDiv", [("x1", span),
                                                              ("x2", cx.const(step, i64))],
                                                 None, (i64, ()))),
                                 ("x2", cx.const(1, i64))], None, (i64, ()))
        starts = cx.emit1("Range", [("start", cx.const(0, i64)), ("limit", n_ref),
                                    ("delta", cx.const(1, i64))], desc=(i64, (-1,)))
        if step != 1:
            starts = cx.emit1("Mul", [("x1", starts), ("x2", cx.const(step, i64))], None,
                              (i64, (-1,)))
        starts = cx.reshape(starts, [cx.dim(starts, 0), 1], (-1, 1))
        index = cx.emit1("Add", [("x1", starts), ("x2", cx.const([list(range(size))], i64))],
                         None, (i64, (-1, size)))
        n = -1
    elif length < 0:
        raise UnsupportedOpError(f"%{cx.node.name}: unfold of a symbolic dim with a symbolic "
                                 "window size or step has no GE lowering")
    else:
        n = (length - size) // step + 1
        index = cx.const(torch.arange(n).unsqueeze(1) * step + torch.arange(size))
    gathered_shape = tuple(x.shape[:d]) + (n, size) + tuple(x.shape[d + 1:])
    g = cx.emit1("GatherV2", [("x", x), ("indices", index),
                              ("axis", cx.const(d, torch.int64))], None, (x.dtype, gathered_shape))
    perm = [i for i in range(rank + 1) if i != d + 1] + [d + 1]
    return cx.emit1("Transpose", [("x", g), ("perm", cx.const(perm, torch.int64))])


def _hint(v) -> int:
    """A (symbolic) size's value in this compile, read without adding a guard."""
    if isinstance(v, int):
        return v
    hint = getattr(v.node, "hint", None)
    if hint is None:
        raise UnsupportedOpError(f"the symbolic size {v} has no value to order strides by")
    return int(hint)


def _storage_order(val) -> list:
    """The dims of a dense tensor ``val`` (fake) from the outermost in memory to the innermost
    (its strides sorted, size-1 dims kept in place); None when it has gaps or overlaps."""
    sizes, strides = [_hint(s) for s in val.shape], [_hint(s) for s in val.stride()]
    order = sorted(range(len(sizes)), key=lambda d: -strides[d])  # stable: ties keep dim order
    if 0 in sizes:  # no elements: any order reads the same (none)
        return order
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


@register([aten.resize.default],
          ["Transpose", "Reshape", "Fill", "ConcatV2", "StridedSlice", "Sub", "Maximum", "Mul",
           "Pack", "Shape", "GatherV2", "Const", "Cast"])
def _resize(cx, x, size, memory_format=None):
    """Functional ``resize``: the new tensor's storage starts with ``x``'s elements in
    ``x``'s storage order, the rest is new memory (filled as PyTorch's deterministic mode fills
    it: NaN for floats, the largest value for integers); its strides are the output's (the
    memory format), so the values are that storage read in the output's layout. ``x`` must be
    dense (no gaps or overlaps); sizes may be symbolic."""
    from ....errors import UnsupportedOpError as Refused

    src_val, out_val = cx.node.args[0].meta.get("val"), cx.val
    src_order = _storage_order(src_val) if src_val is not None else None
    out_order = _storage_order(out_val) if out_val is not None else None
    if src_order is None or out_order is None:
        raise Refused(f"%{cx.node.name}: resize of an input with gaps or overlaps in its storage: "
                      "not lowered")
    i64 = torch.int64
    dtype, shape = cx.out()
    rank = len(x.shape)
    if src_order != list(range(rank)):
        x = cx.emit1("Transpose", [("x", x), ("perm", cx.const(src_order, i64))], None,
                     (x.dtype, tuple(x.shape[d] for d in src_order)))
    flat = cx.reshape(x, [-1], (-1,))
    have = cx.tensor(cx.dim(flat, 0), i64) if flat.shape[0] < 0 else cx.const(flat.shape[0], i64)
    sizes = list(size)
    total = cx.const(1, i64)
    for s in sizes:
        total = cx.emit1("Mul", [("x1", total), ("x2", cx.tensor(s, i64))], None, (i64, ()))
    pad = cx.emit1("Maximum", [("x1", cx.emit1("Sub", [("x1", total), ("x2", have)], None,
                                               (i64, ()))),
                               ("x2", cx.const(0, i64))], None, (i64, ()))
    fill_value = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max \
        if dtype != torch.bool else True
    fresh = cx.emit1("Fill", [("dims", cx.int_list([pad])), ("value", cx.const(fill_value, dtype))],
                     None, (dtype, (-1,)))
    both = cx.emit1("ConcatV2", [("x", [flat, fresh]), ("concat_dim", cx.const(0, torch.int32))],
                    {"N": 2}, (dtype, (-1,)))
    kept = cx.emit1("StridedSlice", [("x", both), ("begin", cx.const([0], i64)),
                                     ("end", cx.int_list([total])),
                                     ("strides", cx.const([1], i64))],
                    {"begin_mask": 0, "end_mask": 0}, (dtype, (-1,)))
    stored = [sizes[d] for d in out_order]
    y = cx.reshape(kept, stored, tuple(shape[d] for d in out_order))
    if out_order != list(range(len(shape))):
        inverse = [out_order.index(d) for d in range(len(shape))]
        y = cx.emit1("Transpose", [("x", y), ("perm", cx.const(inverse, i64))], None,
                     (dtype, tuple(shape)))
    return y
