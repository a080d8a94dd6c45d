"""Converters: casts, copies, selection, tensor factories, symbolic-size arithmetic, no-ops."""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch

from ..builder import TensorRef
from .aten_math import result_type
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def _move(cx, x):
    """A copy of ``x``: TensorMove; Identity for float64 (not among TensorMove's types); for
    a complex tensor (which neither takes) its parts joined again."""
    if x.dtype.is_complex:
        from .aten_fft import copy_complex

        return copy_complex(cx, x)
    return cx.emit1("Identity" if x.dtype == torch.float64 else "TensorMove", [("x", x)])


@register([aten._to_copy.default], ["Cast", "TensorMove", "Identity", "Real", "Imag", "Complex"])
def _to_copy(cx, x, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if dtype is None or dtype == x.dtype:
        return _move(cx, x)
    return cx.cast(x, dtype)


@register([prims.convert_element_type.default], ["Cast", "Identity"])
def _convert_element_type(cx, x, dtype):
    if dtype == x.dtype:
        return cx.emit1("Identity", [("x", x)])
    return cx.cast(x, dtype)


@register([aten.clone.default], ["TensorMove", "Identity", "Real", "Imag", "Complex"])
def _clone(cx, x, *, memory_format=None):
    return _move(cx, x)


@register([aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default], ["Identity"])
def _alias(cx, x):
    return cx.emit1("Identity", [("x", x)])


@register([aten.copy_.default, aten.copy.default],
          ["Cast", "BroadcastTo", "Identity", "Const", "Assign"])
def _copy(cx, dst: TensorRef, src: Any, non_blocking: bool = False):
    """``copy(dst, src)``: src cast to dst's dtype and broadcast to dst's shape. When ``copy_``
    writes a graph input (AOT's input mutation), the value becomes an extra graph output that
    the runner copies back into the input after the run — or, with ``enable_ref_data``, the
    input is a ``RefData`` and ``Assign`` writes it in the graph, after every reader of it."""
    if cx.node.target is aten.copy_.default and dst.op in cx.inplace_done:
        return src  # the input's buffer was updated in place (RefData): nothing to write back
    if (cx.node.target is aten.copy_.default and not cx.node.users
            and dst.op not in cx.data_index and dst.op not in cx.assigned):
        from ....errors import UnsupportedOpError

        raise UnsupportedOpError(
            f"%{cx.node.name}: copy_ into {cx.node.args[0]} (not a graph input) is only a "
            "side effect on the tensor it views; GE tensors are values, so the write would be "
            "lost. This comes from a non-functional decomposition; use mode='npugraph_ex'.")
    value = cx.tensor(src, dst.dtype)
    if tuple(value.shape) != tuple(dst.shape):
        value = cx.emit1("BroadcastTo", [("x", value), ("shape", cx.shape_of(dst))], None,
                         (dst.dtype, dst.shape))
    elif value is src and not (cx.node.target is aten.copy_.default and dst.op in cx.assigned):
        value = cx.emit1("Identity", [("x", value)], None, (dst.dtype, dst.shape))
    if cx.node.target is aten.copy_.default and dst.op in cx.assigned:
        readers = [r for r in cx.sinks_reading(dst.op) if r != value.op]
        (ref,) = cx.emit("Assign", [("ref", dst), ("value", value)], None,
                         [("ref", (dst.dtype, dst.shape))], control=readers)
        cx.keep_alive.append(ref.op)
        return ref
    if cx.node.target is aten.copy_.default and dst.op in cx.data_index:
        cx.mutations.append((cx.data_index[dst.op], value))
    return value


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


# -- factories -------------------------------------------------------------------------------
def _fill(cx, dims, value):
    dtype = cx.out_dtype
    return cx.emit1("Fill", [("dims", dims), ("value", cx.tensor(value, dtype))])


@register([aten.full.default], ["Fill", "Const", "Pack", "Cast"])
def _full(cx, size, fill_value, **_):
    return _fill(cx, cx.int_list(list(size)), fill_value)


@register([aten.zeros.default, aten.ones.default, aten.empty.memory_format], ["Fill", "Const", "Pack"])
def _zeros_ones(cx, size, **_):
    value = 1 if cx.node.target is aten.ones.default else 0
    return _fill(cx, cx.int_list(list(size)), value)


@register([aten.new_zeros.default, aten.new_ones.default, aten.new_empty.default,
           aten.new_full.default], ["Fill", "Const", "Pack"])
def _new_fill(cx, x, size, fill_value=None, **_):
    target = cx.node.target
    value = 1 if target is aten.new_ones.default else (fill_value if fill_value is not None else 0)
    return _fill(cx, cx.int_list(list(size)), value)


@register([aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
           aten.empty_like.default], ["Fill", "Const", "Shape"])
def _fill_like(cx, x, fill_value=None, **_):
    target = cx.node.target
    value = 1 if target is aten.ones_like.default else (fill_value if fill_value is not None else 0)
    return _fill(cx, cx.shape_of(x), value)


@register([aten.scalar_tensor.default], ["Const", "Cast"])
def _scalar_tensor(cx, value, **_):
    return cx.tensor(value, cx.out_dtype)


@register([aten.arange.default, aten.arange.start, aten.arange.start_step], ["Range", "Const", "Cast"])
def _arange(cx, start, end=None, step=1, **_):
    if end is None:
        start, end = 0, start
    dtype = cx.out_dtype
    return cx.emit1("Range", [("start", cx.tensor(start, dtype)), ("limit", cx.tensor(end, dtype)),
                              ("delta", cx.tensor(step, dtype))])


# -- symbolic sizes (SymInt nodes become shape-[] int64 tensors) -----------------------------
@register([aten.sym_size.int], ["Shape", "GatherV2", "Const"])
def _sym_size(cx, x, dim):
    dim = dim % len(x.shape)
    if x.shape[dim] >= 0:
        return cx.const(x.shape[dim], torch.int64)
    return cx.emit1("GatherV2", [("x", cx.shape_of(x)), ("indices", cx.const(dim, torch.int64)),
                                 ("axis", cx.const(0, torch.int64))], None, (torch.int64, ()))


@register([aten.sym_numel.default], ["ReduceProd", "Shape", "Const"])
def _sym_numel(cx, x):
    if all(d >= 0 for d in x.shape):
        n = 1
        for d in x.shape:
            n *= d
        return cx.const(n, torch.int64)
    return cx.emit1("ReduceProd", [("x", cx.shape_of(x)), ("axes", cx.const([0], torch.int64))],
                    {"keep_dims": False}, (torch.int64, ()))


def _sym_binary(ge_type: str):
    def conv(cx, a, b):
        return cx.emit1(ge_type, [("x1", cx.tensor(a, torch.int64)), ("x2", cx.tensor(b, torch.int64))],
                        None, (torch.int64, ()))
    return conv


for _fn, _ge in [(operator.add, "Add"), (operator.sub, "Sub"), (operator.mul, "Mul"),
                 (operator.floordiv, "FloorDiv"), (operator.mod, "FloorMod")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_binary(_ge))


for _fn, _ge in [(torch.sym_max, "Maximum"), (torch.sym_min, "Minimum")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_binary(_ge))


def _sym_compare(ge_type: str):
    def conv(cx, a, b):
        return cx.emit1(ge_type, [("x1", cx.tensor(a, torch.int64)), ("x2", cx.tensor(b, torch.int64))],
                        None, (torch.bool, ()))
    return conv


for _fn, _ge in [(operator.eq, "Equal"), (operator.ne, "NotEqual"), (operator.gt, "Greater"),
                 (operator.ge, "GreaterEqual"), (operator.lt, "Less"), (operator.le, "LessEqual")]:
    register([_fn], [_ge, "Const", "Cast"])(_sym_compare(_ge))


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
@register([aten._assert_tensor_metadata.default, aten._assert_scalar.default,
           aten.sym_constrain_range_for_size.default], [])
def _no_op(cx, *args, **kwargs) -> Optional[Any]:
    return None


__all__ = ["result_type"]
