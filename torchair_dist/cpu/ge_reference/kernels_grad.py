"""Reference kernels of GE's gradient ops (converters/aten_backward.py emits them), NCHW only,
symmetric pads (torch's padding), each computed with torch's own backward of the forward op the
GE op inverts: Conv2DBackpropInput/Filter, AvgPoolV2Grad, ResizeNearestNeighborV2Grad (TF's
legacy rule: src = floor(dst * in / out)), ResizeBilinearV2Grad (half-pixel centres or aligned
corners), and RepeatInterleave."""
from __future__ import annotations

import torch

from .kernels import ints, kernel
from .opspec import GeRuntimeError, OpSpec

aten = torch.ops.aten


def _nchw_geometry(spec: OpSpec):
    if spec.attr("data_format", "NHWC") != "NCHW":
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: only NCHW is implemented")
    top, bottom, left, right = spec.attr("pads", [0, 0, 0, 0])
    if top != bottom or left != right:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: asymmetric pads")
    return (list(spec.attr("strides"))[2:], [top, left],
            list(spec.attr("dilations", [1, 1, 1, 1]))[2:], int(spec.attr("groups", 1)))


@kernel("Conv2DBackpropInput")
def _conv_input_grad(spec: OpSpec):
    stride, pad, dilation, groups = _nchw_geometry(spec)

    def run(input_size, w, grad):
        x = grad.new_empty(ints(input_size))  # only its shape is read for the input grad
        return aten.convolution_backward(grad, x, w, None, stride, pad, dilation, False, [0, 0],
                                         groups, [True, False, False])[0]
    return run


@kernel("Conv2DBackpropFilter")
def _conv_filter_grad(spec: OpSpec):
    stride, pad, dilation, groups = _nchw_geometry(spec)

    def run(x, filter_size, grad):
        w = grad.new_empty(ints(filter_size))  # only its shape is read for the filter grad
        return aten.convolution_backward(grad, x, w, None, stride, pad, dilation, False, [0, 0],
                                         groups, [False, True, False])[1]
    return run


@kernel("AvgPoolV2Grad")
def _avg_pool_grad(spec: OpSpec):
    if spec.attr("data_format", "NCHW") != "NCHW" or spec.attr("padding_mode",
                                                               "CALCULATED") != "CALCULATED":
        raise GeRuntimeError(f"AvgPoolV2Grad {spec.name!r}: only NCHW with CALCULATED padding")
    k, s = list(spec.attr("ksize"))[2:], list(spec.attr("strides"))[2:]
    top, bottom, left, right = spec.attr("pads", [0, 0, 0, 0])
    if top != bottom or left != right or spec.attr("global_pooling", False):
        raise GeRuntimeError(f"AvgPoolV2Grad {spec.name!r}: asymmetric pads / global pooling")
    ceil, exclusive = bool(spec.attr("ceil_mode", False)), bool(spec.attr("exclusive", True))
    divisor = int(spec.attr("divisor_override", 0)) or None

    def run(shape, grad):
        x = torch.zeros(ints(shape), dtype=grad.dtype)
        return aten.avg_pool2d_backward(grad, x, k, s, [top, left], ceil, not exclusive, divisor)
    return run


@kernel("ResizeNearestNeighborV2Grad")
def _nearest_grad(spec: OpSpec):
    if spec.attr("align_corners", False) or spec.attr("half_pixel_centers", False):
        raise GeRuntimeError(f"ResizeNearestNeighborV2Grad {spec.name!r}: only the legacy rule "
                             "(no align_corners, no half_pixel_centers) is implemented")

    def run(grad, size):
        h, w = ints(size)
        return aten.upsample_nearest2d_backward(grad, list(grad.shape[2:]),
                                                [*grad.shape[:2], h, w], None, None)
    return run


@kernel("ResizeBilinearV2Grad")
def _bilinear_grad(spec: OpSpec):
    align = bool(spec.attr("align_corners", False))
    if align == bool(spec.attr("half_pixel_centers", False)):
        raise GeRuntimeError(f"ResizeBilinearV2Grad {spec.name!r}: exactly one of align_corners "
                             "and half_pixel_centers is implemented")

    def run(grad, image):
        return aten.upsample_bilinear2d_backward(grad, list(grad.shape[2:]), list(image.shape),
                                                 align, None, None)
    return run


@kernel("RepeatInterleave")
def _repeat_interleave(spec: OpSpec):
    """Each element (axis 1000: of the flattened x) or slice along ``axis`` repeated."""
    axis = int(spec.attr("axis", 1000))

    def run(x, repeats):
        if axis == 1000:
            return torch.repeat_interleave(x.reshape(-1), repeats.reshape(-1))
        return torch.repeat_interleave(x, repeats.reshape(-1), dim=axis)
    return run


def _ncdhw_pads(spec: OpSpec, default=None) -> list:
    """The symmetric pads (one per spatial dim) of an NCDHW op; other layouts and asymmetric
    pads are refused by name."""
    if spec.attr("data_format", "NDHWC") != "NCDHW":
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: only NCDHW is implemented")
    pads = list(spec.attr("pads", default))
    if pads[::2] != pads[1::2]:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: asymmetric pads")
    return pads[::2]


@kernel("AvgPool3DGrad")
def _avg_pool3d_grad(spec: OpSpec):
    pads = _ncdhw_pads(spec)
    k, s = list(spec.attr("ksize"))[2:], list(spec.attr("strides"))[2:]
    ceil, include = bool(spec.attr("ceil_mode", False)), bool(spec.attr("count_include_pad", True))
    divisor = int(spec.attr("divisor_override", 0)) or None

    def run(shape, grad):
        x = torch.zeros(ints(shape), dtype=grad.dtype)
        return aten.avg_pool3d_backward(grad, x, k, s, pads, ceil, include, divisor)
    return run


def _conv3d_grad(spec: OpSpec, which: int):
    """Conv3DBackpropInput (``which`` 0: inputs ``input_size, w, grad``) or
    Conv3DBackpropFilter (1: ``x, filter_size, grad``): the size input only gives a shape."""
    pad = _ncdhw_pads(spec, [0] * 6)
    stride = list(spec.attr("strides"))[2:]
    dilation = list(spec.attr("dilations", [1] * 5))[2:]
    groups = int(spec.attr("groups", 1))
    wanted = [which == 0, which == 1, False]

    def run(a, b, grad):
        x = grad.new_empty(ints(a)) if which == 0 else a
        w = grad.new_empty(ints(b)) if which == 1 else b
        return aten.convolution_backward(grad, x, w, None, stride, pad, dilation, False,
                                         [0, 0, 0], groups, wanted)[which]
    return run


@kernel("Conv3DBackpropInput")
def _conv3d_input_grad(spec: OpSpec):
    return _conv3d_grad(spec, 0)


@kernel("Conv3DBackpropFilter")
def _conv3d_filter_grad(spec: OpSpec):
    return _conv3d_grad(spec, 1)
