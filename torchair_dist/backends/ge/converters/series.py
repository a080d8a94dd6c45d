"""Elementwise GE arithmetic for composed special functions (lgamma, digamma, erfcx, ...).

:class:`Ew` emits GE ops on tensors of one dtype and shape: ``e.add(a, b)``, ``e.poly(x, c)``
(Horner), ``e.where(cond, a, b)`` ... A Python number operand becomes a scalar Const (GE's
elementwise ops broadcast numpy-style). Every op emitted is one the GE registry lists for the
dtype (float32; bfloat16/float16 callers compute in float32 and cast back).
"""
from __future__ import annotations

from typing import Sequence, Union

import torch

from ..builder import TensorRef

Operand = Union[TensorRef, float, int]
_LN2 = 0.6931471805599453

EMITS = ("Add", "Sub", "Mul", "RealDiv", "Neg", "Exp", "Log", "Log1p", "Expm1", "Sin", "Cos", "Tan", "Abs",
         "Floor", "Round", "Sqrt", "Acos", "Acosh", "Less",
         "LessEqual", "Equal", "IsNan", "IsInf", "LogicalOr", "LogicalAnd", "LogicalNot",
         "SelectV2", "Fill", "Cast", "Const")


class Ew:
    """Elementwise ops on ``(dtype, shape)`` tensors through the converter context ``cx``."""

    def __init__(self, cx, dtype: torch.dtype, shape) -> None:
        self.cx, self.dtype, self.shape = cx, dtype, tuple(shape)

    def t(self, v: Operand) -> TensorRef:
        if isinstance(v, TensorRef):
            return v
        return self.cx.const(float(v), self.dtype)

    def full(self, value: float) -> TensorRef:
        """``value`` broadcast to the full shape (for a ``where`` branch). A symbolic shape
        (-1 in the descriptor) is not a constant: refused here (:meth:`where` then takes the
        scalar, which SelectV2 broadcasts)."""
        if any(d < 0 for d in self.shape):
            from ....errors import UnsupportedOpError

            raise UnsupportedOpError(f"%{self.cx.node.name}: a fill of the symbolic shape "
                                     f"{self.shape} (-1: symbolic) has no static dims to fill")
        return self.cx.emit1("Fill", [("dims", self.cx.const(list(self.shape), torch.int64)),
                                      ("value", self.cx.const(float(value), self.dtype))],
                             desc=(self.dtype, self.shape))

    def _bin(self, op: str, a: Operand, b: Operand, dtype=None) -> TensorRef:
        return self.cx.emit1(op, [("x1", self.t(a)), ("x2", self.t(b))],
                             desc=(dtype or self.dtype, self.shape))

    def _un(self, op: str, a: Operand, dtype=None) -> TensorRef:
        return self.cx.emit1(op, [("x", self.t(a))], desc=(dtype or self.dtype, self.shape))

    def add(self, a, b): return self._bin("Add", a, b)  # noqa: E704
    def sub(self, a, b): return self._bin("Sub", a, b)  # noqa: E704
    def mul(self, a, b): return self._bin("Mul", a, b)  # noqa: E704
    def div(self, a, b): return self._bin("RealDiv", a, b)  # noqa: E704
    def neg(self, a): return self._un("Neg", a)  # noqa: E704
    def exp(self, a): return self._un("Exp", a)  # noqa: E704
    def log(self, a): return self._un("Log", a)  # noqa: E704
    def log1p(self, a): return self._un("Log1p", a)  # noqa: E704
    def expm1(self, a): return self._un("Expm1", a)  # noqa: E704
    def sin(self, a): return self._un("Sin", a)  # noqa: E704
    def cos(self, a): return self._un("Cos", a)  # noqa: E704
    def tan(self, a): return self._un("Tan", a)  # noqa: E704
    def abs(self, a): return self._un("Abs", a)  # noqa: E704
    def floor(self, a): return self._un("Floor", a)  # noqa: E704
    def round(self, a): return self._un("Round", a)  # noqa: E704
    def sqrt(self, a): return self._un("Sqrt", a)  # noqa: E704
    def trunc(self, a):
        """Toward zero, from Floor (GE's Trunc takes no float64)."""
        a = self.t(a)
        return self.where(self.less(a, 0.0), self.neg(self.floor(self.neg(a))), self.floor(a))

    def acos(self, a): return self._un("Acos", a)  # noqa: E704
    def acosh(self, a): return self._un("Acosh", a)  # noqa: E704
    def cosh(self, a):
        """exp(|a| - ln 2) + exp(-|a|) / 2: finite up to where cosh itself overflows (a float32
        Cosh through exp(a) / 2 overflows at 88.72, cosh only at 89.42)."""
        m = self.abs(a)
        return self.add(self.exp(self.sub(m, _LN2)), self.mul(self.exp(self.neg(m)), 0.5))

    def sinh(self, a):
        """sign(a) (exp(|a| - ln 2) - exp(-|a|) / 2), for the same range as :meth:`cosh`;
        near 0 (|a| < 1e-2) a + a^3 / 6, where the difference would cancel."""
        m = self.abs(a)
        big = self.sub(self.exp(self.sub(m, _LN2)), self.mul(self.exp(self.neg(m)), 0.5))
        small = self.add(m, self.mul(self.mul(m, self.mul(m, m)), 1.0 / 6.0))
        mag = self.where(self.less(m, 1e-2), small, big)
        return self.where(self.less(a, 0.0), self.neg(mag), mag)
    def not_(self, a): return self._un("LogicalNot", a, torch.bool)  # noqa: E704
    def less(self, a, b): return self._bin("Less", a, b, torch.bool)  # noqa: E704
    def less_equal(self, a, b): return self._bin("LessEqual", a, b, torch.bool)  # noqa: E704
    def equal(self, a, b): return self._bin("Equal", a, b, torch.bool)  # noqa: E704
    def isnan(self, a): return self._un("IsNan", a, torch.bool)  # noqa: E704
    def isinf(self, a): return self._un("IsInf", a, torch.bool)  # noqa: E704
    def or_(self, a, b): return self._bin("LogicalOr", a, b, torch.bool)  # noqa: E704
    def and_(self, a, b): return self._bin("LogicalAnd", a, b, torch.bool)  # noqa: E704

    def where(self, cond: TensorRef, a: Operand, b: Operand) -> TensorRef:
        # a constant branch: Filled to the shape, or (symbolic shape) the scalar itself,
        # which SelectV2 broadcasts against the condition
        static = all(d >= 0 for d in self.shape)
        a = a if isinstance(a, TensorRef) else self.full(a) if static else self.t(a)
        b = b if isinstance(b, TensorRef) else self.full(b) if static else self.t(b)
        return self.cx.emit1("SelectV2", [("condition", cond), ("then", a), ("else", b)],
                             desc=(self.dtype, self.shape), port="result")

    def poly(self, x: TensorRef, coeffs: Sequence[float]) -> TensorRef:
        """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
        acc = self.t(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.add(self.mul(acc, x), c)
        return acc

    def sum(self, terms: Sequence[TensorRef]) -> TensorRef:
        acc = terms[0]
        for term in terms[1:]:
            acc = self.add(acc, term)
        return acc
