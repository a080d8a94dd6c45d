"""Converters for further ops Hugging Face decoder models lower to (found by
``benchmarks/ge_model_sweep.py``). Ops whose IR lists only float32/float16 compute other
floating dtypes (bf16) in float32 and cast back."""
from __future__ import annotations

import torch

from .registry import register

aten = torch.ops.aten
_F32_F16 = {torch.float32, torch.float16}


def _in_float(cx, x, allowed=_F32_F16):
    """(x in a dtype the op accepts, that dtype)."""
    dtype = cx.out_dtype
    work = dtype if dtype in allowed else torch.float32
    return cx.cast(x, work), work


@register([aten.softplus.default], ["SoftplusV2", "Cast"])
def _softplus(cx, x, beta=1, threshold=20):
    x, work = _in_float(cx, x)
    y = cx.emit1("SoftplusV2", [("x", x)], {"beta": float(beta), "threshold": float(threshold)},
                 (work, x.shape))
    return cx.cast(y, cx.out_dtype)


# -- complex numbers (rotary embeddings written with torch.polar / view_as_complex) ------------
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _complex(cx, real, imag):
    dtype, shape = cx.out()
    part = _REAL_OF[dtype]
    return cx.emit1("Complex", [("real", cx.cast(real, part)), ("imag", cx.cast(imag, part))],
                    {"Tout": dtype}, (dtype, shape), port="out")


@register([aten.polar.default], ["Complex", "Cos", "Sin", "Mul", "Cast"])
def _polar(cx, magnitude, angle):
    """abs * (cos(angle) + i sin(angle))."""
    shape = cx.out()[1]
    parts = []
    for fn in ("Cos", "Sin"):
        trig = cx.emit1(fn, [("x", angle)], None, (angle.dtype, angle.shape))
        parts.append(cx.emit1("Mul", [("x1", magnitude), ("x2", trig)], None, (angle.dtype, shape)))
    return _complex(cx, *parts)


@register([aten.view_as_complex.default], ["Complex", "GatherV2", "Const", "Cast"])
def _view_as_complex(cx, x):
    """x[..., 0] + i x[..., 1] (a new tensor here: GE has no complex views)."""
    last = len(x.shape) - 1
    real, imag = (cx.emit1("GatherV2", [("x", x), ("indices", cx.const(i, torch.int64)),
                                        ("axis", cx.const(last, torch.int64))], None,
                           (x.dtype, x.shape[:-1])) for i in (0, 1))
    return _complex(cx, real, imag)


@register([aten.view_as_real.default], ["Real", "Imag", "Pack"])
def _view_as_real(cx, z):
    dtype, shape = cx.out()
    real, imag = (cx.emit1(op, [("input", z)], {"Tout": dtype}, (dtype, z.shape), port="output")
                  for op in ("Real", "Imag"))
    return cx.emit1("Pack", [("x", [real, imag])], {"axis": len(z.shape), "N": 2}, (dtype, shape))


@register([aten.repeat.default], ["Tile", "Reshape", "Const", "Pack", "Cast"])
def _repeat(cx, x, repeats):
    """Tile; extra leading repeats first give ``x`` leading 1-dims (bool travels as int8)."""
    dtype, shape = cx.out()
    lead = len(repeats) - len(x.shape)
    if lead:
        x = cx.reshape(x, [1] * lead + cx.dims(x), (1,) * lead + tuple(x.shape))
    work = torch.int8 if dtype == torch.bool else dtype
    y = cx.emit1("Tile", [("x", cx.cast(x, work)), ("multiples", cx.int_list(list(repeats)))], None,
                 (work, shape))
    return cx.cast(y, dtype)
