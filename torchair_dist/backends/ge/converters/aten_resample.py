"""Resampling without a direct GE op: 3-D adaptive average pooling (per-window ReduceSum; the
registry has no 3-D adaptive pooling op, and an averaging MatMul would spread an inf/NaN into
every window as 0 * inf) and antialiased bilinear resize (per-axis gather + weighted sum with
taps computed at conversion). Shapes must be static: windows and taps are fixed when the graph
is built.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .registry import register

aten = torch.ops.aten


def _reshape(cx, x, shape: Sequence[int]):
    return cx.reshape(x, list(shape), tuple(shape))


def _slice(cx, x, axis: int, begin: int, end: int, step: int = 1):
    """``x`` sliced ``begin:end:step`` along ``axis`` (0 <= begin <= end <= size)."""
    if begin == 0 and end == x.shape[axis] and step == 1:
        return x
    rank = len(x.shape)
    others = sum(1 << i for i in range(rank) if i != axis)
    b, e, s = [0] * rank, [0] * rank, [1] * rank
    b[axis], e[axis], s[axis] = begin, end, step
    shape = list(x.shape)
    shape[axis] = max(0, -(-(end - begin) // step))
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.const(b, torch.int64)),
                                     ("end", cx.const(e, torch.int64)),
                                     ("strides", cx.const(s, torch.int64))],
                    {"begin_mask": others, "end_mask": others}, (x.dtype, tuple(shape)))


def _work(cx, x, ge_type: str):
    cx.require_float(x, ge_type)
    return cx.cast(x, cx.work_dtype(ge_type, x.dtype))


def _refuse_pool(cx, why: str):
    from ....errors import UnsupportedOpError

    raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} {why} has no GE lowering")


def _static(cx, *shapes):
    if any(not isinstance(d, int) or d < 0 for s in shapes for d in s):
        from ....errors import UnsupportedOpError

        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} with symbolic shapes has "
                                 "no GE lowering (its windows are fixed at conversion)")


def _windows(size: int, out: int):
    """torch's adaptive pooling windows: i -> [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


@register([aten._adaptive_avg_pool3d.default],
          ["StridedSlice", "ReduceSum", "ConcatV2", "RealDiv", "Reshape", "Cast", "Const"])
def _adaptive_avg_pool3d(cx, x, output_size):
    """Adaptive average pooling: each window's sum is taken axis by axis (W, H, then D: one
    StridedSlice + ReduceSum per output index, concatenated), then divided by the window's
    element count -- no GE op in the registry pools adaptively in 3-D. Summing per window
    (not a matmul with an averaging matrix) keeps an inf/NaN inside its own windows.
    Low-precision floats compute in float32."""
    dtype, shape = cx.out()
    _static(cx, x.shape, shape)
    cx.require_float(x, "ReduceSum")
    work = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    rank = len(x.shape)
    y = cx.cast(x, work)
    if any(n == 0 for n in x.shape[-3:]) or any(n == 0 for n in shape[-3:]):
        _refuse_pool(cx, "over an empty spatial dim")
    counts = []
    for axis, out in zip((rank - 1, rank - 2, rank - 3), reversed(shape[-3:])):
        parts = []
        windows = _windows(x.shape[axis], out)
        for start, end in windows:
            part = _slice(cx, y, axis, start, end)
            kept = tuple(1 if a == axis else n for a, n in enumerate(part.shape))
            parts.append(cx.emit1("ReduceSum", [("x", part),
                                                ("axes", cx.const([axis], torch.int64))],
                                  {"keep_dims": True}, (work, kept)))
        cat_shape = tuple(out if a == axis else n for a, n in enumerate(y.shape))
        y = parts[0] if len(parts) == 1 else cx.emit1(
            "ConcatV2", [("x", parts), ("concat_dim", cx.const(axis, torch.int32))],
            {"N": len(parts)}, (work, cat_shape))
        counts.insert(0, torch.tensor([e - b for b, e in windows], dtype=torch.float64))
    cd, ch, cw = counts
    count = cd[:, None, None] * ch[None, :, None] * cw[None, None, :]
    y = cx.emit1("RealDiv", [("x1", y), ("x2", cx.const(count.to(work)))], None,
                 (work, tuple(shape)))
    return cx.cast(y, dtype)


# -- antialiased bilinear resize ---------------------------------------------------------------
def _aa_weights(in_size: int, out_size: int, align_corners: bool, scale):
    """torch's antialiased bilinear taps along one axis: per output index, the window start,
    and the normalised triangle-filter weights over the window (in float32, the kernels'
    accumulation type). With scale >= 1 (downsampling) the triangle is widened by the scale,
    which is what antialiasing means; otherwise it is plain bilinear interpolation."""
    import numpy as np

    f32 = np.float32
    if align_corners:
        s = f32((in_size - 1) / (out_size - 1)) if out_size > 1 else f32(0)
    else:
        s = f32(1.0 / scale) if scale is not None and scale > 0 else f32(in_size) / f32(out_size)
    support = s if s >= 1 else f32(1)
    invscale = f32(1) / s if s >= 1 else f32(1)
    taps = []
    for i in range(out_size):
        center = s * f32(i + 0.5)
        xmin = max(int(center - support + f32(0.5)), 0)
        xsize = min(int(center + support + f32(0.5)), in_size) - xmin
        ws = []
        for j in range(xsize):
            t = abs((f32(j + xmin) - center + f32(0.5)) * invscale)
            ws.append(f32(1) - t if t < 1 else f32(0))
        total = f32(sum(ws, f32(0)))
        if total != 0:
            ws = [w / total for w in ws]
        taps.append((xmin, ws))
    return taps


def _aa_axis(cx, x, axis: int, taps, work):
    """Resample ``x`` along ``axis``: gather each output's window (GatherV2 with an (out, K)
    index table), weight it (Mul), zero the slots past a shorter window (SelectV2, so an
    inf/NaN outside an output's window stays out of it, as in torch) and sum them (ReduceSum)."""
    out = len(taps)
    k = max(1, max(len(ws) for _, ws in taps))
    idx = torch.zeros(out, k, dtype=torch.int64)
    wt = torch.zeros(out, k, dtype=torch.float32)
    mask = torch.zeros(out, k, dtype=torch.bool)
    for o, (start, ws) in enumerate(taps):
        for j, w in enumerate(ws):
            idx[o, j], wt[o, j], mask[o, j] = start + j, float(w), True
    trail = (1,) * (len(x.shape) - axis - 1)
    gshape = tuple(x.shape[:axis]) + (out, k) + tuple(x.shape[axis + 1:])
    g = cx.emit1("GatherV2", [("x", x), ("indices", cx.const(idx)),
                              ("axis", cx.const(axis, torch.int64))], None, (work, gshape))
    prod = cx.emit1("Mul", [("x1", g), ("x2", cx.const(wt.to(work).reshape(out, k, *trail)))],
                    None, (work, gshape))
    if not bool(mask.all()):
        prod = cx.emit1("SelectV2", [("condition", cx.const(mask.reshape(out, k, *trail))),
                                     ("then", prod), ("else", cx.const(0.0, work))],
                        None, (work, gshape), port="result")
    kept = gshape[:axis + 1] + (1,) + gshape[axis + 2:]
    y = cx.emit1("ReduceSum", [("x", prod), ("axes", cx.const([axis + 1], torch.int64))],
                 {"keep_dims": True}, (work, kept))
    return _reshape(cx, y, gshape[:axis + 1] + gshape[axis + 2:])


@register([aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa.vec],
          ["GatherV2", "Mul", "SelectV2", "ReduceSum", "Reshape", "Cast", "Const"])
def _upsample_bilinear2d_aa(cx, x, output_size, align_corners, scales_h=None, scales_w=None):
    """Antialiased bilinear resize (NCHW): separable, W first then H, each axis a fixed
    gather + weighted sum whose taps depend only on the static sizes/scales (computed here).
    Low-precision floats compute in float32."""
    dtype, shape = cx.out()
    _static(cx, x.shape, shape)
    cx.require_float(x, "Mul")
    if cx.node.target is aten._upsample_bilinear2d_aa.vec:  # (input, size?, align, factors?)
        factors = scales_h
        scales_h, scales_w = (factors[0], factors[1]) if factors else (None, None)
    if any(n == 0 for n in x.shape[2:]) or any(n == 0 for n in shape[2:]):
        _refuse_pool(cx, "over an empty spatial dim")
    if shape[3] == 1 and shape[2] > 1 and shape[2] != x.shape[2]:
        # torch's CPU kernel returns something else than the separable resize here (every
        # output row equals the first one's interpolation): GE would not match eager
        _refuse_pool(cx, "to an output width of 1 with a resized height (torch's CPU kernel "
                     "differs from the separable resize there)")
    work = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    y = cx.cast(x, work)
    for axis, scale in ((3, scales_w), (2, scales_h)):
        if x.shape[axis] != shape[axis]:  # torch leaves an axis of unchanged size as is
            taps = _aa_weights(x.shape[axis], shape[axis], bool(align_corners), scale)
            y = _aa_axis(cx, y, axis, taps, work)
    return cx.cast(y, dtype)
