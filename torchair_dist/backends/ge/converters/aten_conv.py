"""Converter: ``aten.convolution`` — forward and transposed, 1-D, 2-D and 3-D — onto GE's
Conv2D / Conv3D / Conv2DTranspose / Conv3DTranspose in NCHW / NCDHW, and 3-D average pooling
and pairwise distances. The registry's Conv3D and transposed convolutions take float16 (and
int8) only: other dtypes are refused there rather than computed in float16.

A 1-D convolution runs as 2-D with H = 1. The bias is added after the op (the ops' bias inputs
take no bfloat16). Transposed ops take ``input_size`` (the output's full shape), torch's
``padding`` as ``pads`` (the padding of the forward convolution they invert) and
``output_padding``; their filter is torch's (C_in, C_out / groups, *kernel) layout.
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten


def _as_2d(cx, t, shape):
    """[N, C, L] -> [N, C, 1, L] (and a weight [O, I, K] -> [O, I, 1, K])."""
    new = (shape[0], shape[1], 1, shape[2])
    dims = [cx.dim(t, 0) if t.shape[0] < 0 else t.shape[0], shape[1], 1,
            cx.dim(t, 2) if t.shape[2] < 0 else t.shape[2]]
    return cx.reshape(t, dims, new)


@register([aten.convolution.default], ["Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose",
                                       "Reshape", "Add", "Cast", "Const", "Pack"])
def _convolution(cx, x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    cx.require_float(x, "Conv2D")
    rank = len(x.shape)
    if rank not in (3, 4, 5):
        raise UnsupportedOpError(f"%{cx.node.name}: a {rank - 2}-D convolution has no GE "
                                 "lowering (1-D, 2-D and 3-D do)")
    dtype, shape = cx.out()
    stride, padding, dilation = list(stride), list(padding), list(dilation)
    output_padding = list(output_padding or [0] * (rank - 2))
    weight = cx.cast(weight, x.dtype)
    out = tuple(shape)
    if rank == 3:
        x, weight = _as_2d(cx, x, x.shape), _as_2d(cx, weight, weight.shape)
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
        output_padding = [0, *output_padding]
        out = (shape[0], shape[1], 1, shape[2])
    spatial = len(out) - 2
    if (transposed or spatial == 3) and x.dtype != torch.float16:
        raise UnsupportedOpError(
            f"%{cx.node.name}: a {'transposed' if transposed else '3-D'} convolution of "
            f"{x.dtype}: GE's {'Conv2DTranspose/Conv3DTranspose' if transposed else 'Conv3D'} "
            "take float16 (and int8) only, and computing a wider type in float16 would lose "
            "precision silently")
    fmt = "NCHW" if spatial == 2 else "NCDHW"
    attrs = {"strides": [1, 1, *stride], "pads": [p for p in padding for _ in (0, 1)],
             "dilations": [1, 1, *dilation], "groups": int(groups), "data_format": fmt}
    if not transposed:
        if any(output_padding):
            raise UnsupportedOpError(f"%{cx.node.name}: output_padding on a forward convolution")
        op = "Conv2D" if spatial == 2 else "Conv3D"
        y = cx.emit1(op, [("x", x), ("filter", weight)], attrs, (x.dtype, out))
    else:
        if any(out_d < 0 for out_d in out):
            raise UnsupportedOpError(f"%{cx.node.name}: a transposed convolution with a symbolic "
                                     "size (GE's input_size is static here)")
        op = "Conv2DTranspose" if spatial == 2 else "Conv3DTranspose"
        attrs["output_padding"] = [0, 0, *output_padding]
        y = cx.emit1(op, [("input_size", cx.const(list(out), torch.int32)), ("x", x),
                          ("filter", weight)], attrs, (x.dtype, out))
    if rank == 3:
        y = cx.reshape(y, [cx.dim(y, 0), shape[1], cx.dim(y, 3)], tuple(shape))
    if bias is not None:
        b = cx.reshape(bias, [bias.shape[0]] + [1] * (len(shape) - 2),
                       (bias.shape[0],) + (1,) * (len(shape) - 2))
        y = cx.emit1("Add", [("x1", y), ("x2", cx.cast(b, y.dtype))], None, (y.dtype, tuple(shape)))
    return cx.cast(y, dtype)


@register([aten.avg_pool3d.default], ["AvgPool3D", "Cast"])
def _avg_pool3d(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    cx.require_float(x, "AvgPool3D")
    if len(x.shape) != 5:
        raise UnsupportedOpError(f"%{cx.node.name}: avg_pool3d of a {len(x.shape)}-D input "
                                 "(NCDHW only)")
    k = list(kernel_size) * (3 // len(kernel_size))
    s = list(stride or k) * (3 // len(stride or k))
    p = [padding] * 3 if isinstance(padding, int) else list(padding) * (3 // len(padding))
    dtype, shape = cx.out()
    return cx.emit1("AvgPool3D", [("x", x)],
                    {"ksize": [1, 1, *k], "strides": [1, 1, *s],
                     "pads": [q for q in p for _ in (0, 1)], "ceil_mode": bool(ceil_mode),
                     "count_include_pad": bool(count_include_pad),
                     "divisor_override": int(divisor_override or 0), "data_format": "NCDHW"},
                    (x.dtype, tuple(shape)))


@register([aten._pdist_forward.default], ["Pdist", "Cast"])
def _pdist(cx, x, p=2.0):
    cx.require_float(x, "Pdist")
    return cx.emit1("Pdist", [("x", x)], {"p": float(p)})


@register([aten.adaptive_max_pool2d.default], ["AdaptiveMaxPool2d", "Cast"])
def _adaptive_max_pool2d(cx, x, output_size):
    """GE's AdaptiveMaxPool2d (PyTorch's windows; argmax is the flat index in the input plane,
    as torch's indices)."""
    cx.require_float(x, "AdaptiveMaxPool2d")
    (vdt, vshape), (idt, ishape) = cx.out(0), cx.out(1)
    work = x.dtype if x.dtype in (torch.float32, torch.float16, torch.float64) else torch.float32
    y, idx = cx.emit("AdaptiveMaxPool2d", [("x", cx.cast(x, work))],
                     {"output_size": [int(v) for v in output_size]},
                     [("y", (work, tuple(vshape))), ("argmax", (torch.int64, tuple(ishape)))])
    return [cx.cast(y, vdt), cx.cast(idx, idt)]
