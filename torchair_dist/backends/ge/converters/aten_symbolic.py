"""Converters: symbolic-size arithmetic (``sym_size``, ``sym_numel``, ``operator`` on SymInts,
``sym_sum``), ``_local_scalar_dense``, and the asserts that convert to nothing."""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch

from ....errors import UnsupportedOpError
from ..builder import TensorRef
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


# -- symbolic sizes (SymInt nodes become shape-[] int64 tensors) -----------------------------
@register([aten.sym_size.int], ["Shape", "GatherV2", "Const"])
def _sym_size(cx, x, dim):
    dim = dim % len(x.shape)
    if x.shape[dim] >= 0:
        return cx.const(x.shape[dim], torch.int64)
    return cx.emit1("GatherV2", [("x", cx.shape_of(x)), ("indices", cx.const(dim, torch.int64)),
                                 ("axis", cx.const(0, torch.int64))], None, (torch.int64, ()))


@register([aten.sym_stride.int], ["Shape", "GatherV2", "Const", "Mul", "Add"])
def _sym_stride(cx, x, dim):
    """``x.stride(dim)`` of a graph input with symbolic strides: the stride's expression in
    x's own sizes (e.g. ``s1*s2`` for a contiguous [s0, s1, s2]) computed from the run-time
    shape. A stride not made of x's sizes by products and sums is refused by name."""
    import sympy

    val = cx.node.args[0].meta.get("val") if isinstance(cx.node.args[0], torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise UnsupportedOpError(f"%{cx.node.name}: sym_stride of a value with no fake tensor")
    stride = val.stride(dim)
    if isinstance(stride, int):
        return cx.const(stride, torch.int64)
    sizes = {}
    for i, d in enumerate(val.shape):
        if isinstance(d, torch.SymInt) and isinstance(d.node.expr, sympy.Symbol):
            sizes.setdefault(d.node.expr, i)

    def lower(e):
        if isinstance(e, sympy.Integer):
            return cx.const(int(e), torch.int64)
        if isinstance(e, sympy.Symbol) and e in sizes:
            return cx.tensor(cx.dim(x, sizes[e]), torch.int64)
        if isinstance(e, (sympy.Mul, sympy.Add)):
            acc = lower(e.args[0])
            for a in e.args[1:]:
                acc = cx.emit1("Mul" if isinstance(e, sympy.Mul) else "Add",
                               [("x1", acc), ("x2", lower(a))], None, (torch.int64, ()))
            return acc
        raise UnsupportedOpError(f"%{cx.node.name}: the stride {stride} of a graph input is not "
                                 "a product/sum of its sizes; not lowered (mark it static, or "
                                 "compile with mode='npugraph_ex')")
    return lower(stride.node.expr)


@register([aten.sym_numel.default], ["ReduceProd", "Shape", "Const"])
def _sym_numel(cx, x):
    if all(d >= 0 for d in x.shape):
        n = 1
        for d in x.shape:
            n *= d
        return cx.const(n, torch.int64)
    return cx.emit1("ReduceProd", [("x", cx.shape_of(x)), ("axes", cx.const([0], torch.int64))],
                    {"keep_dims": False}, (torch.int64, ()))


def _num_dtype(cx, *values) -> torch.dtype:
    """The dtype a size expression computes in: float64 (Python floats are doubles) when the
    node's value or any operand is a float, else int64 -- float arithmetic on sizes
    (``n / 2 + 0.25``) must stay float, never truncated to an integer."""
    val = cx.val
    if isinstance(val, (torch.SymFloat, float)) or any(
            isinstance(v, (torch.SymFloat, float)) or
            (isinstance(v, TensorRef) and v.dtype.is_floating_point) for v in values):
        return torch.float64
    return torch.int64


def _sym_binary(ge_type: str):
    def conv(cx, a, b):
        dtype = _num_dtype(cx, a, b)
        return cx.emit1(ge_type, [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))],
                        None, (dtype, ()))
    return conv


for _fn, _ge in [(operator.add, "Add"), (operator.sub, "Sub"), (operator.mul, "Mul"),
                 (operator.floordiv, "FloorDiv"), (operator.mod, "FloorMod"),
                 (operator.pow, "Pow")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_binary(_ge))


for _fn, _ge in [(torch.sym_max, "Maximum"), (torch.sym_min, "Minimum")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_binary(_ge))


@register([operator.neg], ["Neg", "Const", "Cast"])
def _sym_neg(cx, a):
    dtype = _num_dtype(cx, a)
    return cx.emit1("Neg", [("x", cx.tensor(a, dtype))], None, (dtype, ()))


@register([operator.abs], ["Abs", "Const", "Cast"])
def _sym_abs(cx, a):
    dtype = _num_dtype(cx, a)
    return cx.emit1("Abs", [("x", cx.tensor(a, dtype))], None, (dtype, ()))


@register([torch.sym_float], ["Cast", "Const"])
def _sym_float(cx, a):
    """``float(n)`` of a size (torch.sym_float): the value as a float64 scalar."""
    return cx.tensor(a, torch.float64)


@register([torch.sym_int], ["Cast", "Const"])
def _sym_int(cx, a):
    """``int(x)`` of a symbolic float: truncated toward zero (GE's Cast, as Python's int)."""
    return cx.tensor(a, torch.int64)


def _sym_compare(ge_type: str):
    def conv(cx, a, b):
        dtype = _num_dtype(cx, a, b) if not isinstance(cx.val, (torch.SymFloat, float)) \
            else torch.float64
        return cx.emit1(ge_type, [("x1", cx.tensor(a, dtype)), ("x2", cx.tensor(b, dtype))],
                        None, (torch.bool, ()))
    return conv


for _fn, _ge in [(operator.eq, "Equal"), (operator.ne, "NotEqual"), (operator.gt, "Greater"),
                 (operator.ge, "GreaterEqual"), (operator.lt, "Less"), (operator.le, "LessEqual")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_compare(_ge))


# Python's float arithmetic on sizes (``round(n / 2)``, ``math.trunc(n / 3)``): a SymFloat is a
# shape-[] float64 tensor (Python floats are doubles), turned back into int64 by the builtin.
def _as_double(cx, v):
    return cx.tensor(v, torch.float64)


@register([operator.truediv], ["RealDiv", "Const", "Cast"])
def _sym_truediv(cx, a, b):
    return cx.emit1("RealDiv", [("x1", _as_double(cx, a)), ("x2", _as_double(cx, b))], None,
                    (torch.float64, ()))


def _to_int(ge_type: Optional[str]):
    def conv(cx, x, ndigits=None):
        is_int = isinstance(x, TensorRef) and x.dtype == torch.int64
        if is_int and (ndigits is None or (isinstance(ndigits, int) and ndigits >= 0)):
            return x  # an int rounded (to >= 0 digits) is itself
        value = _as_double(cx, x)
        if ndigits is not None:  # round(x, n): a float, x * 10**n rounded half to even
            if ge_type != "Round" or not isinstance(ndigits, int):
                raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a symbolic "
                                         f"value with ndigits={ndigits!r}: only round(x, n) "
                                         "with a constant n is lowered")
            scale = cx.const(10.0 ** ndigits, torch.float64)
            value = cx.emit1("Mul", [("x1", value), ("x2", scale)], None, (torch.float64, ()))
            value = cx.emit1("Round", [("x", value)], None, (torch.float64, ()))
            value = cx.emit1("RealDiv", [("x1", value), ("x2", scale)], None,
                             (torch.float64, ()))
            return cx.cast(value, torch.int64) if is_int else value  # round(int, -n): an int
        if ge_type is not None:  # Round is half to even, as Python's round()
            value = cx.emit1(ge_type, [("x", value)], None, (torch.float64, ()))
        return cx.cast(value, torch.int64)  # Cast truncates toward zero, as math.trunc
    return conv


for _fn, _ge in [(round, "Round"), (math.trunc, None), (math.floor, "Floor"),
                 (math.ceil, "Ceil")]:
    register([_fn], [_ge or "Cast", "Cast", "Const", "Mul", "RealDiv"])(_to_int(_ge))


@register([aten._local_scalar_dense.default], ["Reshape", "Cast", "Const"])
def _local_scalar_dense(cx, x):
    """``tensor.item()``: a data-dependent scalar, kept as a shape-[] tensor like every symbol."""
    dtype = cx.out_dtype
    return cx.cast(cx.reshape(x, [], ()), dtype)


@register([torch.sym_sum], ["AddN", "Identity", "Const", "Cast"])
def _sym_sum(cx, *values):
    """``torch.sym_sum`` in both forms torch records: one sequence (``sym_sum((a, b))``, from
    tracing a call) or the terms as arguments (``sym_sum(a, b)``: a size expression that
    proxy_tensor rebuilds from sympy, e.g. in DTensor's shard propagation)."""
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = tuple(values[0])
    parts = [cx.tensor(v, torch.int64) for v in values]
    if len(parts) == 1:
        return cx.emit1("Identity", [("x", parts[0])], None, (torch.int64, ()))
    return cx.emit1("AddN", [("x", parts)], {"N": len(parts)}, (torch.int64, ()))


# -- graph annotations that compute nothing ---------------------------------------------------
@register([aten._assert_scalar.default, aten._assert_async.default, aten._assert_async.msg],
          ["Assert", "Const", "Cast", "Reshape"])
def _assert_scalar(cx, cond, message=None):
    """``torch._check(...)`` on a data-dependent value (and the runtime asserts torch adds for
    unbacked sizes): a GE ``Assert`` the graph's output depends on, so a run whose condition
    is false raises as eager does instead of returning a result of the wrong shape."""
    if isinstance(cond, bool) or not isinstance(cond, TensorRef):
        if not cond:
            raise UnsupportedOpError(f"%{cx.node.name}: the assertion {message!r} is always false")
        return None
    if len(cond.shape) != 0:  # _assert_async of a one-element tensor
        cond = cx.reshape(cond, [], ())
    cond = cx.cast(cond, torch.bool)
    cx.emit("Assert", [("input_condition", cond), ("input_data", [cond])], None, [])
    op = cx.b.graph.op[-1]
    op.attr["_message"].s = str(message or "").encode()
    cx.keep_alive.append(op.name)
    return None


@register([aten._assert_tensor_metadata.default, aten.sym_constrain_range_for_size.default], [])
def _no_op(cx, *args, **kwargs) -> Optional[Any]:
    return None
