"""Torch implementations of GE ops for the reference executor.

``KERNELS[op_type](spec) -> fn(*inputs)``: a factory gets the decoded op (:class:`OpSpec`) once at
load time, bakes in its attributes and Const-fed index inputs, and returns the function the
generated code calls once per step. Each kernel implements the GE op's documented semantics
(TF-style for the ops GE took from TensorFlow: StridedSlice masks, GatherV2, SplitV, ...).
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Set

import torch

from ...backends.ge.dtypes import torch_dtype
from .opspec import GeRuntimeError, OpSpec

Factory = Callable[[OpSpec], Callable[..., Any]]
KERNELS: Dict[str, Factory] = {}
# Op types whose kernel starts work and returns a ``done()`` callable that waits for it and
# gives the op's output(s) (collectives: the executor calls ``done`` just before the first op
# that reads an output, so compute in between overlaps the communication).
ASYNC: Set[str] = set()
# Op types whose kernel writes one of its inputs in place (GE ref semantics): no collective may
# still be reading a buffer when one of these runs, so the executor finishes pending ones first.
WRITES_INPUT: Set[str] = set()


def kernel(*types: str, asynchronous: bool = False, writes_input: bool = False):
    def deco(factory: Factory) -> Factory:
        for t in types:
            KERNELS[t] = factory
            if asynchronous:
                ASYNC.add(t)
            if writes_input:
                WRITES_INPUT.add(t)
        return factory
    return deco


def ints(v: Any) -> list:
    """A run-time int vector input (1-D tensor, 0-d tensor or Python ints) as a list."""
    if isinstance(v, torch.Tensor):
        return v.reshape(-1).tolist()
    return list(v) if isinstance(v, (list, tuple)) else [int(v)]


def _fixed(fn: Callable[..., Any]) -> Factory:
    return lambda spec: fn


# -- elementwise ---------------------------------------------------------------------------
for _t, _fn in {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
                "RealDiv": torch.true_divide, "Maximum": torch.maximum, "Minimum": torch.minimum,
                "Pow": torch.pow, "Equal": torch.eq, "NotEqual": torch.ne, "Greater": torch.gt,
                "GreaterEqual": torch.ge, "Less": torch.lt, "LessEqual": torch.le,
                "LogicalAnd": torch.logical_and, "LogicalOr": torch.logical_or,
                "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
                "FloorMod": torch.remainder, "Neg": torch.neg, "Abs": torch.abs,
                "Rsqrt": torch.rsqrt, "Sqrt": torch.sqrt, "Sigmoid": torch.sigmoid,
                "Relu": torch.relu, "Tanh": torch.tanh, "Cos": torch.cos, "Sin": torch.sin,
                "Reciprocal": torch.reciprocal, "Erf": torch.erf, "Floor": torch.floor,
                "Ceil": torch.ceil, "Round": torch.round, "Sign": torch.sign, "Log1p": torch.log1p,
                "Expm1": torch.expm1, "Trunc": torch.trunc, "LogicalNot": torch.logical_not,
                "Invert": torch.bitwise_not, "Triu": None, "Tril": None}.items():
    if _fn is not None:
        kernel(_t)(_fixed(_fn))


@kernel("Assert")
def _assert(spec: OpSpec):
    message = spec.attr("_message") or ""
    if isinstance(message, bytes):
        message = message.decode()

    def run(cond, *data):
        if not bool(cond):
            raise RuntimeError(message or f"Runtime assertion failed (GE op {spec.name})")
    return run


@kernel("AddN")
def _add_n(spec: OpSpec):
    def run(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out
    return run


@kernel("FloorDiv")
def _floordiv(spec: OpSpec):
    return lambda a, b: torch.div(a, b, rounding_mode="floor")


@kernel("TruncateDiv")
def _truncdiv(spec: OpSpec):
    return lambda a, b: torch.div(a, b, rounding_mode="trunc")


def _base_scale_shift(spec: OpSpec):
    return spec.attr("base", -1.0), spec.attr("scale", 1.0), spec.attr("shift", 0.0)


@kernel("Exp")
def _exp(spec: OpSpec):
    """y = base ** (shift + scale * x); base -1 means e."""
    base, scale, shift = _base_scale_shift(spec)
    if base == -1.0 and scale == 1.0 and shift == 0.0:
        return torch.exp
    if base <= 0 and base != -1.0:
        raise GeRuntimeError(f"Exp {spec.name!r}: base must be > 0 or -1, got {base}")
    log_base = 1.0 if base == -1.0 else float(torch.log(torch.tensor(base, dtype=torch.float64)))
    return lambda x: torch.exp((shift + scale * x) * log_base)


@kernel("Log")
def _log(spec: OpSpec):
    """y = log_base(shift + scale * x); base -1 means e."""
    base, scale, shift = _base_scale_shift(spec)
    if base == -1.0 and scale == 1.0 and shift == 0.0:
        return torch.log
    if base <= 0 and base != -1.0:
        raise GeRuntimeError(f"Log {spec.name!r}: base must be > 0 or -1, got {base}")
    if base == 2.0:
        fn = torch.log2
    elif base == 10.0:
        fn = torch.log10
    else:
        log_base = 1.0 if base == -1.0 else float(torch.log(torch.tensor(base,
                                                                            dtype=torch.float64)))
        fn = lambda v: torch.log(v) / log_base  # noqa: E731
    if scale == 1.0 and shift == 0.0:
        return fn
    return lambda x: fn(shift + scale * x)


@kernel("Swish")
def _swish(spec: OpSpec):
    scale = spec.attr("scale", 1.0)
    if scale == 1.0:
        return torch.nn.functional.silu
    return lambda x: x * torch.sigmoid(x * scale)


@kernel("GeluV2")
def _gelu(spec: OpSpec):
    approximate = spec.attr("approximate", "none")
    return lambda x: torch.nn.functional.gelu(x, approximate=approximate)


@kernel("Cast")
def _cast(spec: OpSpec):
    dtype = torch_dtype(spec.attr("dst_type"))
    return lambda x: x.to(dtype, copy=True)  # a new tensor even when the type is unchanged


@kernel("Identity")
def _identity(spec: OpSpec):
    """GE's Identity produces a new tensor: never the input object itself, or an in-place
    update of the input made after the graph ran would show through the output."""
    return lambda x: x.clone()


@kernel("TensorMove")
def _tensor_move(spec: OpSpec):
    return lambda x: x.clone()


@kernel("Triu", "Tril")
def _tri(spec: OpSpec):
    fn, diagonal = (torch.triu if spec.type == "Triu" else torch.tril), spec.attr("diagonal", 0)
    return lambda x: fn(x, diagonal)


@kernel("SelectV2")
def _select_v2(spec: OpSpec):
    return torch.where


@kernel("MaskedFill")
def _masked_fill(spec: OpSpec):
    return lambda x, mask, value: x.masked_fill(mask, value)


# -- reductions, softmax, scans ------------------------------------------------------------
_REDUCE = {"ReduceSum": torch.sum, "ReduceMean": torch.mean, "ReduceMax": torch.amax,
           "ReduceProd": lambda x, dim, keepdim: _prod(x, dim, keepdim),
           "ReduceMin": torch.amin, "ReduceAny": torch.any, "ReduceAll": torch.all}


def _prod(x, dims, keepdim):
    for d in sorted((d % max(x.dim(), 1) for d in dims), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


@kernel(*_REDUCE)
def _reduce(spec: OpSpec):
    fn, keep = _REDUCE[spec.type], bool(spec.attr("keep_dims", False))
    axes = spec.const_ints("axes")

    def run(x, axes_in):
        dims = axes if axes is not None else tuple(ints(axes_in))
        if not dims:  # GE: empty axes reduce nothing (still a new tensor)
            return x.clone()
        return fn(x, dim=dims, keepdim=keep)
    return run


@kernel("SoftmaxV2", "LogSoftmaxV2")
def _softmax(spec: OpSpec):
    axes = spec.attr("axes", [-1])
    if len(axes) != 1:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: only one axis is supported, got {axes}")
    fn = torch.softmax if spec.type == "SoftmaxV2" else torch.log_softmax
    return lambda x: fn(x, axes[0])


@kernel("Cumsum")
def _cumsum(spec: OpSpec):
    exclusive, reverse = spec.attr("exclusive", False), spec.attr("reverse", False)

    def run(x, axis):
        dim = ints(axis)[0]
        y = x.flip(dim) if reverse else x
        out = torch.cumsum(y, dim, dtype=y.dtype)  # GE: y has x's type (torch widens ints)
        if exclusive:
            out = out - y
        return out.flip(dim) if reverse else out
    return run


@kernel("ArgMaxV2")
def _argmax(spec: OpSpec):
    dtype = torch_dtype(spec.attr("dtype", 8))
    return lambda x, dim: torch.argmax(x, ints(dim)[0]).to(dtype)


@kernel("TopKV2")
def _topk(spec: OpSpec):
    dim, largest, srt = spec.attr("dim", -1), spec.attr("largest", True), spec.attr("sorted", True)

    def run(x, k):
        values, idx = torch.topk(x, ints(k)[0], dim, largest, srt)
        return values, idx.to(torch.int32)
    return run


# -- matmuls and norms ---------------------------------------------------------------------
@kernel("MatMulV2", "BatchMatMulV2")
def _matmul(spec: OpSpec):
    if spec.type == "MatMulV2":
        ta, tb = spec.attr("transpose_x1", False), spec.attr("transpose_x2", False)
    else:
        ta, tb = spec.attr("adj_x1", False), spec.attr("adj_x2", False)
    has_bias = spec.port("bias") is not None

    def run(a, b, bias=None, *_):
        y = torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
        return y + bias if has_bias else y
    return run


@kernel("LayerNormV4")
def _layer_norm(spec: OpSpec):
    shape = spec.const_ints("normalized_shape")
    gi, bi, eps = spec.port("gamma"), spec.port("beta"), float(spec.attr("epsilon", 1e-5))

    def run(x, normalized_shape, *rest):
        args = (x, normalized_shape) + rest
        dims = shape if shape is not None else ints(normalized_shape)
        return torch.native_layer_norm(x, dims, None if gi is None else args[gi],
                                       None if bi is None else args[bi], eps)
    return run


@kernel("ArgMin")
def _argmin(spec: OpSpec):
    dtype = torch_dtype(spec.attr("dtype", 9))
    return lambda x, dim: torch.argmin(x, ints(dim)[0]).to(dtype)


@kernel("ArgMaxWithValue", "ArgMinWithValue")
def _arg_with_value(spec: OpSpec):
    fn = torch.max if spec.type == "ArgMaxWithValue" else torch.min
    dim, keep = spec.attr("dimension"), bool(spec.attr("keep_dims", False))

    def run(x):
        values, idx = fn(x, dim, keep)
        return idx.to(torch.int32), values
    return run


@kernel("Sort")
def _sort(spec: OpSpec):
    axis, desc = spec.attr("axis", -1), bool(spec.attr("descending", False))
    stable = bool(spec.attr("stable", False))

    def run(x):
        values, idx = torch.sort(x, dim=axis, descending=desc, stable=stable)
        return values, idx.to(torch.int32)
    return run


@kernel("Histogram")
def _histogram(spec: OpSpec):
    bins, lo, hi = spec.attr("bins", 100), spec.attr("min", 0.0), spec.attr("max", 0.0)
    dtype = spec.outputs[0][0]
    return lambda x: torch.histc(x.float(), bins, lo, hi).to(dtype)


@kernel("GroupedMatmul")
def _grouped_matmul(spec: OpSpec):
    """x [M, K] split along M at the cumulative ``group_list``; group i times weight[i]; rows
    past the last offset are zero (split_item 3, group_type 0, group_list_type 0 only)."""
    got = (spec.attr("split_item", 0), spec.attr("group_type", -1), spec.attr("group_list_type", 0))
    if got != (3, 0, 0) or spec.attr("transpose_weight", False) or spec.attr("transpose_x", False):
        raise GeRuntimeError(f"GroupedMatmul {spec.name!r}: only split_item=3, group_type=0, "
                             f"group_list_type=0 without transposes is implemented, got {got}")
    if spec.in_names != ["x0", "weight0", "group_list"]:
        raise GeRuntimeError(f"GroupedMatmul {spec.name!r}: inputs {spec.in_names} not supported")

    def run(x, weight, group_list):
        out = torch.zeros(x.shape[0], weight.shape[-1], dtype=x.dtype, device=x.device)
        start = 0
        for i, end in enumerate(group_list.tolist()):
            if end > start:
                out[start:end] = torch.mm(x[start:end], weight[i])
            start = end
        return out
    return run


@kernel("SoftplusV2")
def _softplus(spec: OpSpec):
    beta, threshold = spec.attr("beta", 1.0), spec.attr("threshold", 20.0)
    return lambda x: torch.nn.functional.softplus(x, beta, threshold)


@kernel("Complex")
def _complex(spec: OpSpec):
    return torch.complex


@kernel("Real", "Imag")
def _real_imag(spec: OpSpec):
    part = "real" if spec.type == "Real" else "imag"
    return lambda z: getattr(z, part).clone()


@kernel("ReduceLogSumExp")
def _reduce_logsumexp(spec: OpSpec):
    keep = bool(spec.attr("keep_dims", False))
    return lambda x, axes: torch.logsumexp(x, ints(axes), keep)


@kernel("LogSigmoid")
def _log_sigmoid(spec: OpSpec):
    return torch.nn.functional.logsigmoid


@kernel("Conv2D")
def _conv2d(spec: OpSpec):
    if spec.attr("data_format", "NHWC") != "NCHW" or spec.port("bias") is not None:
        raise GeRuntimeError(f"Conv2D {spec.name!r}: only NCHW without a bias input is implemented")
    top, bottom, left, right = spec.attr("pads")
    if top != bottom or left != right:
        raise GeRuntimeError(f"Conv2D {spec.name!r}: asymmetric pads {spec.attr('pads')}")
    stride, dilation = spec.attr("strides")[2:], spec.attr("dilations", [1, 1, 1, 1])[2:]
    groups = spec.attr("groups", 1)
    return lambda x, w: torch.nn.functional.conv2d(x, w, None, stride, (top, left), dilation,
                                                   groups)


@kernel("MatrixTriangularSolve")
def _triangular_solve(spec: OpSpec):
    lower, adjoint = bool(spec.attr("lower", True)), bool(spec.attr("adjoint", False))
    if adjoint:  # A^H X = B: A^H's triangle is the other one
        return lambda a, b: torch.linalg.solve_triangular(a.mH, b, upper=lower)
    return lambda a, b: torch.linalg.solve_triangular(a, b, upper=not lower)
