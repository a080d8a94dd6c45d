"""Converters for the ops that read or move bits: signbit, shifts, ``view.dtype`` (a bitcast).

``signbit`` reads the float's sign bit through ``Bitcast`` (so -0.0 and -NaN are negative, as in
torch; a comparison with zero cannot see either). Shifts follow torch's CPU kernels, not C's
undefined behaviour: a shift count outside ``[0, bits)`` (negative counts included) gives 0 for
a left shift and the sign fill (0 or -1) for a right shift; GE's LeftShift/RightShift leave that
case to the implementation, so the count is masked first. ``view.dtype`` is GE's ``Bitcast``
(TF semantics: a narrower type adds a trailing dimension, a wider one removes it) with a Reshape
to torch's shape; bfloat16, which Bitcast does not take, goes through its exact float32 widening.
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims

_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bitcast(cx, x, dtype: torch.dtype):
    """``x`` reinterpreted as ``dtype`` with torch's ``view(dtype)`` shape rule (the last
    dimension scales by the size ratio)."""
    if x.dtype == dtype:
        return x
    if x.dtype == torch.bfloat16:  # bf16 bits = the high half of its (exact) float32 value
        wide = cx.emit1("Bitcast", [("x", cx.cast(x, torch.float32))],
                        {"type": torch.int32}, (torch.int32, x.shape))
        high = cx.emit1("RightShift", [("x", wide), ("y", cx.const(16, torch.int32))],
                        None, (torch.int32, x.shape), port="z")
        return _bitcast(cx, cx.cast(high, torch.int16), dtype)
    if dtype == torch.bfloat16:
        bits = cx.cast(_bitcast(cx, x, torch.int16), torch.int32)
        shape = bits.shape
        wide = cx.emit1("LeftShift", [("x", bits), ("y", cx.const(16, torch.int32))],
                        None, (torch.int32, shape), port="z")
        as_float = cx.emit1("Bitcast", [("x", wide)], {"type": torch.float32},
                            (torch.float32, shape))
        return cx.cast(as_float, torch.bfloat16)
    src, dst = x.dtype.itemsize, dtype.itemsize
    attrs = {"type": dtype}
    if src == dst:
        return cx.emit1("Bitcast", [("x", x)], attrs, (dtype, x.shape))
    lead = cx.dims(x)[:-1] if x.shape else []
    if src > dst:  # [..., n] -> [..., n, src/dst] -> [..., n * src/dst]
        ratio = src // dst
        parts = cx.emit1("Bitcast", [("x", x)], attrs, (dtype, tuple(x.shape) + (ratio,)))
        last = x.shape[-1] * ratio if x.shape and x.shape[-1] >= 0 else -1
        return cx.reshape(parts, list(lead) + [-1], tuple(x.shape[:-1]) + (last,))
    ratio = dst // src  # [..., n] -> [..., n / ratio, ratio] -> [..., n / ratio]
    last = x.shape[-1] // ratio if x.shape[-1] >= 0 else -1
    grouped = cx.reshape(x, list(lead) + [-1, ratio], tuple(x.shape[:-1]) + (last, ratio))
    return cx.emit1("Bitcast", [("x", grouped)], attrs, (dtype, tuple(x.shape[:-1]) + (last,)))


@register([aten.view.dtype], ["Bitcast", "Reshape", "Pack", "Shape", "GatherV2", "Cast",
                              "LeftShift", "RightShift", "Const"])
def _view_dtype(cx, x, dtype):
    return _bitcast(cx, x, dtype)


@register([prims.signbit.default, aten.signbit.default],
          ["Bitcast", "Less", "Cast", "Const", "RightShift"])
def _signbit(cx, x):
    """The sign bit: a float reinterpreted as the same-width signed integer is negative exactly
    when its sign bit is set (-0.0 and -NaN included); an integer is compared with 0."""
    if x.dtype.is_floating_point:
        x = _bitcast(cx, x, _SAME_WIDTH_INT[x.dtype.itemsize])
    return cx.emit1("Less", [("x1", x), ("x2", cx.const(0, x.dtype))], desc=(torch.bool, x.shape))


def _shift(left: bool):
    ge_type = "LeftShift" if left else "RightShift"

    def conv(cx, a, b):
        dtype = cx.out_dtype
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of {dtype}: shifts "
                                     "take integer tensors")
        bits = dtype.itemsize * 8
        signed = dtype.is_signed
        x = cx.tensor(a, dtype)
        # what torch gives for a count outside [0, bits): 0, or the sign fill of a right shift
        if not left and signed:
            overflow = cx.emit1(ge_type, [("x", x), ("y", cx.const(bits - 1, dtype))],
                                desc=(dtype, x.shape), port="z")
        else:
            overflow = cx.emit1("Mul", [("x1", x), ("x2", cx.const(0, dtype))], desc=(dtype, x.shape))
        if not hasattr(b, "dtype"):  # a Python count: decided now
            b = int(b)
            if 0 <= b < bits:
                return cx.emit1(ge_type, [("x", x), ("y", cx.const(b, dtype))], port="z")
            return overflow
        y = cx.tensor(b, dtype)
        b_desc = (torch.bool, y.shape)
        valid = cx.emit1("Less", [("x1", y), ("x2", cx.const(bits, dtype))], desc=b_desc)
        if signed:
            valid = cx.emit1("LogicalAnd", [
                ("x1", valid),
                ("x2", cx.emit1("GreaterEqual", [("x1", y), ("x2", cx.const(0, dtype))],
                                desc=b_desc))], desc=b_desc)
        safe = cx.emit1("SelectV2", [("condition", valid), ("then", y),
                                     ("else", cx.const(0, dtype))], desc=(dtype, y.shape),
                     port="result")
        shifted = cx.emit1(ge_type, [("x", x), ("y", safe)], port="z")
        return cx.emit1("SelectV2", [("condition", valid), ("then", shifted), ("else", overflow)],
                        port="result")
    return conv


_EMITS = ["Less", "GreaterEqual", "LogicalAnd", "SelectV2", "Mul", "Cast", "Const"]
register([aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
          aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar,
          prims.shift_left.default], ["LeftShift"] + _EMITS)(_shift(True))
register([aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar,
          prims.shift_right_arithmetic.default], ["RightShift"] + _EMITS)(_shift(False))


def _last_axis_slice(cx, x, begin: int, end, width: int):
    """``x[..., begin:end]`` (``end`` None: to the end; negative: from the end) by
    StridedSlice, every other axis kept whole (symbolic ones included)."""
    rank = len(x.shape)
    masks = (1 << (rank - 1)) - 1
    b, e = [0] * rank, [0] * rank
    b[-1], e[-1] = begin, 0 if end is None else end
    end_mask = masks | (1 << (rank - 1)) if end is None else masks
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.const(b, torch.int64)),
                                     ("end", cx.const(e, torch.int64)),
                                     ("strides", cx.const([1] * rank, torch.int64))],
                    {"begin_mask": masks, "end_mask": end_mask},
                    (x.dtype, (*x.shape[:-1], width)))


@register([torch.ops.quantized.embedding_bag_byte_unpack.default],
          ["StridedSlice", "Reshape", "Bitcast", "Cast", "Mul", "Add", "Const", "Pack", "Shape",
           "GatherV2"])
def _embedding_bag_byte_unpack(cx, packed):
    """8-bit rowwise-quantized rows ``[..., N + 8]`` (N bytes, then the row's float32 scale and
    bias): ``data * scale + bias`` in float32, the scale and bias read through ``Bitcast``
    (the last 8 bytes are sliced from the end, so N may be symbolic)."""
    if packed.dtype != torch.uint8 or not packed.shape or 0 <= packed.shape[-1] < 8:
        raise UnsupportedOpError(f"%{cx.node.name}: embedding_bag_byte_unpack of {packed.dtype} "
                                 f"{tuple(packed.shape)}: uint8 rows of N + 8 bytes expected")
    width = packed.shape[-1]
    lead = [cx.dim(packed, i) for i in range(len(packed.shape) - 1)]
    data = cx.cast(_last_axis_slice(cx, packed, 0, -8, width - 8 if width >= 0 else -1),
                   torch.float32)
    tail = _last_axis_slice(cx, packed, -8, None, 8)
    quads = cx.reshape(tail, [*lead, 2, 4], (*packed.shape[:-1], 2, 4))
    pair = cx.emit1("Bitcast", [("x", quads)], {"type": torch.float32},
                    (torch.float32, (*packed.shape[:-1], 2)))
    scale = _last_axis_slice(cx, pair, 0, 1, 1)
    bias = _last_axis_slice(cx, pair, 1, None, 1)
    dtype, shape = cx.out()
    y = cx.emit1("Mul", [("x1", data), ("x2", scale)], None, (torch.float32, tuple(shape)))
    return cx.emit1("Add", [("x1", y), ("x2", bias)], None, (torch.float32, tuple(shape)))
