"""Converters: elementwise arithmetic/comparison/activation ops, reductions, matmuls, norms."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ..builder import TensorRef
from .registry import register

aten = torch.ops.aten


def _probe(x: Any) -> Any:
    """Something torch.result_type accepts that has the dtype/rank category of ``x``."""
    if isinstance(x, TensorRef):
        return torch.empty([1] * len(x.shape), dtype=x.dtype)
    return x


def result_type(a: Any, b: Any) -> torch.dtype:
    """torch's type promotion of two operands (TensorRefs or Python scalars)."""
    return torch.result_type(_probe(a), _probe(b))


# -- binary arithmetic: computed in the node's output dtype -----------------------------------
def _arith(ge_type: str, swap: bool = False):
    def conv(cx, a, b, alpha=1):
        dtype = cx.out_dtype
        x1, x2 = cx.tensor(a, dtype), cx.tensor(b, dtype)
        if swap:  # rsub(self, other, alpha) = other - alpha * self
            x1, x2 = x2, x1
        if alpha != 1:
            x2 = cx.emit1("Mul", [("x1", x2), ("x2", cx.const(alpha, dtype))], desc=(dtype, x2.shape))
        return cx.emit1(ge_type, [("x1", x1), ("x2", x2)])
    return conv


register([aten.add.Tensor, aten.add.Scalar], ["Add", "Mul", "Cast", "Const"])(_arith("Add"))
register([aten.sub.Tensor, aten.sub.Scalar], ["Sub", "Mul", "Cast", "Const"])(_arith("Sub"))
register([aten.rsub.Tensor, aten.rsub.Scalar], ["Sub", "Mul", "Cast", "Const"])(
    _arith("Sub", swap=True))
register([aten.mul.Tensor, aten.mul.Scalar], ["Mul", "Cast", "Const"])(_arith("Mul"))
register([aten.maximum.default], ["Maximum", "Cast"])(_arith("Maximum"))
register([aten.minimum.default], ["Minimum", "Cast"])(_arith("Minimum"))
register([aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar],
         ["Pow", "Cast", "Const"])(_arith("Pow"))


@register([aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode],
          ["RealDiv", "FloorDiv", "TruncateDiv", "Cast", "Const"])
def _div(cx, a, b, *, rounding_mode: Optional[str] = None):
    dtype = cx.out_dtype
    ge_type = {None: "RealDiv", "floor": "FloorDiv", "trunc": "TruncateDiv"}[rounding_mode]
    return cx.emit1(ge_type, [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))])


# -- comparisons and logic: computed in the promoted input dtype, bool out ------------------
def _compare(ge_type: str):
    def conv(cx, a, b):
        dtype = result_type(a, b)
        return cx.emit1(ge_type, [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))])
    return conv


for _ops, _ge in [((aten.eq.Tensor, aten.eq.Scalar), "Equal"),
                  ((aten.ne.Tensor, aten.ne.Scalar), "NotEqual"),
                  ((aten.gt.Tensor, aten.gt.Scalar), "Greater"),
                  ((aten.ge.Tensor, aten.ge.Scalar), "GreaterEqual"),
                  ((aten.lt.Tensor, aten.lt.Scalar), "Less"),
                  ((aten.le.Tensor, aten.le.Scalar), "LessEqual")]:
    register(_ops, [_ge, "Cast", "Const"])(_compare(_ge))


def _logical(ge_type: str):
    def conv(cx, a, b):
        return cx.emit1(ge_type, [("x1", cx.tensor(a, torch.bool)), ("x2", cx.tensor(b, torch.bool))])
    return conv


register([aten.logical_and.default], ["LogicalAnd", "Cast"])(_logical("LogicalAnd"))
register([aten.logical_or.default], ["LogicalOr", "Cast"])(_logical("LogicalOr"))


def _bitwise(is_and: bool):
    """bitwise and/or; the op is fixed here, never read from the node (prims.bitwise_and/or
    are converted as these: an alias keeps its own target, so a target test picked the wrong
    op for them)."""
    def conv(cx, a, b):
        if cx.out_dtype == torch.bool:
            return _logical("LogicalAnd" if is_and else "LogicalOr")(cx, a, b)
        ge_type = "BitwiseAnd" if is_and else "BitwiseOr"
        return cx.emit1(ge_type, [("x1", cx.tensor(a, cx.out_dtype)), ("x2", cx.tensor(b, cx.out_dtype))])
    return conv


register([aten.bitwise_and.Tensor], ["LogicalAnd", "BitwiseAnd", "Cast", "Const"])(_bitwise(True))
register([aten.bitwise_or.Tensor], ["LogicalOr", "BitwiseOr", "Cast", "Const"])(_bitwise(False))


@register([aten.logical_not.default, aten.bitwise_not.default], ["LogicalNot", "Invert", "Cast"])
def _not(cx, x):
    """logical_not: LogicalNot of x != 0; bitwise_not (and prims.bitwise_not, converted as it):
    Invert for integers, LogicalNot for bool (Invert flips every bit of the byte: ~True would
    read back as True)."""
    if cx.node.target is not aten.logical_not.default and cx.out_dtype != torch.bool:
        return cx.emit1("Invert", [("x", x)])
    return cx.emit1("LogicalNot", [("x", cx.cast(x, torch.bool))])


# -- unary elementwise: computed in the output dtype ------------------------------------------
_INTEGER_IDENTITY = frozenset({"Floor", "Ceil", "Round", "Trunc"})


def _unary(ge_type: str, port: str = "x", out_port: str = "y", **attrs):
    def conv(cx, x):
        if ge_type in _INTEGER_IDENTITY and not cx.out_dtype.is_floating_point:
            return cx.emit1("Identity", [("x", x)])  # rounding an integer changes nothing
        return cx.emit1(ge_type, [(port, cx.cast(x, cx.out_dtype))], dict(attrs) or None,
                        port=out_port)
    return conv


for _op, _ge in [(aten.neg.default, "Neg"),
                 (aten.rsqrt.default, "Rsqrt"), (aten.sqrt.default, "Sqrt"),
                 (aten.exp.default, "Exp"), (aten.log.default, "Log"),
                 (aten.sigmoid.default, "Sigmoid"), (aten.relu.default, "Relu"),
                 (aten.tanh.default, "Tanh"), (aten.cos.default, "Cos"), (aten.sin.default, "Sin"),
                 (aten.reciprocal.default, "Reciprocal"), (aten.erf.default, "Erf"),
                 (aten.floor.default, "Floor"), (aten.ceil.default, "Ceil"),
                 (aten.round.default, "Round"), (aten.sign.default, "Sign"),
                 (aten.log1p.default, "Log1p"), (aten.expm1.default, "Expm1")]:
    register([_op], [_ge, "Cast", "Identity"])(_unary(_ge))

_real_abs = _unary("Abs")


@register([aten.abs.default], ["Abs", "ComplexAbs", "Cast", "Identity"])
def _abs(cx, x):
    """``abs``; of a complex tensor its modulus (GE's ComplexAbs, real result): ``Abs`` takes
    real types only and a complex->real Cast before it would drop the imaginary part."""
    if x.dtype.is_complex:
        real = cx.out_dtype
        return cx.emit1("ComplexAbs", [("x", x)], {"Tout": real}, (real, x.shape))
    return _real_abs(cx, x)
@register([aten.silu.default], ["Swish", "Cast", "Neg", "Exp", "Add", "RealDiv", "Fill", "Shape",
                                 "Complex", "Const"])
def _silu(cx, x):
    if x.dtype.is_complex:  # GE's Swish is real: x / (1 + exp(-x)) with complex Exp/Add/RealDiv
        from .aten_complex import _REAL_OF

        part = _REAL_OF[x.dtype]
        shape = tuple(x.shape)
        fill = lambda v: cx.emit1("Fill", [("dims", cx.shape_of(x)),  # noqa: E731
                                           ("value", cx.const(v, part))], desc=(part, shape))
        one = cx.emit1("Complex", [("real", fill(1.0)), ("imag", fill(0.0))], {"Tout": x.dtype},
                       (x.dtype, shape), port="out")
        e = cx.emit1("Exp", [("x", cx.emit1("Neg", [("x", x)], desc=(x.dtype, shape)))],
                     desc=(x.dtype, shape))
        den = cx.emit1("Add", [("x1", one), ("x2", e)], desc=(x.dtype, shape))
        return cx.emit1("RealDiv", [("x1", x), ("x2", den)], desc=(x.dtype, shape))
    return _unary("Swish", scale=1.0)(cx, x)
register([aten.trunc.default], ["Trunc", "Cast", "Identity"])(_unary("Trunc", "input_x", "output_y"))


@register([aten.gelu.default], ["GeluV2", "Cast"])
def _gelu(cx, x, *, approximate: str = "none"):
    return cx.emit1("GeluV2", [("x", cx.cast(x, cx.out_dtype))], {"approximate": approximate})


@register([aten.clamp.default, aten.clamp.Tensor], ["Maximum", "Minimum", "Cast", "Const"])
def _clamp(cx, x, min=None, max=None):
    dtype = cx.out_dtype
    y = cx.cast(x, dtype)
    if min is not None:
        y = cx.emit1("Maximum", [("x1", y), ("x2", cx.tensor(min, dtype))])
    if max is not None:
        y = cx.emit1("Minimum", [("x1", y), ("x2", cx.tensor(max, dtype))])
    return y


@register([aten.clamp_min.default, aten.clamp_min.Tensor], ["Maximum", "Cast", "Const"])
def _clamp_min(cx, x, min):
    return _clamp(cx, x, min=min)


@register([aten.clamp_max.default, aten.clamp_max.Tensor], ["Minimum", "Cast", "Const"])
def _clamp_max(cx, x, max):
    return _clamp(cx, x, max=max)


# -- reductions ------------------------------------------------------------------------------
def _axes(x: TensorRef, dims: Optional[Sequence[int]]) -> list:
    rank = len(x.shape)
    if dims is None or len(dims) == 0:
        return list(range(rank))
    return [d % rank if rank else 0 for d in dims]


def _reduce(ge_type: str):
    def conv(cx, x, dim=None, keepdim=False, *, dtype=None):
        if isinstance(dim, int):
            dim = [dim]
        x = cx.cast(x, cx.out_dtype)
        attrs = {"keep_dims": bool(keepdim)}
        return cx.emit1(ge_type, [("x", x), ("axes", cx.const(_axes(x, dim), torch.int64))], attrs)
    return conv


register([aten.mean.dim, aten.mean.default], ["ReduceMean", "Cast", "Const"])(_reduce("ReduceMean"))
register([aten.sum.dim_IntList, aten.sum.default], ["ReduceSum", "Cast", "Const"])(
    _reduce("ReduceSum"))
register([aten.amax.default], ["ReduceMax", "Cast", "Const"])(_reduce("ReduceMax"))
register([aten.amin.default], ["ReduceMin", "Cast", "Const"])(_reduce("ReduceMin"))
register([aten.any.dim, aten.any.dims, aten.any.default], ["ReduceAny", "Cast", "Const"])(
    _reduce("ReduceAny"))
register([aten.all.dim, aten.all.dims, aten.all.default], ["ReduceAll", "Cast", "Const"])(
    _reduce("ReduceAll"))


@register([aten._softmax.default], ["SoftmaxV2", "Cast"])
def _softmax(cx, x, dim, half_to_float=False):
    return cx.emit1("SoftmaxV2", [("x", cx.cast(x, cx.out_dtype))], {"axes": [dim]})


@register([aten._log_softmax.default], ["LogSoftmaxV2", "Cast"])
def _log_softmax(cx, x, dim, half_to_float=False):
    return cx.emit1("LogSoftmaxV2", [("logits", cx.cast(x, cx.out_dtype))], {"axes": [dim]},
                    port="logsoftmax")


@register([aten.cumsum.default], ["Cumsum", "Cast", "Const"])
def _cumsum(cx, x, dim, *, dtype=None):
    x = cx.cast(x, cx.out_dtype)
    return cx.emit1("Cumsum", [("x", x), ("axis", cx.const(dim, torch.int64))])


@register([aten.argmax.default], ["ArgMaxV2", "Reshape", "Unsqueeze", "Const"])
def _argmax(cx, x, dim=None, keepdim=False):
    reduce_all = dim is None
    if reduce_all:
        n = -1 if any(d < 0 for d in x.shape) else int(torch.tensor(x.shape).prod())
        x = cx.reshape(x, [-1], [n])
        dim = 0
    dim = dim % max(len(x.shape), 1)
    shape = [d for i, d in enumerate(x.shape) if i != dim]
    y = cx.emit1("ArgMaxV2", [("x", x), ("dimension", cx.const(dim, torch.int64))],
                 {"dtype": torch.int64}, (torch.int64, shape))
    if keepdim:
        y = cx.emit1("Unsqueeze", [("x", y)], {"axes": [dim]}, (torch.int64, cx.out()[1]))
        if reduce_all:
            y = cx.reshape(y, list(cx.out()[1]), cx.out()[1])
    return y


@register([aten.topk.default], ["TopKV2", "Cast", "Const"])
def _topk(cx, x, k, dim=-1, largest=True, sorted=True):
    (vdt, vshape), (_, ishape) = cx.out(0), cx.out(1)
    values, idx = cx.emit("TopKV2", [("x", x), ("k", cx.tensor(k, torch.int32))],
                          {"sorted": bool(sorted), "dim": int(dim), "largest": bool(largest)},
                          [("values", (vdt, vshape)), ("indices", (torch.int32, ishape))])
    return [values, cx.cast(idx, torch.int64)]


# -- matmuls ---------------------------------------------------------------------------------
@register([aten.mm.default], ["MatMulV2"])
def _mm(cx, a, b):
    cx.require_float(a, "MatMulV2")
    return cx.emit1("MatMulV2", [("x1", a), ("x2", b)], {"transpose_x1": False, "transpose_x2": False})


@register([aten.bmm.default], ["BatchMatMulV2"])
def _bmm(cx, a, b):
    cx.require_float(a, "BatchMatMulV2")
    return cx.emit1("BatchMatMulV2", [("x1", a), ("x2", b)], {"adj_x1": False, "adj_x2": False})


@register([aten.addmm.default], ["MatMulV2", "Add", "Mul", "Const"])
def _addmm(cx, bias, a, b, *, beta=1, alpha=1):
    cx.require_float(a, "MatMulV2")
    dtype, shape = cx.out()
    if beta == 1 and alpha == 1 and len(bias.shape) == 1:
        return cx.emit1("MatMulV2", [("x1", a), ("x2", b), ("bias", bias)],
                        {"transpose_x1": False, "transpose_x2": False})
    mm = cx.emit1("MatMulV2", [("x1", a), ("x2", b)])
    if alpha != 1:
        mm = cx.emit1("Mul", [("x1", mm), ("x2", cx.const(alpha, dtype))])
    if beta != 1:
        bias = cx.emit1("Mul", [("x1", bias), ("x2", cx.const(beta, dtype))], desc=(dtype, bias.shape))
    return cx.emit1("Add", [("x1", mm), ("x2", bias)])


# -- layer norm ------------------------------------------------------------------------------
@register([aten.native_layer_norm.default], ["LayerNormV4", "Const"])
def _layer_norm(cx, x, normalized_shape, weight, bias, eps):
    outs = [("y", cx.out(0)), ("mean", cx.out(1)), ("rstd", cx.out(2))]
    return cx.emit("LayerNormV4", [("x", x), ("normalized_shape", cx.int_list(normalized_shape)),
                                   ("gamma", weight), ("beta", bias)],
                   {"epsilon": float(eps)}, outs)


@register([aten.softplus.default], ["SoftplusV2", "Cast"])
def _softplus(cx, x, beta=1, threshold=20):
    work = cx.work_dtype("SoftplusV2", cx.out_dtype)
    x = cx.cast(x, work)
    y = cx.emit1("SoftplusV2", [("x", x)], {"beta": float(beta), "threshold": float(threshold)},
                 (work, x.shape))
    return cx.cast(y, cx.out_dtype)


@register([aten._safe_softmax.default], ["SoftmaxV2", "Equal", "ReduceAll", "SelectV2", "Cast",
                                         "Const"])
def _safe_softmax(cx, x, dim, dtype=None):
    """softmax, with rows that are all -inf giving zeros instead of NaN (SDPA's masked rows)."""
    out_dtype, shape = cx.out()
    x = cx.cast(x, out_dtype)
    rank = len(shape)
    d = dim % rank
    y = cx.emit1("SoftmaxV2", [("x", x)], {"axes": [d]}, (out_dtype, shape))
    masked = cx.emit1("Equal", [("x1", x), ("x2", cx.const(float("-inf"), out_dtype))], None,
                      (torch.bool, shape))
    kept = tuple(1 if i == d else s for i, s in enumerate(shape))
    empty = cx.emit1("ReduceAll", [("x", masked), ("axes", cx.const([d], torch.int64))],
                     {"keep_dims": True}, (torch.bool, kept))
    return cx.emit1("SelectV2", [("condition", empty), ("then", cx.const(0.0, out_dtype)),
                                 ("else", y)], None, (out_dtype, shape), port="result")


@register([aten.logsumexp.default], ["ReduceLogSumExp", "Cast", "Const"])
def _logsumexp(cx, x, dim, keepdim=False):
    dtype = cx.out_dtype
    rank = len(x.shape)
    if rank == 0:  # logsumexp of one element is that element
        return cx.cast(x, dtype)
    axes = [d % rank for d in dim] if dim else list(range(rank))
    return cx.emit1("ReduceLogSumExp", [("x", cx.cast(x, dtype)),
                                        ("axes", cx.const(axes, torch.int64))],
                    {"keep_dims": bool(keepdim)})


@register([aten.log_sigmoid_forward.default], ["LogSigmoid", "Cast"])
def _log_sigmoid_forward(cx, x):
    """(log(sigmoid(x)), buffer): the buffer is a backward-only workspace, refused if read."""
    from .aten_attention import _uses_output
    from ....errors import UnsupportedOpError

    if _uses_output(cx.node, 1):
        raise UnsupportedOpError(f"%{cx.node.name}: the log_sigmoid buffer has no GE lowering")
    dtype, shape = cx.out(0)
    work = cx.work_dtype("LogSigmoid", dtype)
    y = cx.emit1("LogSigmoid", [("x", cx.cast(x, work))], None, (work, shape))
    return [cx.cast(y, dtype), None]


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
