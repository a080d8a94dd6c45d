"""Converters: FFTs and complex numbers (``aten._fft_r2c/_fft_c2c/_fft_c2r``, conj, angle,
complex, real/imag, polar, view_as_real/view_as_complex).

GE's FFT ops follow TensorFlow's: ``FFT``/``IFFT`` transform the innermost dimension of a
complex tensor (``IFFT`` divides by its length), ``RFFT``/``IRFFT`` take a float32 signal /
complex64 half spectrum and an ``fft_length``. torch's ops transform any list of dims, so each
dim is moved innermost with a ``Transpose``, transformed, and moved back; the normalisation
(``0`` none, ``1`` 1/sqrt(n), ``2`` 1/n over the transformed sizes) is a real scale applied to
the real and imaginary parts (GE has no complex constants here).
"""
from __future__ import annotations

import math

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _to_innermost(cx, x, dim):
    """(x with ``dim`` moved last, the permutation that undoes it or None)."""
    rank = len(x.shape)
    d = dim % rank
    if d == rank - 1:
        return x, None
    perm = list(range(rank))
    perm[d], perm[-1] = perm[-1], perm[d]
    shape = tuple(x.shape[p] for p in perm)
    y = cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))],
                 desc=(x.dtype, shape))
    return y, perm  # a swap is its own inverse


def _back(cx, y, perm):
    if perm is None:
        return y
    shape = tuple(y.shape[p] for p in perm)
    return cx.emit1("Transpose", [("x", y), ("perm", cx.const(perm, torch.int64))],
                    desc=(y.dtype, shape))


def _parts(cx, z):
    real = _REAL_OF[z.dtype]
    attrs = {"Tout": real}
    re = cx.emit1("Real", [("input", z)], attrs, (real, z.shape), port="output")
    im = cx.emit1("Imag", [("input", z)], attrs, (real, z.shape), port="output")
    return re, im


def _complex(cx, re, im):
    out = _COMPLEX_OF[re.dtype]
    return cx.emit1("Complex", [("real", re), ("imag", im)], {"Tout": out}, (out, re.shape),
                    port="out")


def copy_complex(cx, z):
    """A copy of complex ``z`` (GE's TensorMove/Identity take no complex types)."""
    return _complex(cx, *_parts(cx, z))


def _scale(cx, z, factor: float):
    """z * factor for a complex z and a real factor."""
    if factor == 1.0:
        return z
    re, im = _parts(cx, z)
    f = cx.const(factor, re.dtype)
    return _complex(cx, cx.emit1("Mul", [("x1", re), ("x2", f)], desc=(re.dtype, re.shape)),
                    cx.emit1("Mul", [("x1", im), ("x2", f)], desc=(im.dtype, im.shape)))


def _along(cx, z, dim, op_type):
    """``FFT`` / ``IFFT`` of complex ``z`` along ``dim``."""
    y, perm = _to_innermost(cx, z, dim)
    y = cx.emit1(op_type, [("x", y)], desc=(y.dtype, y.shape))
    return _back(cx, y, perm)


def _norm_factor(normalization: int, n: int) -> float:
    if normalization == 0:
        return 1.0
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    raise UnsupportedOpError(f"FFT normalization mode {normalization!r} is not 0, 1 or 2")


def _require_complex(cx, x):
    if x.dtype not in _REAL_OF:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a {x.dtype} tensor: "
                                 "GE's FFT ops take complex64/complex128")


def _sizes(cx, x, dims):
    """The product of x's lengths along ``dims``, for a normalisation factor: a symbolic
    length is fixed by a guard (another length recompiles), never read as -1."""
    val = cx.node.args[0].meta.get("val") if isinstance(cx.node.args[0], torch.fx.Node) else None
    n = 1
    for d in dims:
        d %= len(x.shape)
        n *= x.shape[d] if x.shape[d] >= 0 else cx.static_int(
            -1, val.shape[d] if val is not None else None, "FFT length")
    return n


@register([aten._fft_c2c.default], ["Transpose", "FFT", "IFFT", "Real", "Imag", "Complex",
                                    "Mul", "Const"])
def _fft_c2c(cx, x, dim, normalization, forward):
    """Forward: FFT per dim; inverse: IFFT per dim (which divides by each length), so the
    requested normalisation is reached by scaling with n * factor."""
    _require_complex(cx, x)
    n = _sizes(cx, x, dim)
    y = x
    for d in dim:
        y = _along(cx, y, d, "FFT" if forward else "IFFT")
    factor = _norm_factor(normalization, n)
    return _scale(cx, y, factor if forward else factor * n)


@register([aten._fft_r2c.default], ["Cast", "Fill", "Complex", "Transpose", "FFT", "Real",
                                    "Imag", "Mul", "StridedSlice", "Const", "Shape", "Add",
                                    "FloorDiv", "GatherV2", "Pack"])
def _fft_r2c(cx, x, dim, normalization, onesided):
    """The real signal made complex (zero imaginary part), a full FFT per dim, and for
    ``onesided`` the first n//2+1 bins of the last dim (a real signal's spectrum is Hermitian,
    so this is exactly what torch returns)."""
    if x.dtype not in _COMPLEX_OF:
        raise UnsupportedOpError(f"%{cx.node.name}: _fft_r2c of a {x.dtype} tensor (float32 "
                                 "or float64 signals only)")
    zeros = cx.emit1("Fill", [("dims", cx.shape_of(x)),
                              ("value", cx.const(0, x.dtype))], desc=(x.dtype, x.shape))
    z = _complex(cx, x, zeros)
    n = _sizes(cx, x, dim)
    for d in dim:
        z = _along(cx, z, d, "FFT")
    z = _scale(cx, z, _norm_factor(normalization, n))
    if onesided:
        last = dim[-1] % len(x.shape)
        size = x.shape[last]
        if size >= 0:
            keep = size // 2 + 1
        else:  # a symbolic length: n // 2 + 1 from the run-time shape
            i64 = torch.int64
            keep = cx.emit1("Add", [("x1", cx.emit1("FloorDiv", [
                ("x1", cx.dim(x, last)), ("x2", cx.const(2, i64))], None, (i64, ()))),
                ("x2", cx.const(1, i64))], None, (i64, ()))
        begin = [0] * len(x.shape)
        end = [0] * len(x.shape)
        end[last] = keep
        out_shape = tuple(keep if i == last and isinstance(keep, int) else
                          -1 if i == last else d for i, d in enumerate(x.shape))
        others = sum(1 << i for i in range(len(x.shape)) if i != last)
        z = cx.emit1("StridedSlice", [("x", z), ("begin", cx.const(begin, torch.int64)),
                                      ("end", cx.int_list(end)),
                                      ("strides", cx.const([1] * len(end), torch.int64))],
                     {"begin_mask": others, "end_mask": others}, desc=(z.dtype, out_shape))
    return z


@register([aten._fft_c2r.default], ["Transpose", "IFFT", "IRFFT", "Real", "Imag", "Complex",
                                    "Mul", "Const", "GatherV2", "Conj", "ConcatV2"])
def _fft_c2r(cx, x, dim, normalization, last_dim_size):
    """Inverse transforms: IFFT over all dims but the last, IRFFT (a Hermitian half spectrum
    to ``last_dim_size`` real samples) over the last. Both divide by their lengths, so the
    result is scaled by n * factor. GE's IRFFT takes complex64 only."""
    _require_complex(cx, x)
    y = x
    for d in dim[:-1]:
        y = _along(cx, y, d, "IFFT")
    last = dim[-1] % len(x.shape)
    y, perm = _to_innermost(cx, y, last)
    n = cx.static_int(last_dim_size, cx.node.args[3] if len(cx.node.args) > 3 else None,
                      "last_dim_size")
    if x.dtype == torch.complex64:
        y = cx.emit1("IRFFT", [("x", y), ("fft_length", cx.const([n], torch.int32))],
                     desc=(torch.float32, tuple(y.shape[:-1]) + (n,)))
    else:
        y = _hermitian_inverse(cx, y, n)
    y = _back(cx, y, perm)
    total = _sizes(cx, x, dim[:-1]) * n
    factor = _norm_factor(normalization, total) * total
    if factor != 1.0:
        y = cx.emit1("Mul", [("x1", y), ("x2", cx.const(factor, y.dtype))],
                     desc=(y.dtype, y.shape))
    return y


def _hermitian_inverse(cx, half, n: int):
    """IRFFT's result for a complex128 half spectrum (GE's IRFFT takes complex64 only): the
    full spectrum X[k] = conj(X[n-k]) for k > n//2 is rebuilt with a gather, inverted with
    IFFT and its real part taken (the imaginary parts of the DC and Nyquist bins, which a
    real signal cannot have, drop out exactly as in a c2r transform)."""
    lead = tuple(half.shape[:-1])
    keep = n // 2 + 1
    rank = len(half.shape)
    head = half
    if half.shape[-1] != keep:
        head = cx.emit1("GatherV2", [("x", half), ("indices", cx.const(list(range(keep)),
                                                                        torch.int64)),
                                     ("axis", cx.const(rank - 1, torch.int64))],
                        desc=(half.dtype, lead + (keep,)))
    mirror = [n - k for k in range(keep, n)]
    parts = [head]
    if mirror:
        tail = cx.emit1("GatherV2", [("x", half), ("indices", cx.const(mirror, torch.int64)),
                                     ("axis", cx.const(rank - 1, torch.int64))],
                        desc=(half.dtype, lead + (len(mirror),)))
        parts.append(cx.emit1("Conj", [("input", tail)], port="output",
                              desc=(half.dtype, tail.shape)))
    full = parts[0] if len(parts) == 1 else cx.emit1(
        "ConcatV2", [("x", parts), ("concat_dim", cx.const(rank - 1, torch.int64))],
        {"N": len(parts)}, (half.dtype, lead + (n,)))
    full = cx.emit1("IFFT", [("x", full)], desc=(half.dtype, full.shape))
    return _parts(cx, full)[0]


@register([aten._conj.default, aten._conj_physical.default, aten.conj_physical.default],
          ["Conj", "Identity"])
def _conj(cx, x):
    if x.dtype not in _REAL_OF:
        return cx.emit1("Identity", [("x", x)])  # the conjugate of a real tensor is itself
    return cx.emit1("Conj", [("input", x)], port="output")


@register([aten.angle.default], ["Angle", "Less", "IsNan", "SelectV2", "Fill", "Cast", "Const",
                                 "Shape"])
def _angle(cx, x):
    """Complex: GE's Angle. Real: pi where x < 0, else 0; NaN stays NaN (torch's rule);
    integer inputs give float32."""
    if x.dtype in _REAL_OF:
        real = _REAL_OF[x.dtype]
        return cx.emit1("Angle", [("input", x)], {"Tout": real}, (real, x.shape), port="output")
    dtype, shape = cx.out()
    v = cx.cast(x, dtype)
    zero = cx.const(0, dtype)
    neg = cx.emit1("Less", [("x1", v), ("x2", zero)], desc=(torch.bool, shape))
    fill = lambda value: cx.emit1("Fill", [("dims", cx.shape_of(x)),  # noqa: E731
                                           ("value", cx.const(value, dtype))], desc=(dtype, shape))
    y = cx.emit1("SelectV2", [("condition", neg), ("then", fill(math.pi)),
                              ("else", fill(0.0))], desc=(dtype, shape), port="result")
    if not dtype.is_floating_point or not x.dtype.is_floating_point:
        return y
    nan = cx.emit1("IsNan", [("x", v)], desc=(torch.bool, shape))
    return cx.emit1("SelectV2", [("condition", nan), ("then", v), ("else", y)],
                    desc=(dtype, shape), port="result")


@register([aten.complex.default], ["Complex", "Cast"])
def _complex_op(cx, real, imag):
    dtype, _ = cx.out()
    if dtype not in _REAL_OF:
        raise UnsupportedOpError(f"%{cx.node.name}: complex() giving {dtype}: GE's Complex builds "
                                 "complex64/complex128 from float32/float64 only")
    part = _REAL_OF[dtype]
    return _complex(cx, cx.cast(real, part), cx.cast(imag, part))


@register([aten.real.default], ["Real", "Identity"])
def _real(cx, x):
    if x.dtype not in _REAL_OF:
        return cx.emit1("Identity", [("x", x)])
    return _parts(cx, x)[0]


@register([aten.imag.default], ["Imag"])
def _imag(cx, x):
    _require_complex(cx, x)
    return _parts(cx, x)[1]


# -- complex numbers (rotary embeddings written with torch.polar / view_as_complex) ------------


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
    if cx.out_dtype not in _REAL_OF:
        from ....errors import UnsupportedOpError

        raise UnsupportedOpError(f"%{cx.node.name}: view_as_complex of a {x.dtype} tensor gives "
                                 f"{cx.out_dtype}, which GE's Complex cannot build (complex64/"
                                 "complex128 from float32/float64 only)")
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
