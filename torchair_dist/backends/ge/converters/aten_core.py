"""Converters for the Core ATen elementwise/reduction ops the first converters did not need, and
for the ``prims`` ops PyTorch's reference decompositions (``torch._refs``) produce.

Every op is computed in the output dtype when the GE op's IR accepts it, else in float32 and
cast back (:meth:`~.context.ConvertContext.work_dtype`: the carrier table of :mod:`.context`), so
float16/bfloat16/int inputs stay valid against the
registry. A ``prims`` op has exactly one overload and takes operands already promoted and
broadcast (the refs did that), so it maps onto the same GE op as its aten twin.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..builder import TensorRef
from .registry import alias, register

aten = torch.ops.aten
prims = torch.ops.prims


def _unary(ge_type: str, attrs: Optional[dict] = None, ports=("x", "y")):
    def conv(cx, x):
        dtype = cx.out_dtype
        work = cx.work_dtype(ge_type, dtype)
        y = cx.emit1(ge_type, [(ports[0], cx.cast(x, work))], attrs, (work, cx.out()[1]),
                     port=ports[1])
        return cx.cast(y, dtype)
    return conv


for _name, _ge in [("acos", "Acos"), ("asin", "Asin"), ("atan", "Atan"), ("acosh", "Acosh"),
                   ("asinh", "Asinh"), ("atanh", "Atanh"), ("cosh", "Cosh"), ("sinh", "Sinh"),
                   ("tan", "Tan"), ("erfc", "Erfc")]:
    register([getattr(aten, _name).default, getattr(prims, _name).default],
             [_ge, "Cast"])(_unary(_ge))
register([aten.erfinv.default, prims.erf_inv.default], ["Erfinv", "Cast"])(
    _unary("Erfinv", ports=("input_x", "output_y")))

# log/exp in another base: GE Log/Exp take ``base`` (y = log_base(x), y = base ** x)
for _targets, _ge, _base in [((aten.log2.default, prims.log2.default), "Log", 2.0),
                             ((aten.log10.default, prims.log10.default), "Log", 10.0),
                             ((aten.exp2.default, prims.exp2.default), "Exp", 2.0)]:
    register(_targets, [_ge, "Cast"])(_unary(_ge, {"base": _base, "scale": 1.0, "shift": 0.0}))


def _binary(ge_type: str, ports=("x1", "x2"), out_port: str = "y"):
    def conv(cx, a, b):
        dtype = cx.out_dtype
        work = cx.work_dtype(ge_type, dtype)
        y = cx.emit1(ge_type, [(ports[0], cx.tensor(a, work)), (ports[1], cx.tensor(b, work))],
                     None, (work, cx.out()[1]), port=out_port)
        return cx.cast(y, dtype)
    return conv


register([aten.atan2.default, prims.atan2.default], ["Atan2", "Cast", "Const"])(_binary("Atan2"))
register([aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor,
          prims.remainder.default], ["FloorMod", "Cast", "Const"])(_binary("FloorMod"))
register([aten.fmod.Tensor, aten.fmod.Scalar, prims.fmod.default],
         ["Mod", "Cast", "Const"])(_binary("Mod"))
register([aten.nextafter.default, prims.nextafter.default],
         ["NextAfter", "Cast", "Const"])(_binary("NextAfter", out_port="output"))
@register([aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, prims.bitwise_xor.default,
           aten.logical_xor.default], ["BitwiseXor", "NotEqual", "Cast", "Const"])
def _xor(cx, a, b):
    dtype = cx.out_dtype
    if dtype == torch.bool:  # GE has no LogicalXor: a != b on booleans (compared as int32)
        return cx.emit1("NotEqual", [("x1", cx.cast(cx.tensor(a, torch.bool), torch.int32)),
                                     ("x2", cx.cast(cx.tensor(b, torch.bool), torch.int32))])
    return cx.emit1("BitwiseXor", [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))])


def _is(ge_type: str):
    def conv(cx, x):
        if not x.dtype.is_floating_point:  # integers are never NaN/inf
            return cx.emit1("Fill", [("dims", cx.shape_of(x)),
                                     ("value", cx.const(False))])
        return cx.emit1(ge_type, [("x", cx.cast(x, cx.work_dtype(ge_type, x.dtype)))])
    return conv


register([aten.isnan.default], ["IsNan", "Fill", "Cast", "Const", "Shape"])(_is("IsNan"))
register([aten.isinf.default], ["IsInf", "Fill", "Cast", "Const", "Shape"])(_is("IsInf"))


# -- prims twins of ops that already have an aten converter -----------------------------------
# (resolved at lookup: the order the converter modules are imported in does not matter)
for _p, _a in [("abs", aten.abs.default), ("neg", aten.neg.default), ("sqrt", aten.sqrt.default),
               ("rsqrt", aten.rsqrt.default), ("exp", aten.exp.default), ("log", aten.log.default),
               ("sin", aten.sin.default), ("cos", aten.cos.default), ("tanh", aten.tanh.default),
               ("floor", aten.floor.default), ("ceil", aten.ceil.default),
               ("trunc", aten.trunc.default), ("sign", aten.sign.default),
               ("log1p", aten.log1p.default), ("expm1", aten.expm1.default),
               ("erf", aten.erf.default), ("reciprocal", aten.reciprocal.default),
               ("round", aten.round.default), ("add", aten.add.Tensor), ("sub", aten.sub.Tensor),
               ("mul", aten.mul.Tensor), ("maximum", aten.maximum.default),
               ("minimum", aten.minimum.default), ("pow", aten.pow.Tensor_Tensor),
               ("eq", aten.eq.Tensor), ("ne", aten.ne.Tensor), ("lt", aten.lt.Tensor),
               ("le", aten.le.Tensor), ("gt", aten.gt.Tensor), ("ge", aten.ge.Tensor),
               ("bitwise_and", aten.bitwise_and.Tensor), ("bitwise_or", aten.bitwise_or.Tensor),
               ("bitwise_not", aten.bitwise_not.default), ("where", aten.where.self)]:
    alias(getattr(prims, _p).default, _a)


@register([prims.div.default], ["RealDiv", "TruncateDiv", "Cast", "Const"])
def _prims_div(cx, a, b):
    """prims.div: true division for floats, truncating for integers."""
    dtype = cx.out_dtype
    ge_type = "RealDiv" if dtype.is_floating_point or dtype.is_complex else "TruncateDiv"
    return cx.emit1(ge_type, [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))])


@register([prims.fmax.default, prims.fmin.default, aten.fmax.default, aten.fmin.default],
          ["Maximum", "Minimum", "IsNan", "SelectV2", "Cast", "Const"])
def _fmax(cx, a, b):
    """fmax/fmin: like maximum/minimum, but a NaN operand yields the other one."""
    is_max = cx.node.target in (prims.fmax.default, aten.fmax.default)
    dtype = cx.out_dtype
    a, b = cx.tensor(a, dtype), cx.tensor(b, dtype)
    y = cx.emit1("Maximum" if is_max else "Minimum", [("x1", a), ("x2", b)])
    if not dtype.is_floating_point:
        return y
    work = cx.work_dtype("IsNan", dtype)
    shape = cx.out()[1]
    a_nan = cx.emit1("IsNan", [("x", cx.cast(a, work))], desc=(torch.bool, a.shape))
    b_nan = cx.emit1("IsNan", [("x", cx.cast(b, work))], desc=(torch.bool, b.shape))
    y = cx.emit1("SelectV2", [("condition", b_nan), ("then", a), ("else", y)], None,
                 (dtype, shape), port="result")
    return cx.emit1("SelectV2", [("condition", a_nan), ("then", b), ("else", y)], None,
                    (dtype, shape), port="result")


@register([prims.hypot.default, aten.hypot.default], ["Mul", "Add", "Sqrt", "Cast"])
def _hypot(cx, a, b):
    dtype = cx.out_dtype
    a, b = cx.tensor(a, dtype), cx.tensor(b, dtype)
    aa = cx.emit1("Mul", [("x1", a), ("x2", a)], desc=(dtype, a.shape))
    bb = cx.emit1("Mul", [("x1", b), ("x2", b)], desc=(dtype, b.shape))
    return cx.emit1("Sqrt", [("x", cx.emit1("Add", [("x1", aa), ("x2", bb)]))])


# -- reductions -------------------------------------------------------------------------------
def _axes(x: TensorRef, dims: Optional[Sequence[int]]) -> list:
    rank = len(x.shape)
    if dims is None or (not isinstance(dims, int) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({d % rank for d in dims}) if rank else []


def _reduce(cx, ge_type: str, x, dims, keepdim: bool, dtype: torch.dtype):
    axes = _axes(x, dims)
    work = cx.work_dtype(ge_type, dtype)
    x = cx.cast(x, work)
    if not axes:  # a 0-d input: nothing to reduce
        return cx.cast(x, dtype)
    y = cx.emit1(ge_type, [("x", x), ("axes", cx.const(axes, torch.int64))],
                 {"keep_dims": bool(keepdim)}, (work, cx.out()[1] if cx.node else ()))
    return cx.cast(y, dtype)


@register([prims.sum.default], ["ReduceSum", "Cast", "Const"])
def _prims_sum(cx, x, dims, *, output_dtype=None):
    return _reduce(cx, "ReduceSum", x, dims, False, cx.out_dtype)


@register([prims.prod.default, aten.prod.default, aten.prod.dim_int],
          ["ReduceProd", "Cast", "Const"])
def _prod(cx, x, dims=None, keepdim=False, *, dtype=None, output_dtype=None):
    if cx.node.target is aten.prod.default:  # prod(x, *, dtype)
        dims, keepdim = None, False
    return _reduce(cx, "ReduceProd", x, dims, keepdim, cx.out_dtype)


@register([prims.var.default], ["ReduceMean", "ReduceSum", "Sub", "Mul", "RealDiv", "Cast",
                                "Const", "ReduceProd", "GatherV2", "Shape", "Maximum"])
def _prims_var(cx, x, dims, correction=1, *, output_dtype=None):
    """sum((x - mean)^2) / max(N - correction, 0) over ``dims`` (N: their element count)."""
    dtype = cx.out_dtype
    axes = _axes(x, dims)
    x = cx.cast(x, dtype)
    if not axes:
        n = 1
    else:
        n = 1
        for a in axes:
            n *= x.shape[a]
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean = cx.emit1("ReduceMean", [("x", x), ("axes", cx.const(axes, torch.int64))],
                    {"keep_dims": True}, (dtype, kept))
    dev = cx.emit1("Sub", [("x1", x), ("x2", mean)], desc=(dtype, x.shape))
    sq = cx.emit1("Mul", [("x1", dev), ("x2", dev)], desc=(dtype, x.shape))
    total = cx.emit1("ReduceSum", [("x", sq), ("axes", cx.const(axes, torch.int64))],
                     {"keep_dims": False}) if axes else sq
    if n >= 0 and all(x.shape[a] >= 0 for a in axes) and not isinstance(correction, TensorRef):
        div = cx.const(float(max(n - correction, 0)), dtype)
    else:  # N read from the run-time shape (a symbolic dim is -1 in the descriptor)
        f64 = torch.float64
        count = cx.emit1("ReduceProd", [("x", cx.emit1(
            "GatherV2", [("x", cx.shape_of(x)), ("indices", cx.const(axes, torch.int64)),
                         ("axis", cx.const(0, torch.int64))], None, (torch.int64, (len(axes),)))),
            ("axes", cx.const([0], torch.int64))], {"keep_dims": False}, (torch.int64, ()))
        count = cx.emit1("Sub", [("x1", cx.cast(count, f64)), ("x2", cx.tensor(correction, f64))],
                         None, (f64, ()))
        count = cx.emit1("Maximum", [("x1", count), ("x2", cx.const(0.0, f64))], None, (f64, ()))
        div = cx.cast(count, dtype)
    return cx.emit1("RealDiv", [("x1", total), ("x2", div)])


@register([aten.cumprod.default], ["Cumprod", "Cast", "Const"])
def _cumprod(cx, x, dim, *, dtype=None):
    out = cx.out_dtype
    if not x.shape:
        return cx.cast(x, out)
    work = cx.work_dtype("Cumprod", out)
    y = cx.emit1("Cumprod", [("x", cx.cast(x, work)), ("axis", cx.const(dim % len(x.shape),
                                                                        torch.int64))],
                 None, (work, x.shape))
    return cx.cast(y, out)


@register([aten.cummax.default, aten.cummin.default], ["Cummax", "Cummin", "Cast"])
def _cummax(cx, x, dim):
    is_max = cx.node.target is aten.cummax.default
    (vdt, shape), (idt, _) = cx.out(0), cx.out(1)
    if not x.shape:
        return [x, cx.const(torch.zeros((), dtype=idt))]
    d = dim % len(x.shape)
    ge_type = "Cummax" if is_max else "Cummin"
    v, i = cx.emit(ge_type, [("x", x)], {"dim" if is_max else "axis": d},
                   [("y", (vdt, shape)), ("indices", (torch.int64, shape))])
    return [v, cx.cast(i, idt)]


# -- data movement --------------------------------------------------------------------------
@register([prims.broadcast_in_dim.default], ["Reshape", "BroadcastTo", "Const", "Pack", "Shape",
                                          "GatherV2"])
def _broadcast_in_dim(cx, a, shape, broadcast_dimensions):
    shape = list(shape)
    grown, desc = [1] * len(shape), [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        # a symbolic dim (-1 in the static description) is read from the run-time shape
        grown[dst], desc[dst] = cx.dim(a, src), a.shape[src]
    y = cx.reshape(a, grown, tuple(desc)) if tuple(desc) != tuple(a.shape) else a
    return cx.emit1("BroadcastTo", [("x", y), ("shape", cx.int_list(shape))])


def _dense(shape, stride) -> bool:
    """Whether the elements fill their storage span exactly once (some permutation of the
    dims is contiguous)."""
    expected = 1
    for d in sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: stride[d]):
        if stride[d] != expected:
            return False
        expected *= shape[d]
    return True


def _contiguous(shape, stride) -> bool:
    """Row-major (dims of size 1 may have any stride), as ``Tensor.is_contiguous``."""
    expected = 1
    for d in reversed(range(len(shape))):
        if shape[d] != 1 and stride[d] != expected:
            return False
        expected *= shape[d]
    return True


@register([aten.as_strided.default, aten.as_strided_copy.default], ["GatherV2", "Reshape",
                                                                      "Transpose", "Const", "Cast"])
def _as_strided(cx, x, size, stride, storage_offset=None):
    """A view with explicit strides: GatherV2 of the input's elements in STORAGE order (eager's
    as_strided reads the storage) at the (Const) linear offsets; symbolic sizes, strides and
    offsets are fixed by guards (another value recompiles). A
    non-contiguous input whose elements fill their storage span (a transpose, a permute) is
    first permuted into storage order; one with gaps (a slice) is refused: the elements
    between its own are not in the graph."""
    from ....errors import UnsupportedOpError

    fx = cx.node.args
    src = fx[0].meta.get("val")
    if src is None:
        raise UnsupportedOpError(f"%{cx.node.name}: as_strided of a value with no fake tensor")
    # the offsets are computed here: symbolic sizes, strides and offset are fixed by guards
    x = cx.static_shape(x, fx[0], "input")
    size = cx.static_ints(list(size), fx[1], "size")
    stride = cx.static_ints(list(stride), fx[2], "stride")
    if storage_offset is not None:
        storage_offset = cx.static_int(storage_offset, fx[3] if len(fx) > 3 else
                                       cx.node.kwargs.get("storage_offset"), "storage_offset")
    src_stride = cx.static_ints(list(src.stride()), list(src.stride()), "input stride")
    src_shape = list(x.shape)
    if not _contiguous(src_shape, src_stride):
        if not _dense(src_shape, src_stride):
            raise UnsupportedOpError(
                f"%{cx.node.name}: as_strided of an input with gaps in its storage (strides "
                f"{tuple(src_stride)} for shape {tuple(src_shape)}): eager reads the storage "
                "between its elements, which the GE graph does not have (clone the input first)")
        perm = sorted(range(src.dim()), key=lambda d: (-src_stride[d], d))
        x = cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))],
                     desc=(x.dtype, tuple(x.shape[d] for d in perm)))
    base = cx.static_int(src.storage_offset(), src.storage_offset(), "input storage offset")
    offset = int(storage_offset if storage_offset is not None else base) - base
    index = torch.full(tuple(size), offset, dtype=torch.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (torch.arange(n, dtype=torch.int64) * s).reshape(shape)
    numel = 1
    for d in x.shape:
        numel *= d
    dtype = x.dtype
    work = torch.int8 if dtype == torch.bool else dtype
    flat = cx.reshape(cx.cast(x, work), [numel], (numel,))
    if numel == 0 or index.numel() == 0:
        return cx.const(torch.zeros(tuple(size), dtype=dtype))
    y = cx.emit1("GatherV2", [("x", flat), ("indices", cx.const(index)),
                              ("axis", cx.const(0, torch.int64))], None, (work, tuple(size)))
    return cx.cast(y, dtype)




@register([aten.scatter_add.default, aten.scatter_reduce.two],
          ["ScatterElements", "Fill", "RealDiv", "FloorDiv", "Equal", "SelectV2", "Cast",
           "Const", "Shape"])
def _scatter_reduce(cx, x, dim, index, src, reduce="sum", *, include_self=True):
    """ScatterElements with a reduction (ONNX semantics: reduces into the existing values)."""
    from .aten_order import scatter_reduce_value

    return scatter_reduce_value(cx, x, dim % max(len(x.shape), 1), index, src, reduce,
                                include_self)


@register([aten.scatter.reduce, aten.scatter.value_reduce],
          ["ScatterElements", "Fill", "Cast", "Const", "Shape"])
def _scatter_legacy_reduce(cx, x, dim, index, src, *, reduce):
    """scatter(..., reduce="add"/"multiply"): scatter_reduce sum/prod including self; a scalar
    ``src`` is filled to the index's shape."""
    if reduce not in ("add", "multiply"):
        from ....errors import UnsupportedOpError

        raise UnsupportedOpError(f"%{cx.node.name}: scatter reduce={reduce!r} (torch takes "
                                 "'add' and 'multiply')")
    from .aten_order import scatter_reduce_value

    if not isinstance(src, TensorRef):
        src = cx.emit1("Fill", [("dims", cx.shape_of(index)),
                                ("value", cx.const(src, x.dtype))], desc=(x.dtype, index.shape))
    return scatter_reduce_value(cx, x, dim % max(len(x.shape), 1), index, cx.cast(src, x.dtype),
                                {"add": "sum", "multiply": "prod"}[reduce], True)


# -- special functions GE has an op for ---------------------------------------------------
register([prims.zeta.default, aten.special_zeta.default], ["Zeta", "Cast", "Const"])(
    _binary("Zeta", ("x", "q"), "z"))
register([prims.igamma.default, aten.igamma.default], ["Igamma", "Cast", "Const"])(
    _binary("Igamma", ("a", "x"), "z"))
register([prims.igammac.default, aten.igammac.default], ["Igammac", "Cast", "Const"])(
    _binary("Igammac", ("a", "x"), "z"))
register([prims.gcd.default, aten.gcd.default], ["Gcd", "Cast", "Const"])(_binary("Gcd"))
register([prims.ndtri.default, aten.special_ndtri.default], ["Ndtri", "Cast"])(_unary("Ndtri"))
register([prims.bessel_i0e.default, aten.special_i0e.default], ["BesselI0e", "Cast"])(
    _unary("BesselI0e"))
register([prims.bessel_i1e.default, aten.special_i1e.default], ["BesselI1e", "Cast"])(
    _unary("BesselI1e"))


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
