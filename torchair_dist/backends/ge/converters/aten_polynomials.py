"""Converters: Chebyshev polynomials T, U, V, W (and the shifted ones, P(2x - 1)) of a tensor
degree n, in closed form, following torch's definition branch by branch:

- n is truncated to an integer (torch casts it); n < 0 gives 0, n = 0 gives 1, n = 1 the first
  polynomial; |x| = 1 torch's exact values;
- |x| < 1: the trigonometric forms (T: cos(n t), U: sin((n+1) t) / sin t, V: cos((n+1/2) t) /
  cos(t/2), W: sin((n+1/2) t) / sin(t/2), t = acos x) — what torch uses for n > 6 or 8 and
  within float rounding of its recurrence below;
- |x| > 1: the hyperbolic forms with p = acosh|x| and the parity sign for x < -1 (V and W swap
  there). torch runs the three-term recurrence, which overflows to inf and then gives NaN
  (inf - inf) two steps later: a value is NaN where the form at n - 2 already overflows, as
  torch's; x = +-inf gives torch's inf at n = 2 and NaN beyond.

Accuracy: rtol/atol 1e-4 in float32 against torch (tests/unit/test_ge_polynomials.py).
Hermite (H, He), Laguerre and Legendre have no closed form: torch runs their three-term
recurrence n steps. A degree known when the graph is built (an int) unrolls exactly n steps; a
symbolic degree (a Python int argument of a dynamic-shape graph) unrolls up to
:data:`MAX_DEGREE` steps and selects step n at run time, and a run with a larger n raises (a
GE ``Assert`` naming the bound) rather than give a wrong value.
"""
from __future__ import annotations

import math

import torch

from ....errors import UnsupportedOpError
from .context import TensorRef
from .registry import register
from .series import EMITS, Ew

aten = torch.ops.aten
_LN2 = 0.6931471805599453


def _parts(e, x, n):
    ax = e.abs(x)
    inside = e.less(ax, 1.0)
    on_edge = e.equal(ax, 1.0)
    theta = e.acos(e.where(inside, x, 0.0))
    phi = e.acosh(e.where(e.or_(inside, on_edge), 2.0, ax))
    half = e.mul(n, 0.5)
    odd = e.not_(e.equal(e.floor(half), half))
    return ax, inside, on_edge, theta, phi, odd


def chebyshev(e, x, n_raw, kind: str):
    n = e.trunc(n_raw)
    ax, inside, on_edge, theta, phi, odd = _parts(e, x, n)
    pos = e.less(0.0, x)
    even_or_pos = e.or_(pos, e.not_(odd))
    two_n1 = e.add(e.mul(n, 2.0), 1.0)
    nh = e.add(n, 0.5)

    def lcosh(t):  # log cosh t = t - ln 2 + log1p(exp(-2t)), t >= 0
        return e.add(e.sub(t, _LN2), e.log1p(e.exp(e.mul(t, -2.0))))

    def lsinh(t):  # log sinh t = t - ln 2 + log(-expm1(-2t)), t > 0
        return e.add(e.sub(t, _LN2), e.log(e.neg(e.expm1(e.mul(t, -2.0)))))

    def hyp(m, flavour):
        """the |x| > 1 magnitude at degree m: T = cosh(m p); U, V, W are ratios, taken as
        exp of a difference of logs so a numerator past the float range does not overflow
        before the division (torch's recurrence reaches U_92(1.5) = 3.3e38)."""
        if flavour == "T":
            return e.cosh(e.mul(m, phi))
        if flavour == "U":
            return e.exp(e.sub(lsinh(e.mul(e.add(m, 1.0), phi)), lsinh(phi)))
        mh = e.mul(e.add(m, 0.5), phi)
        if flavour == "V":
            return e.exp(e.sub(lcosh(mh), lcosh(e.mul(phi, 0.5))))
        return e.exp(e.sub(lsinh(mh), lsinh(e.mul(phi, 0.5))))

    if kind == "T":
        trig = e.cos(e.mul(n, theta))
        edge = e.where(even_or_pos, 1.0, -1.0)
        first = x
    elif kind == "U":
        trig = e.div(e.sin(e.mul(e.add(n, 1.0), theta)), e.sin(theta))
        edge = e.where(even_or_pos, e.add(n, 1.0), e.neg(e.add(n, 1.0)))
        first = e.add(x, x)
    elif kind == "V":
        trig = e.div(e.cos(e.mul(nh, theta)), e.cos(e.mul(theta, 0.5)))
        edge = e.where(pos, 1.0, e.where(odd, e.neg(two_n1), two_n1))
        first = e.sub(e.add(x, x), 1.0)
    else:
        trig = e.div(e.sin(e.mul(nh, theta)), e.sin(e.mul(theta, 0.5)))
        edge = e.where(pos, two_n1, e.where(odd, -1.0, 1.0))
        first = e.add(e.add(x, x), 1.0)
    # x > 1: the kind's own form; x < -1: parity sign, and V <-> W
    flip = {"T": "T", "U": "U", "V": "W", "W": "V"}[kind]
    right, left = hyp(n, kind), hyp(n, flip)
    sign = e.where(odd, -1.0, 1.0)
    outside = e.where(pos, right, e.mul(sign, left))
    before = e.where(pos, hyp(e.sub(n, 2.0), kind), hyp(e.sub(n, 2.0), flip))
    outside = e.where(e.and_(e.isinf(before), e.less(1.0, n)), math.nan, outside)
    y = e.where(inside, trig, outside)
    infinite = e.isinf(x)
    y = e.where(infinite, e.where(e.equal(n, 2.0), math.inf, math.nan), y)
    y = e.where(on_edge, edge, y)
    y = e.where(e.equal(n, 1.0), first, y)
    y = e.where(e.equal(n, 0.0), 1.0, y)
    return e.where(e.less(n, 0.0), 0.0, y)


def _to_shape(cx, e, v, other, shape):
    """``v`` broadcast to the output shape: a Fill of static dims, or (symbolic) the run-time
    shape of ``other`` when that one has the output's shape."""
    if tuple(getattr(v, "shape", ())) == tuple(shape):
        return v
    if all(d >= 0 for d in shape):
        return e.add(v, e.full(0.0))
    if tuple(getattr(other, "shape", ())) != tuple(shape):
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} whose operands both "
                                 f"broadcast to the symbolic shape {tuple(shape)}: not lowered")
    return cx.emit1("BroadcastTo", [("x", e.t(v)), ("shape", cx.shape_of(other))],
                    desc=(e.dtype, tuple(shape)))


def _converter(kind: str, shifted: bool):
    def conv(cx, x, n):
        dtype, shape = cx.out()
        work = torch.float64 if dtype == torch.float64 else torch.float32
        e = Ew(cx, work, shape)
        xv, nv = cx.cast(x, work) if hasattr(x, "dtype") else e.t(x), \
            cx.cast(n, work) if hasattr(n, "dtype") else e.t(n)
        xv, nv = _to_shape(cx, e, xv, nv, shape), _to_shape(cx, e, nv, xv, shape)
        if shifted:
            xv = e.sub(e.add(xv, xv), 1.0)
        return cx.cast(chebyshev(e, xv, nv, kind), dtype)
    return conv


for _kind in "tuvw":
    for _shifted in (False, True):
        _name = ("special_shifted_chebyshev_polynomial_" if _shifted
                 else "special_chebyshev_polynomial_") + _kind
        _packet = getattr(aten, _name)
        register([_packet.default, _packet.x_scalar, _packet.n_scalar],
                 [*EMITS, "BroadcastTo", "Shape"])(_converter(_kind.upper(), _shifted))


MAX_DEGREE = 32  # a symbolic degree above this raises at run time


def _recurrence(kind: str, e, x, n: int):
    """torch's recurrence for degrees 0..n (a list of values, in torch's operation order)."""
    one = 1.0
    ones = e.where(e.equal(x, x), 1.0, 1.0)  # 1 everywhere, also where x is inf or NaN
    first = {"hermite_h": lambda: e.add(x, x), "laguerre": lambda: e.sub(one, x)}.get(
        kind, lambda: x)()
    vals = [ones, first]
    p, q = vals
    two_x = e.add(x, x) if kind == "hermite_h" else None
    one_minus_x = e.sub(one, x) if kind == "laguerre" else None
    for k in range(1, n):
        if kind == "hermite_h":
            r = e.sub(e.mul(two_x, q), e.mul(p, float(2 * k)))
        elif kind == "hermite_he":
            r = e.sub(e.mul(x, q), e.mul(p, float(k)))
        elif kind == "laguerre":
            r = e.div(e.sub(e.mul(e.add(one_minus_x, float(k + k)), q), e.mul(p, float(k))),
                      float(k + 1))
        else:
            r = e.div(e.sub(e.mul(e.mul(x, float(k + k + 1)), q), e.mul(p, float(k))),
                      float(k + 1))
        vals.append(r)
        p, q = q, r
    return vals


def _edges(kind: str, e, x, y, n_is):
    """torch's special cases before its recurrence (``n_is(k)``: a condition n == k; ``n_is(
    'neg')``: n < 0, ``n_is('odd')``: n odd)."""
    if kind == "laguerre":
        y = e.where(e.equal(e.abs(x), 0.0), 1.0, y)
    if kind == "legendre":
        edge = e.where(e.or_(e.less(0.0, x), n_is(0)), 1.0, e.where(n_is("odd"), -1.0, 1.0))
        y = e.where(e.equal(e.abs(x), 1.0), edge, y)
    return e.where(n_is("neg"), 0.0, y)


def _scalar_cmp(cx, op: str, a, b):
    return cx.emit1(op, [("x1", a), ("x2", b)], None, (torch.bool, ()))


def _recurrence_converter(kind: str):
    def conv(cx, x, n):
        dtype, shape = cx.out()
        work = torch.float64 if dtype == torch.float64 else torch.float32
        e = Ew(cx, work, shape)
        xv = cx.cast(x, work)
        if isinstance(n, (int, float)):
            degree = int(n)
            if degree < 0:
                return cx.cast(e.where(e.equal(xv, xv), 0.0, 0.0), dtype)
            vals = _recurrence(kind, e, xv, max(degree, 1))
            y = vals[degree]

            def n_is(k):
                truth = (degree < 0 if k == "neg" else degree % 2 == 1 if k == "odd"
                         else degree == k)
                return _scalar_cmp(cx, "Equal", cx.const(1.0, work), cx.const(float(truth), work))
            return cx.cast(_edges(kind, e, xv, y, n_is), dtype)
        if not isinstance(n, TensorRef) or len(n.shape) != 0:
            raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} with a tensor of "
                                     "degrees: only a scalar degree is lowered")
        nv = cx.cast(n, torch.int64)
        vals = _recurrence(kind, e, xv, MAX_DEGREE)
        y = vals[0]
        for k, v in enumerate(vals[1:], 1):
            y = e.where(_scalar_cmp(cx, "Equal", nv, cx.const(k, torch.int64)), v, y)
        within = _scalar_cmp(cx, "LessEqual", nv, cx.const(MAX_DEGREE, torch.int64))
        cx.emit("Assert", [("input_condition", within), ("input_data", [within])], None, [])
        op = cx.b.graph.op[-1]
        op.attr["_message"].s = (f"{cx.node.target}: degree n above {MAX_DEGREE} (the largest "
                                 "a symbolic degree is unrolled to); mark it static").encode()
        cx.keep_alive.append(op.name)
        half = cx.emit1("FloorDiv", [("x1", nv), ("x2", cx.const(2, torch.int64))], None,
                        (torch.int64, ()))
        odd = _scalar_cmp(cx, "NotEqual", cx.emit1("Mul", [("x1", half),
                                                           ("x2", cx.const(2, torch.int64))],
                                                   None, (torch.int64, ())), nv)

        def n_is(k):
            if k == "neg":
                return _scalar_cmp(cx, "Less", nv, cx.const(0, torch.int64))
            if k == "odd":
                return odd
            return _scalar_cmp(cx, "Equal", nv, cx.const(k, torch.int64))
        return cx.cast(_edges(kind, e, xv, y, n_is), dtype)
    return conv


for _kind, _name in (("hermite_h", "special_hermite_polynomial_h"),
                     ("hermite_he", "special_hermite_polynomial_he"),
                     ("laguerre", "special_laguerre_polynomial_l"),
                     ("legendre", "special_legendre_polynomial_p")):
    register([getattr(aten, _name).n_scalar],
             [*EMITS, "Assert", "Equal", "LessEqual", "Less", "NotEqual", "FloorDiv", "Mul",
              "Cast", "Const"])(_recurrence_converter(_kind))
