"""Converters: casts and copies (``_to_copy``, ``convert_element_type``, ``clone``, ``copy_``,
aliases and detaches)."""
from __future__ import annotations

from typing import Any

import torch

from ..builder import TensorRef
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def _move(cx, x):
    """A copy of ``x``: TensorMove; Identity for float64 (not among TensorMove's types); for
    a complex tensor (which neither takes) its parts joined again."""
    if x.dtype.is_complex:
        from .aten_complex import copy_complex

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


@register([prims.copy_strided.default], ["TensorMove", "Identity", "Real", "Imag", "Complex"])
def _copy_strided(cx, x, stride):
    """A copy with the given strides (decompositions keep a layout with it): the values are
    ``x``'s; GE tensors are dense, and an output's strides are eager's again after the run
    (the runner lays each output out as the FX graph records it)."""
    return _move(cx, x)


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
