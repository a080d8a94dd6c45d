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


def _scale(cx, z, factor):
    """z * factor for a complex z and a real factor (a float, or a scalar float tensor where
    the transformed sizes are symbolic: :func:`_norm_scale`)."""
    if isinstance(factor, float) and factor == 1.0:
        return z
    re, im = _parts(cx, z)
    f = cx.const(factor, re.dtype) if isinstance(factor, float) else cx.cast(factor, re.dtype)
    return _complex(cx, cx.emit1("Mul", [("x1", re), ("x2", f)], desc=(re.dtype, re.shape)),
                    cx.emit1("Mul", [("x1", im), ("x2", f)], desc=(im.dtype, im.shape)))


def _along(cx, z, dim, op_type):
    """``FFT`` / ``IFFT`` of complex ``z`` along ``dim``."""
    y, perm = _to_innermost(cx, z, dim)
    y = cx.emit1(op_type, [("x", y)], desc=(y.dtype, y.shape))
    return _back(cx, y, perm)


def _norm_scale(cx, x, dims, normalization: int, times_n: bool = False, extra=()):
    """The scale of a transform over ``dims`` of ``x`` (and the lengths ``extra``):
    normalisation 0 none, 1 1/sqrt(n), 2 1/n, times n where the GE op already divided by n
    (IFFT, IRFFT). A float where every length is static; else a float32 scalar tensor
    computed from the run's sizes (a constant n from symbolic dims read as -1 gave a wrong
    scale before)."""
    if x.dtype in _REAL_OF and any(x.shape[d] < 0 for d in dims):
        x = _parts(cx, x)[0]  # GE's Shape takes no complex types
    lengths = [cx.dim(x, d) for d in dims] + list(extra)
    power = {0: 0.0, 1: -0.5, 2: -1.0}.get(normalization)
    if power is None:
        raise UnsupportedOpError(f"FFT normalization mode {normalization!r} is not 0, 1 or 2")
    power += 1.0 if times_n else 0.0
    if power == 0.0:
        return 1.0
    if all(isinstance(v, int) for v in lengths):
        return float(math.prod(lengths)) ** power
    n = None
    for v in lengths:
        v = cx.tensor(v, torch.int64)
        n = v if n is None else cx.emit1("Mul", [("x1", n), ("x2", v)], desc=(torch.int64, ()))
    n = cx.cast(n, torch.float32)
    if power == 1.0:
        return n
    return cx.emit1("Pow", [("x1", n), ("x2", cx.const(power, torch.float32))],
                    desc=(torch.float32, ()))


def _require_complex(cx, x):
    if x.dtype not in _REAL_OF:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a {x.dtype} tensor: "
                                 "GE's FFT ops take complex64/complex128")


_SIZE_OPS = ["Shape", "Real", "GatherV2", "Mul", "Cast", "Pow", "Pack", "Add", "FloorDiv",
             "Const"]


@register([aten._fft_c2c.default], ["Transpose", "FFT", "IFFT", "Real", "Imag", "Complex",
                                    *_SIZE_OPS])
def _fft_c2c(cx, x, dim, normalization, forward):
    """Forward: FFT per dim; inverse: IFFT per dim (which divides by each length), so the
    requested normalisation is reached by scaling with n * factor."""
    _require_complex(cx, x)
    y = x
    for d in dim:
        y = _along(cx, y, d, "FFT" if forward else "IFFT")
    return _scale(cx, y, _norm_scale(cx, x, dim, normalization, times_n=not forward))


@register([aten._fft_r2c.default], ["Cast", "Fill", "Shape", "Complex", "Transpose", "FFT",
                                    "RFFT", "Real", "Imag", "StridedSlice", "Conj", "ConcatV2",
                                    *_SIZE_OPS])
def _fft_r2c(cx, x, dim, normalization, onesided):
    """A float32 signal: ``RFFT`` along the last transformed dim, then ``FFT`` along the
    others (half the work of a complex FFT per dim); a two-sided result gets its other half
    from the Hermitian symmetry X[k] = conj(X[-k]). A float64 signal (GE's RFFT takes float32)
    is made complex (zero imaginary part) and transformed with a full FFT per dim, cut to the
    first n//2+1 bins for ``onesided`` (n read at run time where it is symbolic); so is a
    two-sided transform over a dim of symbolic length (its Hermitian half needs the length).

    GE registers 1-D and 2-D transforms only, so an n-D FFT is a sequence of them; it is as
    accurate as eager's (16^3 float32 ``fftn``: 2.25e-5 from the float64 result, eager 2.24e-5)
    but not rounded alike: up to 3e-5 from eager's n-D kernel."""
    if x.dtype not in _COMPLEX_OF:
        raise UnsupportedOpError(f"%{cx.node.name}: _fft_r2c of a {x.dtype} tensor (float32 "
                                 "or float64 signals only)")
    rank = len(x.shape)
    last = dim[-1] % rank
    if x.dtype == torch.float32 and (onesided or all(x.shape[d] >= 0 for d in dim)):
        return _r2c_by_rfft(cx, x, dim, normalization, onesided)
    zeros = cx.emit1("Fill", [("dims", cx.shape_of(x)), ("value", cx.const(0, x.dtype))],
                     desc=(x.dtype, x.shape))
    z = _complex(cx, x, zeros)
    for d in dim:
        z = _along(cx, z, d, "FFT")
    z = _scale(cx, z, _norm_scale(cx, x, dim, normalization))
    if not onesided:
        return z
    size = x.shape[last]
    if size >= 0:
        keep = size // 2 + 1
    else:  # a symbolic length: n // 2 + 1 from the run-time shape
        i64 = torch.int64
        keep = cx.emit1("Add", [("x1", cx.emit1("FloorDiv", [
            ("x1", cx.dim(x, last)), ("x2", cx.const(2, i64))], None, (i64, ()))),
            ("x2", cx.const(1, i64))], None, (i64, ()))
    end = [0] * rank
    end[last] = keep
    out_shape = tuple((keep if isinstance(keep, int) else -1) if i == last else d
                      for i, d in enumerate(x.shape))
    others = sum(1 << i for i in range(rank) if i != last)
    return cx.emit1("StridedSlice", [("x", z), ("begin", cx.const([0] * rank, torch.int64)),
                                     ("end", cx.int_list(end)),
                                     ("strides", cx.const([1] * rank, torch.int64))],
                    {"begin_mask": others, "end_mask": others}, desc=(z.dtype, out_shape))


def _r2c_by_rfft(cx, x, dim, normalization, onesided):
    rank = len(x.shape)
    last = dim[-1] % rank
    length = x.shape[last]
    keep = length // 2 + 1 if length >= 0 else -1
    y, perm = _to_innermost(cx, x, last)
    if length >= 0:
        fft_length = cx.const([length], torch.int32)
    else:  # a symbolic length: read from the signal's shape at run time
        fft_length = cx.int_list([cx.dim(y, -1)], torch.int32)
    half = cx.emit1("RFFT", [("input", y), ("fft_length", fft_length)],
                    desc=(torch.complex64, tuple(y.shape[:-1]) + (keep if length >= 0 else -1,)))
    half = _back(cx, half, perm)
    for d in dim[:-1]:
        half = _along(cx, half, d, "FFT")
    half = _scale(cx, half, _norm_scale(cx, x, dim, normalization))
    if onesided or (length >= 0 and keep == length):
        return half
    # bins keep..length-1 of the last dim: conj of bin length-k, every other transformed dim
    # read at -j (mod its size)
    tail = _gather(cx, half, last, [length - k for k in range(keep, length)])
    for d in dim[:-1]:
        d %= rank
        size = x.shape[d]
        tail = _gather(cx, tail, d, [(-j) % size for j in range(size)])
    tail = cx.emit1("Conj", [("input", tail)], port="output", desc=(tail.dtype, tail.shape))
    return cx.emit1("ConcatV2", [("x", [half, tail]), ("concat_dim", cx.const(last, torch.int64))],
                    {"N": 2}, (half.dtype, tuple(x.shape)))


def _gather(cx, x, axis: int, indices):
    shape = list(x.shape)
    shape[axis] = len(indices)
    return cx.emit1("GatherV2", [("x", x), ("indices", cx.const(list(indices), torch.int64)),
                                 ("axis", cx.const(axis, torch.int64))],
                    desc=(x.dtype, tuple(shape)))


@register([aten._fft_c2r.default], ["Transpose", "IFFT", "IRFFT", "Real", "Imag", "Complex",
                                    "Conj", "ConcatV2", *_SIZE_OPS])
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
    n = last_dim_size if isinstance(last_dim_size, int) else None  # else a run-time size
    if x.dtype == torch.complex64:
        y = cx.emit1("IRFFT", [("x", y), ("fft_length", cx.int_list([last_dim_size],
                                                                    torch.int32))],
                     desc=(torch.float32, tuple(y.shape[:-1]) + (-1 if n is None else n,)))
    else:  # GE's IRFFT takes complex64 only; the Hermitian rebuild needs the length
        n = cx.static_int(last_dim_size, cx.node.args[3] if len(cx.node.args) > 3 else None,
                          "last_dim_size")
        y = _hermitian_inverse(cx, y, n)
    y = _back(cx, y, perm)
    factor = _norm_scale(cx, x, dim[:-1], normalization, times_n=True, extra=[last_dim_size])
    if not (isinstance(factor, float) and factor == 1.0):
        f = cx.const(factor, y.dtype) if isinstance(factor, float) else cx.cast(factor, y.dtype)
        y = cx.emit1("Mul", [("x1", y), ("x2", f)], desc=(y.dtype, y.shape))
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
