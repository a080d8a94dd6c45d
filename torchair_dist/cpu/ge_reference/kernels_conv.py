"""Reference kernels of GE's 3-D and transposed convolutions, 3-D average pooling and Pdist
(NCDHW / NCHW data formats only; ``pads`` pairs must be symmetric, as torch's padding is).
Transposed convolutions produce ``input_size`` (checked) from torch's (C_in, C_out/groups, k...)
filter layout, with the forward convolution's ``pads`` and ``output_padding``."""
from __future__ import annotations

import torch.nn.functional as F

from .kernels import kernel
from .opspec import GeRuntimeError, OpSpec


def _geometry(spec: OpSpec, fmt: str):
    if spec.attr("data_format", "") != fmt or spec.port("bias") is not None:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: only {fmt} without a bias input is "
                             "implemented")
    pads = list(spec.attr("pads"))
    if any(pads[i] != pads[i + 1] for i in range(0, len(pads), 2)):
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: asymmetric pads {pads}")
    n = len(fmt) - 2
    ones = [1] * (n + 2)
    return (list(spec.attr("strides"))[2:], pads[::2], list(spec.attr("dilations", ones))[2:],
            int(spec.attr("groups", 1)))


@kernel("Conv3D")
def _conv3d(spec: OpSpec):
    stride, pad, dilation, groups = _geometry(spec, "NCDHW")
    return lambda x, w: F.conv3d(x, w, None, stride, pad, dilation, groups)


@kernel("Conv2DTranspose", "Conv3DTranspose")
def _conv_transpose(spec: OpSpec):
    fmt = "NCHW" if spec.type == "Conv2DTranspose" else "NCDHW"
    stride, pad, dilation, groups = _geometry(spec, fmt)
    extra = list(spec.attr("output_padding", [0] * len(fmt)))[2:]
    fn = F.conv_transpose2d if fmt == "NCHW" else F.conv_transpose3d

    def run(input_size, x, w):
        y = fn(x, w, None, stride, pad, extra, groups, dilation)
        want = [int(v) for v in input_size.reshape(-1).tolist()]
        if list(y.shape) != want:
            raise GeRuntimeError(f"{spec.type} {spec.name!r}: input_size {want} does not match "
                                 f"the transposed convolution's output {list(y.shape)}")
        return y
    return run


@kernel("AvgPool3D")
def _avg_pool3d(spec: OpSpec):
    if spec.attr("data_format", "NDHWC") != "NCDHW":
        raise GeRuntimeError(f"AvgPool3D {spec.name!r}: only NCDHW is implemented")
    k, s = list(spec.attr("ksize"))[2:], list(spec.attr("strides"))[2:]
    pads = list(spec.attr("pads"))
    divisor = int(spec.attr("divisor_override", 0)) or None
    return lambda x: F.avg_pool3d(x, k, s, pads[::2], bool(spec.attr("ceil_mode", False)),
                                  bool(spec.attr("count_include_pad", True)), divisor)


@kernel("Pdist")
def _pdist(spec: OpSpec):
    p = float(spec.attr("p", 2.0))
    return lambda x: F.pdist(x, p)


@kernel("AdaptiveMaxPool2d")
def _adaptive_max_pool2d(spec: OpSpec):
    """(max over each adaptive window of the last two dims, its flat index in the plane)."""
    size = list(spec.attr("output_size"))
    idx = spec.outputs[1][0]

    def run(x):
        y, i = F.adaptive_max_pool2d(x, size, return_indices=True)
        return y, i.to(idx)
    return run


@kernel("GridSampler3D")
def _grid_sampler_3d(spec: OpSpec):
    """torch's grid_sample on NCDHW input with a [N, D, H, W, 3] grid (modes by name)."""
    if spec.attr("data_format", "NCDHW") != "NCDHW":
        raise GeRuntimeError(f"GridSampler3D {spec.name!r}: only NCDHW is implemented")
    mode, padding = spec.attr("interpolation_mode", "bilinear"), spec.attr("padding_mode", "zeros")
    align = bool(spec.attr("align_corners", False))
    return lambda x, grid: F.grid_sample(x, grid, mode, padding, align)
