"""Converters: Core ATen ops with no decomposition that compose from existing GE ops
(addbmm, logcumsumexp, median/kthvalue through Sort, uninitialised factories) or map onto one
more GE op (AvgPoolV2, Cdist)."""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten


@register([aten.addbmm.default], ["BatchMatMulV2", "ReduceSum", "Mul", "Add", "Cast", "Const"])
def _addbmm(cx, bias, b1, b2, *, beta=1, alpha=1):
    """beta * bias + alpha * sum_i b1[i] @ b2[i]."""
    cx.require_float(b1, "BatchMatMulV2")
    dtype, shape = cx.out()
    # the batch sum accumulates in float32 for low-precision inputs (as torch's kernel does)
    work = torch.float32 if b1.dtype in (torch.bfloat16, torch.float16) else b1.dtype
    b1, b2 = cx.cast(b1, work), cx.cast(b2, work)
    bmm = cx.emit1("BatchMatMulV2", [("x1", b1), ("x2", b2)], {"adj_x1": False, "adj_x2": False},
                   (work, (b1.shape[0], b1.shape[1], b2.shape[2])))
    y = cx.emit1("ReduceSum", [("x", bmm), ("axes", cx.const([0], torch.int64))],
                 {"keep_dims": False}, (work, shape))
    y = cx.cast(y, dtype)
    if alpha != 1:
        y = cx.emit1("Mul", [("x1", y), ("x2", cx.const(alpha, dtype))])
    if beta == 0:
        return y
    bias = cx.cast(bias, dtype)
    if beta != 1:
        bias = cx.emit1("Mul", [("x1", bias), ("x2", cx.const(beta, dtype))],
                        desc=(dtype, bias.shape))
    return cx.emit1("Add", [("x1", y), ("x2", bias)])


@register([aten.logcumsumexp.default], ["ReduceMax", "Sub", "Exp", "Cumsum", "Log", "Add",
                                        "Cast", "Const"])
def _logcumsumexp(cx, x, dim):
    """m + log(cumsum(exp(x - m))) with m the slice's max (finite inputs)."""
    dtype, shape = cx.out()
    if not x.shape:
        return cx.cast(x, dtype)
    d = dim % len(x.shape)
    x = cx.cast(x, dtype)
    kept = tuple(1 if i == d else s for i, s in enumerate(x.shape))
    m = cx.emit1("ReduceMax", [("x", x), ("axes", cx.const([d], torch.int64))],
                 {"keep_dims": True}, (dtype, kept))
    e = cx.emit1("Exp", [("x", cx.emit1("Sub", [("x1", x), ("x2", m)]))])
    c = cx.emit1("Cumsum", [("x", e), ("axis", cx.const(d, torch.int64))])
    return cx.emit1("Add", [("x1", cx.emit1("Log", [("x", c)])), ("x2", m)])


def _kth(cx, x, k: int, dim: int, keepdim: bool, with_index: bool):
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
    pick = cx.const(torch.full(kept, k, dtype=torch.int64))
    v = cx.emit1("GatherElements", [("x", values), ("index", pick)], {"dim": d}, (x.dtype, kept))
    i = cx.emit1("GatherElements", [("x", cx.cast(idx, torch.int64)), ("index", pick)],
                 {"dim": d}, (torch.int64, kept))
    if not keepdim:
        v = cx.reshape(v, list(vshape), vshape)
        i = cx.reshape(i, list(vshape), vshape)
    return [cx.cast(v, vdt), i] if with_index else cx.cast(v, vdt)


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


@register([aten.median.dim], ["Sort", "GatherElements", "Reshape", "Cast", "Const"])
def _median_dim(cx, x, dim, keepdim=False):
    n = x.shape[dim % len(x.shape)] if x.shape else 1
    return _kth(cx, x, (n - 1) // 2, dim, keepdim, True)


@register([aten.kthvalue.default], ["Sort", "GatherElements", "Reshape", "Cast", "Const"])
def _kthvalue(cx, x, k, dim=-1, keepdim=False):
    return _kth(cx, x, k - 1, dim, keepdim, True)


@register([aten.empty_permuted.default, torch.ops.prims.empty_strided.default],
          ["Fill", "Const"])
def _empty(cx, *args, **kwargs):
    """Uninitialised memory: any values are right; zeros are cheapest to state."""
    dtype, shape = cx.out()
    return cx.emit1("Fill", [("dims", cx.const(list(shape), torch.int64)),
                             ("value", cx.const(0, dtype))])


@register([aten.avg_pool2d.default], ["AvgPoolV2", "Reshape", "Cast", "Const"])
def _avg_pool2d(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    cx.require_float(x, "AvgPoolV2")
    dtype, shape = cx.out()
    k = list(kernel_size) * (2 if len(kernel_size) == 1 else 1)
    s = list(stride or k)
    s = s * (2 if len(s) == 1 else 1)
    p = [padding] * 2 if isinstance(padding, int) else list(padding) * (2 if len(padding) == 1 else 1)
    unbatched = len(x.shape) == 3
    if unbatched:
        x = cx.reshape(x, [1, *x.shape], (1, *x.shape))
    work = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
    y = cx.emit1("AvgPoolV2", [("x", cx.cast(x, work))],
                 {"ksize": [1, 1, *k], "strides": [1, 1, *s], "padding_mode": "CALCULATED",
                  "pads": [p[0], p[0], p[1], p[1]], "data_format": "NCHW",
                  "global_pooling": False, "ceil_mode": bool(ceil_mode),
                  "exclusive": not count_include_pad,
                  "divisor_override": int(divisor_override or 0)},
                 (work, (1, *shape) if unbatched else shape))
    if unbatched:
        y = cx.reshape(y, list(shape), shape)
    return cx.cast(y, dtype)


@register([aten._cdist_forward.default], ["Cdist", "Cast"])
def _cdist(cx, x1, x2, p, compute_mode=None):
    dtype, shape = cx.out()
    work = torch.float32 if dtype not in (torch.float16, torch.float32) else dtype
    y = cx.emit1("Cdist", [("x1", cx.cast(x1, work)), ("x2", cx.cast(x2, work))],
                 {"p": float(p)}, (work, shape))
    return cx.cast(y, dtype)
