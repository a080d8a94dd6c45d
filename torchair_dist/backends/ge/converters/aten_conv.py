"""Converter: ``aten.convolution`` — forward and transposed, 1-D, 2-D and 3-D — onto GE's
Conv2D / Conv3D / Conv2DTranspose / Conv3DTranspose in NCHW / NCDHW, and 3-D average pooling
and pairwise distances. The registry's Conv3D and transposed convolutions take float16 (and
int8) only; other dtypes are not computed in float16 but rewritten onto Conv2D: a transposed
convolution as the forward one on a zero-spread input with the filter reversed, a 3-D one as
one 2-D convolution per depth tap, summed.

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


def spatial_list(values, n: int) -> list:
    """A conv/pool int list for ``n`` spatial dims: a one-element list (or an int) applies to
    every dim, as in eager."""
    values = [values] if isinstance(values, int) else list(values)
    return values * n if len(values) == 1 else values


def _as_2d(cx, t, shape):
    """[N, C, L] -> [N, C, 1, L] (and a weight [O, I, K] -> [O, I, 1, K])."""
    new = (shape[0], shape[1], 1, shape[2])
    dims = [cx.dim(t, 0) if t.shape[0] < 0 else t.shape[0], shape[1], 1,
            cx.dim(t, 2) if t.shape[2] < 0 else t.shape[2]]
    return cx.reshape(t, dims, new)


def _dilate_kernel(cx, w, axis: int, d):
    """``w`` with ``d - 1`` zeros between its taps along ``axis`` (a convolution with it and
    dilation 1 is the one with dilation ``d``): each tap gets a trailing axis padded to length
    d, the two axes merged, and the trailing zeros after the last tap cut; ``d`` may be a
    run-time (symbolic) size."""
    i64 = torch.int64
    rank = len(w.shape)
    d = cx.tensor(d, i64)
    grown = tuple(w.shape[:axis + 1]) + (1,) + tuple(w.shape[axis + 1:])
    u = cx.emit1("Unsqueeze", [("x", w)], {"axes": [axis + 1]}, (w.dtype, grown))
    less = cx.emit1("Sub", [("x1", d), ("x2", cx.const(1, i64))], None, (i64, ()))
    pads = [v for i in range(rank + 1) for v in ((0, less) if i == axis + 1 else (0, 0))]
    padded = cx.emit1("PadV3", [("x", u), ("paddings", cx.int_list(pads)),
                                ("constant_values", cx.const(0, w.dtype))],
                      {"mode": "constant", "paddings_contiguous": True},
                      (w.dtype, grown[:axis + 1] + (-1,) + grown[axis + 2:]))
    span = cx.emit1("Mul", [("x1", cx.tensor(cx.dim(w, axis), i64)), ("x2", d)], None, (i64, ()))
    dims = [cx.dim(w, i) for i in range(rank)]
    dims[axis] = span
    desc = tuple(-1 if i == axis else s for i, s in enumerate(w.shape))
    merged = cx.reshape(padded, dims, desc)
    keep = cx.emit1("Add", [("x1", cx.emit1("Sub", [("x1", span), ("x2", d)], None, (i64, ()))),
                            ("x2", cx.const(1, i64))], None, (i64, ()))
    others = sum(1 << i for i in range(rank) if i != axis)
    return cx.emit1("StridedSlice", [("x", merged), ("begin", cx.const([0] * rank, i64)),
                                     ("end", cx.int_list([keep if i == axis else 0
                                                          for i in range(rank)])),
                                     ("strides", cx.const([1] * rank, i64))],
                    {"begin_mask": others, "end_mask": others}, (w.dtype, desc))


@register([aten.convolution.default], ["Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose",
                                       "Reshape", "Add", "Cast", "Const", "Pack", "PadV3",
                                       "StridedSlice", "Transpose", "ReverseV2", "GatherV2",
                                       "Unsqueeze", "Sub", "Mul", "Shape"])
def _convolution(cx, x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    cx.require_float(x, "Conv2D")
    rank = len(x.shape)
    if rank not in (3, 4, 5):
        raise UnsupportedOpError(f"%{cx.node.name}: a {rank - 2}-D convolution has no GE "
                                 "lowering (1-D, 2-D and 3-D do)")
    dtype, shape = cx.out()
    n = rank - 2  # torch broadcasts a one-element stride/padding/dilation to every dim
    dil = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation]
    if not transposed and rank in (3, 4) and any(not isinstance(v, int) for v in dil):
        # a symbolic dilation (GE takes it as an attribute): the kernel dilated at run time
        # instead, so no guard fixes the size it comes from
        for axis, v in zip(range(2, rank), dil * n if len(dil) == 1 else dil):
            if not (isinstance(v, int) and v == 1):
                weight = _dilate_kernel(cx, cx.cast(weight, x.dtype), axis, v)
        dilation = [1] * n
    fx = cx.node.args  # GE takes these as attributes: symbolic ones are fixed by a guard
    stride, padding, dilation, output_padding = (
        spatial_list(cx.static_ints(v, fx[i] if len(fx) > i else None, name), n)
        for i, v, name in ((3, stride, "stride"), (4, padding, "padding"), (5, dilation, "dilation"),
                           (7, output_padding or [0], "output_padding")))
    groups = cx.static_int(groups, fx[8] if len(fx) > 8 else None, "groups")
    weight = cx.cast(weight, x.dtype)
    out = tuple(shape)
    if rank == 3 and transposed and x.dtype != torch.float16 and any(
            d < 0 for d in tuple(x.shape) + tuple(weight.shape) + out):
        # the transposed lowering unrolls over static sizes: fixed by guards here, before
        # the 1-D operands become 2-D (another size recompiles)
        x = cx.static_shape(x, fx[0], "input")
        weight = cx.static_shape(weight, fx[1], "weight")
        shape = out = tuple(cx.static_int(d, v, "output size") for d, v in zip(shape, cx.val.shape))
    if rank == 3:
        x, weight = _as_2d(cx, x, x.shape), _as_2d(cx, weight, weight.shape)
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
        output_padding = [0, *output_padding]
        out = (shape[0], shape[1], 1, shape[2])
    spatial = len(out) - 2
    if (transposed or spatial == 3) and x.dtype != torch.float16 and any(
            d < 0 for d in tuple(x.shape) + tuple(weight.shape) + out):
        # these lowerings unroll over static sizes: symbolic ones are fixed by guards
        x = cx.static_shape(x, fx[0], "input")
        weight = cx.static_shape(weight, fx[1], "weight")
        out = shape = tuple(cx.static_int(d, v, "output size")
                            for d, v in zip(shape, cx.val.shape))
    if (transposed or spatial == 3) and x.dtype != torch.float16:
        # the registry's Conv3D / Conv*Transpose take float16 only: wider types through Conv2D
        if x.dtype == torch.float64:
            raise UnsupportedOpError(f"%{cx.node.name}: a float64 {'transposed' if transposed else '3-D'} "
                                     "convolution: GE's Conv2D/Conv3D take no float64")
        if x.dtype == torch.bfloat16:  # the taps are summed here: accumulate in float32
            x, weight = cx.cast(x, torch.float32), cx.cast(weight, torch.float32)
        if transposed:
            x, weight = _transposed_as_forward(cx, x, weight, stride, padding, output_padding,
                                               dilation, int(groups))
            stride, padding = [1] * spatial, [0] * spatial
        y = (_conv3d_by_2d(cx, x, weight, stride, padding, dilation, int(groups), out)
             if spatial == 3 else
             cx.emit1("Conv2D", [("x", x), ("filter", weight)],
                      {"strides": [1, 1, *stride], "pads": [q for q in padding for _ in (0, 1)],
                       "dilations": [1, 1, *dilation], "groups": int(groups),
                       "data_format": "NCHW"}, (x.dtype, out)))
        return _finish(cx, y, bias, rank, shape, dtype)
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
    return _finish(cx, y, bias, rank, shape, dtype)


def _finish(cx, y, bias, rank, shape, dtype):
    if rank == 3:
        y = cx.reshape(y, [cx.dim(y, 0), shape[1], cx.dim(y, 3)], tuple(shape))
    if bias is not None:
        b = cx.reshape(bias, [bias.shape[0]] + [1] * (len(shape) - 2),
                       (bias.shape[0],) + (1,) * (len(shape) - 2))
        y = cx.emit1("Add", [("x1", y), ("x2", cx.cast(b, y.dtype))], None, (y.dtype, tuple(shape)))
    return cx.cast(y, dtype)


def _slice(cx, x, begin, end, strides=None):
    r = len(x.shape)
    strides = strides or [1] * r
    shape = tuple((e - b + s - 1) // s for b, e, s in zip(begin, end, strides))
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.const(list(begin), torch.int64)),
                                     ("end", cx.const(list(end), torch.int64)),
                                     ("strides", cx.const(list(strides), torch.int64))],
                    desc=(x.dtype, shape))


def _pad(cx, x, before, after):
    """Zero padding of the spatial dims (negative amounts crop)."""
    lead = len(x.shape) - len(before)
    grow_b, grow_a = [max(v, 0) for v in before], [max(v, 0) for v in after]
    if any(grow_b) or any(grow_a):
        pads = [0, 0] * lead + [q for pair in zip(grow_b, grow_a) for q in pair]
        shape = tuple(x.shape[:lead]) + tuple(d + b + a for d, b, a in
                                              zip(x.shape[lead:], grow_b, grow_a))
        x = cx.emit1("PadV3", [("x", x), ("paddings", cx.const(pads, torch.int64)),
                               ("constant_values", cx.const(0, x.dtype))],
                     {"mode": "constant", "paddings_contiguous": True}, (x.dtype, shape))
    if any(v < 0 for v in before + after):
        begin = [0] * lead + [max(-v, 0) for v in before]
        end = list(x.shape[:lead]) + [d - max(-a, 0) for d, a in zip(x.shape[lead:], after)]
        x = _slice(cx, x, begin, end)
    return x


def _transposed_as_forward(cx, x, w, stride, padding, output_padding, dilation, groups):
    """(input, filter) of the forward convolution (stride 1) that equals the transposed one:
    (stride - 1) zeros between the input's elements, d (k - 1) - p zeros around (plus the
    output padding after), and the filter with in/out channels swapped per group and its
    taps reversed."""
    n = len(stride)
    lead = tuple(x.shape[:2])
    sizes = tuple(x.shape[2:])
    if any(s > 1 for s in stride):  # [.., L, 1] padded to [.., L, s], flattened, cut
        split = lead + tuple(v for d in sizes for v in (d, 1))
        x = cx.reshape(x, list(split), split)
        pads = [0, 0] * 2 + [q for s in stride for q in (0, 0, 0, s - 1)]
        spread = lead + tuple(v for d, s in zip(sizes, stride) for v in (d, s))
        x = cx.emit1("PadV3", [("x", x), ("paddings", cx.const(pads, torch.int64)),
                               ("constant_values", cx.const(0, x.dtype))],
                     {"mode": "constant", "paddings_contiguous": True}, (x.dtype, spread))
        flat = lead + tuple(d * s for d, s in zip(sizes, stride))
        x = cx.reshape(x, list(flat), flat)
        x = _slice(cx, x, [0] * (n + 2), list(lead) + [(d - 1) * s + 1
                                                        for d, s in zip(sizes, stride)])
    k = list(w.shape[2:])
    before = [dl * (kk - 1) - p for dl, kk, p in zip(dilation, k, padding)]
    after = [b + op for b, op in zip(before, output_padding)]
    x = _pad(cx, x, before, after)
    cin, cout_g = w.shape[0], w.shape[1]
    grouped = (groups, cin // groups, cout_g, *k)
    w = cx.reshape(w, list(grouped), grouped)
    perm = [0, 2, 1] + list(range(3, 3 + n))
    swapped = (groups, cout_g, cin // groups, *k)
    w = cx.emit1("Transpose", [("x", w), ("perm", cx.const(perm, torch.int64))],
                 desc=(w.dtype, swapped))
    fshape = (groups * cout_g, cin // groups, *k)
    w = cx.reshape(w, list(fshape), fshape)
    w = cx.emit1("ReverseV2", [("x", w), ("axis", cx.const(list(range(2, 2 + n)), torch.int64))],
                 desc=(w.dtype, fshape))
    return x, w


def _conv3d_by_2d(cx, x, w, stride, padding, dilation, groups, out):
    """A 3-D convolution as kd 2-D ones: for each depth tap t, the input's depth slices
    t*dd, t*dd + sd, ... (one per output depth) folded into the batch, convolved with the
    filter's tap t over (H, W), and the taps summed."""
    n, c = x.shape[0], x.shape[1]
    x = _pad(cx, x, [padding[0], 0, 0], [padding[0], 0, 0])
    depth = out[2]
    kd = w.shape[2]
    total = None
    for t in range(kd):
        start = t * dilation[0]
        xt = _slice(cx, x, [0, 0, start, 0, 0],
                    [n, c, start + (depth - 1) * stride[0] + 1, x.shape[3], x.shape[4]],
                    [1, 1, stride[0], 1, 1])
        xt = cx.emit1("Transpose", [("x", xt), ("perm", cx.const([0, 2, 1, 3, 4], torch.int64))],
                      desc=(x.dtype, (n, depth, c, x.shape[3], x.shape[4])))
        xt = cx.reshape(xt, [n * depth, c, x.shape[3], x.shape[4]],
                        (n * depth, c, x.shape[3], x.shape[4]))
        wt = cx.emit1("GatherV2", [("x", w), ("indices", cx.const(t, torch.int64)),
                                   ("axis", cx.const(2, torch.int64))],
                      desc=(w.dtype, (w.shape[0], w.shape[1], w.shape[3], w.shape[4])))
        yt = cx.emit1("Conv2D", [("x", xt), ("filter", wt)],
                      {"strides": [1, 1, stride[1], stride[2]],
                       "pads": [padding[1], padding[1], padding[2], padding[2]],
                       "dilations": [1, 1, dilation[1], dilation[2]], "groups": groups,
                       "data_format": "NCHW"}, (x.dtype, (n * depth, out[1], out[3], out[4])))
        total = yt if total is None else cx.emit1("Add", [("x1", total), ("x2", yt)],
                                                  desc=(x.dtype, yt.shape))
    y = cx.reshape(total, [n, depth, out[1], out[3], out[4]], (n, depth, out[1], out[3], out[4]))
    return cx.emit1("Transpose", [("x", y), ("perm", cx.const([0, 2, 1, 3, 4], torch.int64))],
                    desc=(x.dtype, tuple(out)))


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
    work = cx.work_dtype("AdaptiveMaxPool2d", x.dtype)
    y, idx = cx.emit("AdaptiveMaxPool2d", [("x", cx.cast(x, work))],
                     {"output_size": [int(v) for v in output_size]},
                     [("y", (work, tuple(vshape))), ("argmax", (torch.int64, tuple(ishape)))])
    return [cx.cast(y, vdt), cx.cast(idx, idt)]


_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@register([aten.grid_sampler_3d.default], ["GridSampler3D", "Cast"])
def _grid_sampler_3d(cx, x, grid, interpolation_mode, padding_mode, align_corners):
    """GE's GridSampler3D (NCDHW, torch's modes by name); low precision in float32."""
    cx.require_float(x, "GridSampler3D")
    if interpolation_mode not in (0, 1):
        raise UnsupportedOpError(f"%{cx.node.name}: 3-D grid sampling with interpolation mode "
                                 f"{interpolation_mode} (bilinear and nearest have a lowering)")
    dtype, shape = cx.out()
    work = cx.work_dtype("GridSampler3D", x.dtype)
    y = cx.emit1("GridSampler3D", [("x", cx.cast(x, work)), ("grid", cx.cast(grid, work))],
                 {"interpolation_mode": _GRID_MODES[interpolation_mode],
                  "padding_mode": _GRID_PADDING[padding_mode], "data_format": "NCDHW",
                  "align_corners": bool(align_corners)}, (work, tuple(shape)))
    return cx.cast(y, dtype)


@register([aten.avg_pool2d.default], ["AvgPoolV2", "Reshape", "Cast", "Const"])
def _avg_pool2d(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    cx.require_float(x, "AvgPoolV2")
    dtype, shape = cx.out()
    k = list(kernel_size) * (2 if len(kernel_size) == 1 else 1)
    s = list(stride or k)
    s = s * (2 if len(s) == 1 else 1)
    p = [padding] * 2 if isinstance(padding, int) else list(padding) * (2 if len(padding) == 1 else 1)
    unbatched = len(x.shape) == 3
    if unbatched:
        x = cx.reshape(x, [1, *x.shape], (1, *x.shape))
    work = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
    y = cx.emit1("AvgPoolV2", [("x", cx.cast(x, work))],
                 {"ksize": [1, 1, *k], "strides": [1, 1, *s], "padding_mode": "CALCULATED",
                  "pads": [p[0], p[0], p[1], p[1]], "data_format": "NCHW",
                  "global_pooling": False, "ceil_mode": bool(ceil_mode),
                  "exclusive": not count_include_pad,
                  "divisor_override": int(divisor_override or 0)},
                 (work, (1, *shape) if unbatched else shape))
    if unbatched:
        y = cx.reshape(y, list(shape), shape)
    return cx.cast(y, dtype)


@register([aten.fractional_max_pool2d.default],
          ["GatherV2", "Cast", "Mul", "Add", "Sub", "RealDiv", "ConcatV2", "Reshape",
           "GatherElements", "Greater", "IsNan", "LogicalOr", "SelectV2", "Const", "Pack",
           "Shape"])
def _fractional_max_pool2d(cx, x, kernel_size, output_size, random_samples):
    """Fractional max pooling from given samples ([N, C, 2]: torch's w, h draws), as torch
    computes it: per plane and dim, window starts ``int((i + u) * a) - int(u * a)`` for
    i < out - 1 (a = (in - k) / (out - 1) in x's dtype) and ``in - k`` last; then the window
    maximum taken over its k_h * k_w cells in torch's order (a later cell wins when strictly
    greater, or NaN), with the flat index ``h * W + w`` of the chosen cell. Input sizes may be
    symbolic; the window and output sizes are static."""
    if len(x.shape) != 4 or not all(isinstance(v, int) for v in [*kernel_size, *output_size]):
        raise UnsupportedOpError(f"%{cx.node.name}: fractional_max_pool2d of a "
                                 f"{len(x.shape)}-D input or with symbolic window/output "
                                 "sizes: lowered for 4-D inputs and static sizes")
    cx.require_float(x, "Greater")
    vdt, idt = cx.out(0)[0], cx.out(1)[0]
    dt, i64 = x.dtype, torch.int64
    kh, kw = spatial_list(kernel_size, 2)
    oh, ow = spatial_list(output_size, 2)
    n, c = x.shape[0], x.shape[1]

    def sample(j):  # random_samples[:, :, j:j + 1]
        return cx.emit1("GatherV2", [("x", random_samples), ("indices", cx.const([j], i64)),
                                     ("axis", cx.const(2, i64))], None,
                        (random_samples.dtype, (n, c, 1)))

    def starts(axis, k, out, j):
        last = cx.emit1("Sub", [("x1", cx.tensor(cx.dim(x, axis), i64)),
                                ("x2", cx.const(k, i64))], None, (i64, ()))
        zero = cx.emit1("Mul", [("x1", cx.cast(sample(0), i64)), ("x2", cx.const(0, i64))],
                        None, (i64, (n, c, 1)))
        last = cx.emit1("Add", [("x1", zero), ("x2", last)], None, (i64, (n, c, 1)))
        if out == 1:
            return last
        u = cx.cast(sample(j), dt)
        alpha = cx.emit1("RealDiv", [("x1", cx.cast(last, dt)),
                                     ("x2", cx.const(float(out - 1), dt))], None, (dt, (n, c, 1)))
        i = cx.const(torch.arange(out - 1, dtype=dt).reshape(1, 1, -1))
        t1 = cx.emit1("Mul", [("x1", cx.emit1("Add", [("x1", i), ("x2", u)], None,
                                              (dt, (n, c, out - 1)))),
                              ("x2", alpha)], None, (dt, (n, c, out - 1)))
        t0 = cx.emit1("Mul", [("x1", u), ("x2", alpha)], None, (dt, (n, c, 1)))
        head = cx.emit1("Sub", [("x1", cx.cast(t1, i64)), ("x2", cx.cast(t0, i64))], None,
                        (i64, (n, c, out - 1)))
        return cx.emit1("ConcatV2", [("x", [head, last]), ("concat_dim", cx.const(2, torch.int32))],
                        {"N": 2}, (i64, (n, c, out)))

    hs, ws = starts(2, kh, oh, 1), starts(3, kw, ow, 0)
    width = cx.tensor(cx.dim(x, 3), i64)
    plane = cx.reshape(x, [cx.dim(x, 0), cx.dim(x, 1), -1], (n, c, -1))
    best = index = None
    for dy in range(kh):
        rows = cx.emit1("Add", [("x1", hs), ("x2", cx.const(dy, i64))], None, (i64, (n, c, oh)))
        rows = cx.emit1("Mul", [("x1", rows), ("x2", width)], None, (i64, (n, c, oh)))
        rows = cx.reshape(rows, [cx.dim(x, 0), cx.dim(x, 1), oh, 1], (n, c, oh, 1))
        for dx in range(kw):
            cols = cx.emit1("Add", [("x1", ws), ("x2", cx.const(dx, i64))], None, (i64, (n, c, ow)))
            cols = cx.reshape(cols, [cx.dim(x, 0), cx.dim(x, 1), 1, ow], (n, c, 1, ow))
            flat = cx.emit1("Add", [("x1", rows), ("x2", cols)], None, (i64, (n, c, oh, ow)))
            flat2 = cx.reshape(flat, [cx.dim(x, 0), cx.dim(x, 1), oh * ow], (n, c, oh * ow))
            v = cx.emit1("GatherElements", [("x", plane), ("index", flat2)], {"dim": 2},
                         (dt, (n, c, oh * ow)))
            v = cx.reshape(v, [cx.dim(x, 0), cx.dim(x, 1), oh, ow], (n, c, oh, ow))
            if best is None:
                best, index = v, flat
                continue
            take = cx.emit1("LogicalOr", [("x1", cx.emit1("Greater", [("x1", v), ("x2", best)], None,
                                                          (torch.bool, (n, c, oh, ow)))),
                                          ("x2", cx.emit1("IsNan", [("x", v)], None,
                                                          (torch.bool, (n, c, oh, ow))))],
                            None, (torch.bool, (n, c, oh, ow)))
            best = cx.emit1("SelectV2", [("condition", take), ("then", v), ("else", best)], None,
                            (dt, (n, c, oh, ow)), port="result")
            index = cx.emit1("SelectV2", [("condition", take), ("then", flat), ("else", index)],
                             None, (i64, (n, c, oh, ow)), port="result")
    return [cx.cast(best, vdt), cx.cast(index, idt)]

