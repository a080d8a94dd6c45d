"""Converters: tensor factories (``full``, ``zeros``/``ones``, ``new_*``, ``*_like``,
``scalar_tensor``, ``arange``, ``eye``, uninitialised ``empty_*``)."""
from __future__ import annotations

import torch

from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


@register([aten.eye.default, aten.eye.m], ["Const"])
def _eye(cx, n, m=None, **_):
    """An identity matrix of static size is a constant."""
    from ....errors import UnsupportedOpError

    if not isinstance(n, int) or not isinstance(m if m is not None else n, int):
        raise UnsupportedOpError(f"%{cx.node.name}: eye with a symbolic size has no GE lowering")
    return cx.const(torch.eye(n, n if m is None else m, dtype=cx.out_dtype))


@register([aten.empty_permuted.default, torch.ops.prims.empty_strided.default],
          ["Fill", "Const", "Pack", "Cast"])
def _empty(cx, size, *args, **kwargs):
    """Uninitialised memory: any values are right; zeros are cheapest to state. The sizes
    are the node's own (symbolic ones computed in the graph)."""
    dtype, shape = cx.out()
    return cx.emit1("Fill", [("dims", cx.int_list(list(size))),
                             ("value", cx.const(0, dtype))])


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


@register([prims.iota.default], ["Range", "Mul", "Add", "Cast", "Const"])
def _iota(cx, length, *, start, step, dtype=None, device=None, requires_grad=False):
    """prims.iota: ``length`` values start, start + step, ... (arange's Range)."""
    dtype = cx.out_dtype
    if isinstance(length, int):
        limit = cx.tensor(start + length * step, dtype)
    else:  # a symbolic length: start + length * step at run time
        span = cx.emit1("Mul", [("x1", cx.cast(length, dtype)), ("x2", cx.const(step, dtype))],
                        desc=(dtype, ()))
        limit = cx.emit1("Add", [("x1", span), ("x2", cx.const(start, dtype))], desc=(dtype, ()))
    return cx.emit1("Range", [("start", cx.tensor(start, dtype)), ("limit", limit),
                              ("delta", cx.tensor(step, dtype))])
