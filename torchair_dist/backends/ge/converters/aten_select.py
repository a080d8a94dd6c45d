"""Converters: sorting and selection (sort, max/min over a dim, argmin, histc, floor_divide)
and grouped matmul (MoE experts: ``aten._grouped_mm``, transformers' ``grouped_mm_fallback``).

Dtypes outside an op's IR list are computed in float32 and cast back (exact for bf16/fp16):
``Sort`` has no bf16, ``ArgMaxWithValue``/``ArgMinWithValue`` only floats (other dtypes use
``ReduceMax``/``ReduceMin`` + ``ArgMaxV2``/``ArgMin``), ``Histogram`` float32/float16/int32.
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten

_ARGMAX_VALUE_DTYPES = {torch.float32, torch.float16, torch.bfloat16}
_ARGMIN_VALUE_DTYPES = {torch.float32, torch.float16}


def _norm(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


@register([aten.sort.default, aten.sort.stable], ["Sort", "Cast"])
def _sort(cx, x, dim=-1, descending=False, *, stable=False):
    if isinstance(dim, bool):  # sort.stable passes stable positionally in some traces
        dim, stable = -1, dim
    (vdt, vshape), (_, ishape) = cx.out(0), cx.out(1)
    work = cx.work_dtype("Sort", x.dtype)
    values, idx = cx.emit("Sort", [("x", cx.cast(x, work))],
                          {"axis": _norm(dim, len(x.shape)), "descending": bool(descending),
                           "stable": bool(stable)},
                          [("y1", (work, vshape)), ("y2", (torch.int32, ishape))])
    return [cx.cast(values, vdt), cx.cast(idx, torch.int64)]


def _reduce_with_index(cx, x, dim, keepdim, largest: bool):
    rank = len(x.shape)
    d = _norm(dim, rank)
    (vdt, vshape), (_, ishape) = cx.out(0), cx.out(1)
    fused = _ARGMAX_VALUE_DTYPES if largest else _ARGMIN_VALUE_DTYPES
    if x.dtype in fused:
        idx, values = cx.emit("ArgMaxWithValue" if largest else "ArgMinWithValue", [("x", x)],
                              {"dimension": d, "keep_dims": bool(keepdim)},
                              [("indice", (torch.int32, ishape)), ("values", (vdt, vshape))])
        return [values, cx.cast(idx, torch.int64)]
    values = cx.emit1("ReduceMax" if largest else "ReduceMin",
                      [("x", x), ("axes", cx.const([d], torch.int64))],
                      {"keep_dims": bool(keepdim)}, (vdt, vshape))
    idx = _arg(cx, x, d, keepdim, largest, ishape)
    return [values, idx]


def _arg(cx, x, d, keepdim, largest, shape):
    flat = tuple(s for i, s in enumerate(x.shape) if i != d)
    y = cx.emit1("ArgMaxV2" if largest else "ArgMin",
                 [("x", x), ("dimension", cx.const(d, torch.int64))], {"dtype": torch.int64},
                 (torch.int64, flat))
    if keepdim:
        y = cx.emit1("Unsqueeze", [("x", y)], {"axes": [d]}, (torch.int64, shape))
    return y


_REDUCE_INDEX_EMITS = ["ArgMaxWithValue", "ArgMinWithValue", "ReduceMax", "ReduceMin", "ArgMaxV2",
                       "ArgMin", "Unsqueeze", "Cast", "Const"]


@register([aten.max.dim], _REDUCE_INDEX_EMITS)
def _max_dim(cx, x, dim, keepdim=False):
    return _reduce_with_index(cx, x, dim, keepdim, largest=True)


@register([aten.min.dim], _REDUCE_INDEX_EMITS)
def _min_dim(cx, x, dim, keepdim=False):
    return _reduce_with_index(cx, x, dim, keepdim, largest=False)


@register([aten.max.default, aten.min.default], ["ReduceMax", "ReduceMin", "Const"])
def _max_all(cx, x):
    ge_type = "ReduceMax" if cx.node.target is aten.max.default else "ReduceMin"
    return cx.emit1(ge_type, [("x", x), ("axes", cx.const(list(range(len(x.shape))), torch.int64))],
                    {"keep_dims": False})


@register([aten.argmin.default], ["ArgMin", "Reshape", "Unsqueeze", "Const"])
def _argmin(cx, x, dim=None, keepdim=False):
    shape = cx.out()[1]
    if dim is None:
        n = -1 if any(d < 0 for d in x.shape) else int(torch.tensor(x.shape).prod())
        y = _arg(cx, cx.reshape(x, [-1], [n]), 0, False, False, ())
        return cx.reshape(y, list(shape), shape) if keepdim else y
    return _arg(cx, x, _norm(dim, len(x.shape)), keepdim, False, shape)


@register([aten.floor_divide.default, aten.floor_divide.Scalar], ["FloorDiv", "Cast", "Const"])
def _floor_divide(cx, a, b):
    dtype = cx.out_dtype
    return cx.emit1("FloorDiv", [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))])


_HIST_IN = {torch.float32, torch.float16, torch.int32}


@register([aten.histc.default], ["Histogram", "Cast"])
def _histc(cx, x, bins=100, min=0, max=0):
    """GE Histogram (counts in float32): ``min == max`` uses the data's range, as torch does."""
    dtype, shape = cx.out()
    x = x if x.dtype in _HIST_IN else cx.cast(x, torch.float32)
    y = cx.emit1("Histogram", [("x", x)], {"bins": int(bins), "min": float(min), "max": float(max)},
                 (torch.float32, shape))
    return cx.cast(y, dtype)


# -- grouped matmul (MoE experts) -------------------------------------------------------------
_GMM_DTYPES = {torch.float32, torch.float16, torch.bfloat16}


def _grouped(cx, x, weight, offs):
    """GE GroupedMatmul, one x [M, K] split along M by the cumulative ``offs`` (group_type 0,
    group_list_type 0), one weight [E, K, N], one output [M, N] (split_item 3)."""
    if len(x.shape) != 2 or len(weight.shape) != 3 or offs is None:
        raise UnsupportedOpError(
            f"%{cx.node.name}: GE GroupedMatmul lowering supports a 2-D input, 3-D expert "
            f"weights and offsets; got input {list(x.shape)}, weights {list(weight.shape)}")
    if x.dtype not in _GMM_DTYPES or weight.dtype != x.dtype:
        raise UnsupportedOpError(f"%{cx.node.name}: grouped matmul of {x.dtype} x {weight.dtype}")
    dtype, shape = cx.out()
    y = cx.emit("GroupedMatmul", [("x", [x]), ("weight", [weight]),
                                  ("group_list", cx.cast(offs, torch.int64))],
                {"split_item": 3, "group_type": 0, "group_list_type": 0,
                 "transpose_weight": False, "transpose_x": False},
                [("y", [(x.dtype, shape)])])[0]
    return cx.cast(y, dtype)


@register([aten._grouped_mm.default], ["GroupedMatmul", "Cast"])
def _grouped_mm(cx, x, weight, offs=None, bias=None, out_dtype=None):
    if bias is not None:
        raise UnsupportedOpError(f"%{cx.node.name}: _grouped_mm with bias has no GE lowering")
    return _grouped(cx, x, weight, offs)


def register_transformers_ops() -> None:
    """transformers' ``grouped_mm_fallback`` custom op (float32/fp16 experts under compile)."""
    try:
        op = torch.ops.transformers.grouped_mm_fallback.default
    except (AttributeError, RuntimeError):
        op = "transformers.grouped_mm_fallback.default"  # registered by name; not loaded yet
    register([op], ["GroupedMatmul", "Cast"])(lambda cx, x, weight, offs: _grouped(cx, x, weight, offs))


register_transformers_ops()


_KTH = ["Sort", "GatherElements", "Reshape", "Cast", "Const", "Fill", "Pack", "Shape", "GatherV2", "Sub", "FloorDiv"]


def _kth(cx, x, k, dim: int, keepdim: bool, with_index: bool):
    """The k-th smallest (0-based) along ``dim``: a stable ascending Sort and a gather."""
    rank = len(x.shape)
    if with_index and not x.dtype.is_floating_point:
        from .aten_linalg import _read

        if _read(cx, 1):
            raise UnsupportedOpError(
                f"%{cx.node.name}: {cx.node.target} indices of an integer tensor: among equal "
                "values torch does not specify which index it returns, and the stable Sort "
                "this lowers to may pick another one")
    if rank == 0:
        return [x, cx.const(0, torch.int64)] if with_index else x
    d = dim % rank
    vdt, vshape = cx.out(0) if with_index else cx.out()
    values, idx = cx.emit("Sort", [("x", x)], {"axis": d, "descending": False, "stable": True},
                          [("y1", (x.dtype, x.shape)), ("y2", (torch.int32, x.shape))])
    kept = tuple(1 if i == d else s for i, s in enumerate(x.shape))
    if all(v >= 0 for v in kept) and isinstance(k, int):
        pick = cx.const(torch.full(kept, k, dtype=torch.int64))
    else:  # a symbolic shape or k: filled at run time
        dims = [1 if i == d else v for i, v in enumerate(cx.dims(x))]
        pick = cx.emit1("Fill", [("dims", cx.int_list(dims)), ("value", cx.tensor(k, torch.int64))],
                        None, (torch.int64, kept))
    v = cx.emit1("GatherElements", [("x", values), ("index", pick)], {"dim": d}, (x.dtype, kept))
    i = cx.emit1("GatherElements", [("x", cx.cast(idx, torch.int64)), ("index", pick)],
                 {"dim": d}, (torch.int64, kept))
    if not keepdim:
        dims = [v for j, v in enumerate(cx.dims(x)) if j != d]
        v = cx.reshape(v, dims, vshape)
        i = cx.reshape(i, dims, vshape)
    return [cx.cast(v, vdt), i] if with_index else cx.cast(v, vdt)


def lower_median_index(cx, x, d: int):
    """(n - 1) // 2 for n = x's length along ``d``: an int, or computed from the run-time
    shape when the length is symbolic."""
    n = x.shape[d] if x.shape else 1
    if n >= 0:
        return (n - 1) // 2
    i64 = torch.int64
    m1 = cx.emit1("Sub", [("x1", cx.tensor(cx.dim(x, d), i64)), ("x2", cx.const(1, i64))], None,
                  (i64, ()))
    return cx.emit1("FloorDiv", [("x1", m1), ("x2", cx.const(2, i64))], None, (i64, ()))


@register([aten.median.default], ["Sort", "GatherElements", "Reshape", "Cast", "Const"])
def _median_all(cx, x):
    """The lower median of all elements (torch's definition); inputs without NaN."""
    n = 1
    for s in x.shape:
        if s < 0:
            raise UnsupportedOpError(f"%{cx.node.name}: median of a symbolic shape")
        n *= s
    flat = cx.reshape(x, [n], (n,))
    return _kth(cx, flat, (n - 1) // 2, 0, False, False)


@register([aten.median.dim], _KTH)
def _median_dim(cx, x, dim, keepdim=False):
    return _kth(cx, x, lower_median_index(cx, x, dim % max(len(x.shape), 1)), dim, keepdim, True)


@register([aten.kthvalue.default], _KTH)
def _kthvalue(cx, x, k, dim=-1, keepdim=False):
    return _kth(cx, x, k - 1, dim, keepdim, True)


@register([aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar],
          ["SelectV2", "Cast", "Const"])
def _where(cx, cond, a, b):
    dtype = cx.out_dtype
    return cx.emit1("SelectV2", [("condition", cx.tensor(cond, torch.bool)),
                                 ("then", cx.tensor(a, dtype)), ("else", cx.tensor(b, dtype))],
                    port="result")


@register([aten.masked_fill.Scalar, aten.masked_fill.Tensor], ["MaskedFill", "Cast", "Const"])
def _masked_fill(cx, x, mask, value):
    return cx.emit1("MaskedFill", [("x", x), ("mask", cx.tensor(mask, torch.bool)),
                                   ("value", cx.tensor(value, x.dtype))])


@register([aten._unsafe_masked_index.default],
          ["Index", "MaskedFill", "LogicalNot", "Less", "Add", "Sub", "SelectV2", "Maximum",
           "Minimum", "Shape", "GatherV2", "NonZero", "Unpack", "Cast", "Const"])
def _unsafe_masked_index(cx, x, mask, indices, fill):
    """``x[indices]`` where ``mask`` holds, ``fill`` elsewhere. Eager wraps a negative index
    (a[-2] is a[n - 2]); PyTorch's decomposition clamps it to 0 instead, so this op has its own
    converter: each index is wrapped, then clamped into range (a masked-off lane may hold
    anything), gathered with Index, and the masked-off lanes filled."""
    from .aten_shape import _index

    fixed = []
    for i, t in enumerate(indices):
        if t is None:
            fixed.append(None)
            continue
        t = cx.cast(t, torch.int64)
        size = cx.tensor(cx.dim(x, i), torch.int64)
        desc = (torch.int64, t.shape)
        neg = cx.emit1("Less", [("x1", t), ("x2", cx.const(0, torch.int64))], desc=(torch.bool, t.shape))
        wrapped = cx.emit1("SelectV2", [("condition", neg),
                                        ("then", cx.emit1("Add", [("x1", t), ("x2", size)], desc=desc)),
                                        ("else", t)], desc=desc, port="result")
        last = cx.emit1("Sub", [("x1", size), ("x2", cx.const(1, torch.int64))], desc=(torch.int64, ()))
        low = cx.emit1("Maximum", [("x1", wrapped), ("x2", cx.const(0, torch.int64))], desc=desc)
        fixed.append(cx.emit1("Minimum", [("x1", low), ("x2", last)], desc=desc))
    gathered = _index(cx, x, fixed)
    keep_out = cx.emit1("LogicalNot", [("x", cx.cast(mask, torch.bool))], desc=(torch.bool, mask.shape))
    return _masked_fill(cx, gathered, keep_out, fill)
