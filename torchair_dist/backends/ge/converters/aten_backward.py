"""Converters for the backward ops of training graphs that PyTorch's decomposition tables do not
cover (torch._decomp has no entry for them: Inductor lowers them itself), onto GE's gradient
ops: ``convolution_backward`` (2-D, not transposed) -> Conv2DBackpropInput / Conv2DBackpropFilter
(+ ReduceSum for the bias), ``avg_pool2d_backward`` -> AvgPoolV2Grad,
``upsample_nearest2d_backward`` -> ResizeNearestNeighborV2Grad (TF's legacy nearest rule
``src = floor(dst * in / out)``, torch's) and ``upsample_bilinear2d_backward`` ->
ResizeBilinearV2Grad (torch's ``align_corners=False`` is TF's half-pixel centres).
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .aten_conv import spatial_list
from .registry import register

aten = torch.ops.aten


def _nchw(cx, t, what: str, symbolic: bool = False) -> None:
    if len(t.shape) != 4 or (not symbolic and any(d < 0 for d in t.shape)):
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a {what} of shape "
                                 f"{tuple(t.shape)}: lowered for "
                                 f"{'' if symbolic else 'static '}4-D (NCHW) tensors only")


def _shape_i32(cx, t):
    """The run-time shape of ``t`` as int32 (a Const when static): GE's gradient ops take the
    shape they restore as a tensor."""
    return cx.cast(cx.shape_of(t), torch.int32)


def _attr_ints(cx, values, i: int, what: str, n: int = 2) -> list:
    """An int-list argument GE takes as an attribute (symbolic entries fixed by a guard)."""
    fx = cx.node.args
    return spatial_list(cx.static_ints(values, fx[i] if len(fx) > i else None, what), n)


def _work(x):
    return torch.float32 if x.dtype == torch.bfloat16 else x.dtype


@register([aten.convolution_backward.default],
          ["Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3DBackpropInput",
           "Conv3DBackpropFilter", "ReduceSum", "Cast", "Const", "Shape"])
def _convolution_backward(cx, grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """2-D (NCHW) and 3-D (NCDHW): the input's and filter's gradients from their (run-time)
    shapes; stride, padding, dilation and groups are attributes (symbolic ones fixed by a
    guard)."""
    if len(x.shape) != 5:
        _nchw(cx, x, "input", symbolic=True)
    n = len(x.shape) - 2
    kind, fmt = ("Conv3D", "NCDHW") if n == 3 else ("Conv2D", "NCHW")
    if transposed:
        raise UnsupportedOpError(f"%{cx.node.name}: convolution_backward of a transposed "
                                 "convolution has no GE lowering (forward ones do)")
    stride, padding, dilation = (_attr_ints(cx, v, i, what, n) for v, i, what in (
        (stride, 4, "stride"), (padding, 5, "padding"), (dilation, 6, "dilation")))
    groups = cx.static_int(groups, cx.node.args[9] if len(cx.node.args) > 9 else None, "groups")
    attrs = {"strides": [1, 1, *stride], "pads": [q for q in padding for _ in (0, 1)],
             "dilations": [1, 1, *dilation], "groups": groups, "data_format": fmt}
    work = _work(x)
    g, xw, w = cx.cast(grad, work), cx.cast(x, work), cx.cast(weight, work)
    outs = [None, None, None]
    if output_mask[0]:
        y = cx.emit1(kind + "BackpropInput", [("input_size", _shape_i32(cx, x)),
                                             ("filter", w), ("out_backprop", g)], attrs,
                     (work, tuple(x.shape)))
        outs[0] = cx.cast(y, x.dtype)
    if output_mask[1]:
        y = cx.emit1(kind + "BackpropFilter", [("x", xw),
                                              ("filter_size", _shape_i32(cx, weight)),
                                              ("out_backprop", g)], attrs, (work, tuple(weight.shape)))
        outs[1] = cx.cast(y, weight.dtype)
    if output_mask[2]:
        y = cx.emit1("ReduceSum", [("x", g), ("axes", cx.const([0, *range(2, n + 2)], torch.int64))],
                     {"keep_dims": False}, (work, (grad.shape[1],)))
        outs[2] = cx.cast(y, grad.dtype)
    return outs


@register([aten.avg_pool2d_backward.default], ["AvgPoolV2Grad", "Cast", "Const", "Shape"])
def _avg_pool2d_backward(cx, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override=None):
    """GE's AvgPoolV2Grad from the input's (run-time) shape; window, stride and padding are
    attributes (symbolic ones fixed by a guard)."""
    _nchw(cx, x, "input", symbolic=True)
    kernel = _attr_ints(cx, kernel_size, 2, "kernel_size")
    stride = _attr_ints(cx, stride, 3, "stride") if stride else kernel
    padding = _attr_ints(cx, padding, 4, "padding")
    attrs = {"ksize": [1, 1, *kernel], "strides": [1, 1, *stride],
             "pads": [q for q in padding for _ in (0, 1)], "padding_mode": "CALCULATED",
             "data_format": "NCHW", "ceil_mode": bool(ceil_mode),
             "exclusive": not count_include_pad, "divisor_override": int(divisor_override or 0)}
    y = cx.emit1("AvgPoolV2Grad", [("orig_input_shape", _shape_i32(cx, x)),
                                   ("input_grad", grad)], attrs, port="out_grad")
    return cx.cast(y, cx.out_dtype)


@register([aten.avg_pool3d_backward.default], ["AvgPool3DGrad", "Cast", "Const", "Shape"])
def _avg_pool3d_backward(cx, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override=None):
    """GE's AvgPool3DGrad (NCDHW) from the input's run-time shape; window, stride and padding
    are attributes (symbolic ones fixed by a guard). Low precision is computed in float32."""
    if len(x.shape) != 5:
        raise UnsupportedOpError(f"%{cx.node.name}: avg_pool3d_backward of a {len(x.shape)}-D "
                                 "input: lowered for 5-D (NCDHW) tensors only")
    kernel = _attr_ints(cx, kernel_size, 2, "kernel_size", 3)
    stride = _attr_ints(cx, stride, 3, "stride", 3) if stride else kernel
    padding = _attr_ints(cx, padding, 4, "padding", 3)
    work = torch.float32 if grad.dtype in (torch.bfloat16, torch.float16) else grad.dtype
    y = cx.emit1("AvgPool3DGrad", [("orig_input_shape", _shape_i32(cx, x)),
                                   ("grads", cx.cast(grad, work))],
                 {"ksize": [1, 1, *kernel], "strides": [1, 1, *stride],
                  "pads": [q for q in padding for _ in (0, 1)], "ceil_mode": bool(ceil_mode),
                  "count_include_pad": bool(count_include_pad),
                  "divisor_override": int(divisor_override or 0), "data_format": "NCDHW"},
                 (work, tuple(x.shape)), port="output")
    return cx.cast(y, cx.out_dtype)


def _check_scales(cx, out_size, in_size, scales) -> None:
    """Explicit scales equal to out/in give torch's size-ratio rule (what GE computes);
    others (interpolate(scale_factor=1.7, recompute_scale_factor=False)) would not."""
    for o, i, s in zip(out_size, in_size, scales):
        if s is not None and float(s) != o / i and 1.0 / float(s) != i / o:
            raise UnsupportedOpError(
                f"%{cx.node.name}: {cx.node.target} with scale {s} other than output/input size "
                f"({o}/{i}): GE's resize gradient uses the size ratio")


@register([aten.upsample_nearest2d_backward.default],
          ["ResizeNearestNeighborV2Grad", "Cast", "Const"])
def _upsample_nearest2d_backward(cx, grad, output_size, input_size, scales_h=None, scales_w=None):
    _nchw(cx, grad, "gradient")
    in_hw = list(input_size)[2:]
    _check_scales(cx, list(output_size), in_hw, [scales_h, scales_w])
    y = cx.emit1("ResizeNearestNeighborV2Grad", [("grads", grad),
                                                 ("size", cx.const(in_hw, torch.int32))],
                 {"align_corners": False, "half_pixel_centers": False})
    return cx.cast(y, cx.out_dtype)


@register([aten.upsample_bilinear2d_backward.default],
          ["ResizeBilinearV2Grad", "Fill", "Cast", "Const"])
def _upsample_bilinear2d_backward(cx, grad, output_size, input_size, align_corners, scales_h=None,
                                  scales_w=None):
    _nchw(cx, grad, "gradient")
    in_shape = [int(v) for v in input_size]
    _check_scales(cx, list(output_size), in_shape[2:], [scales_h, scales_w])
    g = cx.cast(grad, torch.float32)
    image = cx.emit1("Fill", [("dims", cx.const(in_shape, torch.int64)),
                              ("value", cx.const(0.0, torch.float32))],
                     desc=(torch.float32, tuple(in_shape)))
    y = cx.emit1("ResizeBilinearV2Grad", [("grads", g), ("original_image", image)],
                 {"align_corners": bool(align_corners), "half_pixel_centers": not align_corners},
                 (torch.float32, tuple(in_shape)))
    return cx.cast(y, cx.out_dtype)
