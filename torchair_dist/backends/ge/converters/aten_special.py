"""Converters: special functions the GE registry has no single op for, composed from
elementwise GE ops (see :mod:`.series`), plus the ones that are one GE op and a scale.

Accuracy (float32, checked against torch over wide ranges in tests/unit/test_ge_special.py):
rtol 1e-4 / atol 1e-4 or better. Low-precision inputs are computed in float32.

- lgamma: x >= 8 Stirling's series to 1/x^7; 0 < x < 8 shifted up by 8 (minus the log of the
  rising product); x <= 0 by reflection, log(pi / |sin(pi r)|) - lgamma(1 - x) with r = x -
  round(x) (exact, so poles stay sharp); +-inf -> inf, NaN -> NaN (torch's values).
- digamma: the same shift and the asymptotic series to 1/x^10; x < 0 by reflection
  psi(1 - x) - pi / tan(pi r); torch's values at 0 (-inf, +inf for -0), negative integers and
  -inf (NaN).
- polygamma(n >= 1, x) = (-1)^(n+1) n! zeta(n+1, x) with GE's Zeta (torch's own formula).
- erfcx: exp(x^2) erfc(x) up to x = 9, the asymptotic series beyond.
- i0/i1 (and modified_bessel_i0/i1): GE's exponentially scaled BesselI0e/I1e times exp(|x|).
- spherical_bessel_j0: sin(x)/x, 1 at 0, 0 at +-inf.
- polygamma(1, +inf) = 0 as torch's trigamma (Zeta, like torch's higher orders, gives NaN).
- frexp: exponent from Log2 and floor, corrected by one step so the mantissa is in [0.5, 1).
"""
from __future__ import annotations

import math

import torch

from ....errors import UnsupportedOpError
from .registry import register
from .series import EMITS, Ew

aten = torch.ops.aten
prims = torch.ops.prims

_SHIFT = 8  # below this, lgamma/digamma are shifted up by recurrence


def _work(cx, x):
    """(Ew in float32 or float64, x cast to it, the output dtype)."""
    dtype, shape = cx.out() if not isinstance(cx.val, (tuple, list)) else cx.out(0)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    return Ew(cx, work, shape), cx.cast(x, work), dtype


def _rising(e, x):
    """x (x+1) ... (x+_SHIFT-1)."""
    acc = x
    for i in range(1, _SHIFT):
        acc = e.mul(acc, e.add(x, i))
    return acc


def _lgamma_pos(e, x):
    """lgamma for x > 0."""
    small = e.less(x, _SHIFT)
    z = e.where(small, e.add(x, _SHIFT), x)
    inv = e.div(1.0, z)
    inv2 = e.mul(inv, inv)
    series = e.mul(inv, e.poly(inv2, [1 / 12, -1 / 360, 1 / 1260, -1 / 1680]))
    stirling = e.add(e.sub(e.mul(e.sub(z, 0.5), e.log(z)), z),
                     e.add(series, 0.5 * math.log(2 * math.pi)))
    correction = e.where(small, e.log(e.abs(_rising(e, x))), 0.0)
    return e.sub(stirling, correction)


def _sin_pi_r(e, x, fn):
    """fn(pi * r) with r = x - round(x), exactly reduced (so values near integers keep their
    precision); the sign of (-1)^round(x) is not applied (callers need |sin| or tan)."""
    r = e.sub(x, e.round(x))
    return fn(e.mul(r, math.pi)), r


def lgamma(e, x):
    neg = e.less_equal(x, 0.0)
    t = e.where(neg, e.sub(1.0, x), x)
    pos = _lgamma_pos(e, t)
    sin_r, _ = _sin_pi_r(e, x, e.sin)
    reflected = e.sub(e.sub(math.log(math.pi), e.log(e.abs(sin_r))), pos)
    y = e.where(neg, reflected, pos)
    return e.where(e.isinf(x), math.inf, y)


def digamma(e, x):
    neg = e.less(x, 0.0)
    t = e.where(neg, e.sub(1.0, x), x)
    small = e.less(t, _SHIFT)
    z = e.where(small, e.add(t, _SHIFT), t)
    inv = e.div(1.0, z)
    inv2 = e.mul(inv, inv)
    series = e.mul(inv2, e.poly(inv2, [1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132]))
    asym = e.sub(e.sub(e.log(z), e.mul(inv, 0.5)), series)
    shift = e.sum([e.div(1.0, e.add(t, i)) for i in range(_SHIFT)])
    pos = e.where(small, e.sub(asym, shift), asym)
    tan_r, r = _sin_pi_r(e, x, e.tan)
    reflected = e.sub(pos, e.div(math.pi, tan_r))
    y = e.where(neg, reflected, pos)
    # torch: psi(+-0) = -+inf (pole, sign of zero), negative integers and -inf give NaN
    at_int = e.and_(neg, e.equal(r, 0.0))
    y = e.where(e.or_(at_int, e.equal(x, -math.inf)), math.nan, y)
    zero = e.equal(x, 0.0)
    signed = e.div(-1.0, x)  # -1/+0 = -inf, -1/-0 = +inf
    return e.where(zero, signed, y)


def _unary_special(fn):
    def conv(cx, x):
        e, v, dtype = _work(cx, x)
        return cx.cast(fn(e, v), dtype)
    return conv


register([prims.lgamma.default, aten.lgamma.default], EMITS)(_unary_special(lgamma))
register([prims.digamma.default, aten.digamma.default], EMITS)(_unary_special(digamma))


@register([aten.polygamma.default], EMITS + ("Zeta",))
def _polygamma(cx, n, x):
    e, v, dtype = _work(cx, x)
    if not isinstance(n, int) or n < 0:
        raise UnsupportedOpError(f"%{cx.node.name}: polygamma order {n!r} is not a constant "
                                 "non-negative int")
    if n == 0:
        return cx.cast(digamma(e, v), dtype)
    z = cx.emit1("Zeta", [("x", e.t(float(n + 1))), ("q", v)], desc=(e.dtype, e.shape),
                 port="z")
    sign = 1.0 if n % 2 else -1.0
    y = e.mul(z, sign * math.factorial(n))
    if n == 1:  # torch's trigamma is 0 at +inf (its higher orders, like Zeta, give NaN)
        y = e.where(e.equal(v, math.inf), 0.0, y)
    return cx.cast(y, dtype)


@register([prims.erfcx.default, aten.special_erfcx.default], EMITS + ("Erfc",))
def _erfcx(cx, x):
    e, v, dtype = _work(cx, x)
    big = e.less(9.0, v)
    direct_x = e.where(big, 0.0, v)  # keeps exp(x^2) finite on the lanes it is not used
    erfc = cx.emit1("Erfc", [("x", direct_x)], desc=(e.dtype, e.shape))
    direct = e.mul(e.exp(e.mul(direct_x, direct_x)), erfc)
    inv2 = e.div(1.0, e.mul(v, v))
    # 1/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8))
    asym = e.div(e.poly(inv2, [1.0, -0.5, 0.75, -1.875, 6.5625]), e.mul(v, math.sqrt(math.pi)))
    return cx.cast(e.where(big, asym, direct), dtype)


def _bessel_i(scaled_op):
    def conv(cx, x):
        e, v, dtype = _work(cx, x)
        scaled = cx.emit1(scaled_op, [("x", v)], desc=(e.dtype, e.shape))
        return cx.cast(e.mul(scaled, e.exp(e.abs(v))), dtype)
    return conv


register([prims.bessel_i0.default, aten.i0.default, aten.special_modified_bessel_i0.default],
         EMITS + ("BesselI0e",))(_bessel_i("BesselI0e"))
register([prims.bessel_i1.default, aten.special_i1.default,
          aten.special_modified_bessel_i1.default], EMITS + ("BesselI1e",))(
    _bessel_i("BesselI1e"))


@register([prims.spherical_bessel_j0.default, aten.special_spherical_bessel_j0.default], EMITS)
def _spherical_j0(cx, x):
    e, v, dtype = _work(cx, x)
    zero = e.equal(v, 0.0)
    safe = e.where(zero, 1.0, v)
    y = e.where(zero, 1.0, e.div(e.sin(safe), safe))
    return cx.cast(e.where(e.isinf(v), 0.0, y), dtype)


@register([prims.frexp.default, aten.frexp.Tensor], EMITS + ("Pow",))
def _frexp(cx, x):
    (mdt, _), (edt, _) = cx.out(0), cx.out(1)
    e, v, _ = _work(cx, x)
    a = e.abs(v)
    special = e.or_(e.or_(e.equal(a, 0.0), e.isinf(a)), e.isnan(a))
    safe = e.where(special, 1.0, a)
    guess = e.add(e.floor(e.div(e.log(safe), math.log(2.0))), 1.0)

    def pow2(k):
        return cx.emit1("Pow", [("x1", e.t(2.0)), ("x2", k)], desc=(e.dtype, e.shape))

    def scale(value, k):
        """value / 2^k in two halves: 2^k alone over- or underflows at the range's ends."""
        half = e.floor(e.mul(k, 0.5))
        return e.div(e.div(value, pow2(half)), pow2(e.sub(k, half)))
    m = scale(safe, guess)
    low, high = e.less(m, 0.5), e.less_equal(1.0, m)  # one step fixes a rounded log
    k = e.where(low, e.sub(guess, 1.0), e.where(high, e.add(guess, 1.0), guess))
    m = scale(v, k)
    mantissa = e.where(special, v, m)
    exponent = e.where(special, 0.0, k)
    return [cx.cast(mantissa, mdt), cx.cast(exponent, edt)]
