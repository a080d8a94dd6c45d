"""Converters: LU factorisation and its uses (lu_factor[_ex], linalg.lu, lu_unpack, lu_solve)
onto GE's ``Lu`` (TensorFlow's: the packed L\\U and a permutation ``p`` with A[p] = L U).

torch speaks LAPACK's pivots instead: 1-based, row i swapped with row pivots[i] in turn. They
are equivalent: pivots[i] is where row p[i] sits after the first i swaps (LAPACK never moves a
finished row again), so an unrolled loop of n steps turns one into the other, and back.
GE's Lu is square: rectangular matrices are padded with zeros (see :func:`_factor`). L\\U
matches LAPACK's partial pivoting (ties in a column's largest magnitude aside).
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten

EMITS = ["Lu", "Cast", "Const", "GatherV2", "Equal", "ArgMaxV2", "Add", "Sub", "SelectV2",
         "BroadcastTo", "Unsqueeze", "Tril", "Triu", "OneHot", "Transpose",
         "MatrixTriangularSolve", "GatherElements"]


def _check(cx, a):
    if len(a.shape) < 2 or min(a.shape[-2:]) < 0:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a {tuple(a.shape)} "
                                 "matrix: GE's Lu needs a static size")
    if a.dtype.is_complex:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of a complex matrix")
    return a.shape[-2], a.shape[-1]


def _work(cx, a):
    return a if a.dtype in (torch.float32, torch.float64) else cx.cast(a, torch.float32)


def _factor(cx, a):
    """(packed L\\U [..., m, n], LAPACK pivots [..., min(m, n)] int32) of ``a``. GE's Lu is
    square: a wide matrix gets zero rows below, a tall one zero columns to the right. Partial
    pivoting then takes the same first min(m, n) steps (a zero row is never a larger pivot, a
    zero column never changes one), so the top-left block of the result is A's factorisation."""
    a = _work(cx, a)
    *batch, m, n = a.shape
    size = max(m, n)
    full = a
    if m != n:
        pads = [0, 0] * len(batch) + [0, size - m, 0, size - n]
        full = cx.emit1("PadV3", [("x", a), ("paddings", cx.const(pads, torch.int64)),
                                  ("constant_values", cx.const(0, a.dtype))],
                        {"mode": "constant", "paddings_contiguous": True},
                        (a.dtype, tuple(batch) + (size, size)))
    lu, p = cx.emit("Lu", [("input", full)], {"output_idx_type": torch.int32},
                    [("lu", (a.dtype, full.shape)), ("p", (torch.int32, full.shape[:-1]))])
    k = min(m, n)
    piv = perm_to_pivots(cx, p, k)
    if m != n:
        lu = cx.emit1("StridedSlice", [("x", lu), ("begin", cx.const([0] * (len(batch) + 2),
                                                                     torch.int64)),
                                       ("end", cx.const(list(batch) + [m, n], torch.int64)),
                                       ("strides", cx.const([1] * (len(batch) + 2),
                                                            torch.int64))],
                      desc=(a.dtype, tuple(batch) + (m, n)))
    return lu, piv


def _column(cx, v, i, shape):
    """v[..., i] keeping a trailing 1."""
    return cx.emit1("GatherV2", [("x", v), ("indices", cx.const([i], torch.int64)),
                                 ("axis", cx.const(len(shape) - 1, torch.int64))],
                    desc=(v.dtype, tuple(shape[:-1]) + (1,)))


def _arange(cx, shape):
    n = shape[-1]
    base = cx.const(torch.arange(n, dtype=torch.int32))
    if len(shape) == 1:
        return base
    return cx.emit1("BroadcastTo", [("x", base), ("shape", cx.const(list(shape), torch.int64))],
                    desc=(torch.int32, tuple(shape)))


def _swap(cx, cur, i, j, shape):
    """cur with its entries i (an int) and j (a [..., 1] tensor) exchanged."""
    idx = _arange(cx, shape)
    at_i = cx.emit1("Equal", [("x1", idx), ("x2", cx.const(i, torch.int32))],
                    desc=(torch.bool, tuple(shape)))
    at_j = cx.emit1("Equal", [("x1", idx), ("x2", j)], desc=(torch.bool, tuple(shape)))
    vi = _column(cx, cur, i, shape)
    vj = cx.emit1("GatherElements", [("x", cur), ("index", cx.cast(j, torch.int64))],
                  {"dim": len(shape) - 1}, (torch.int32, tuple(shape[:-1]) + (1,)))
    cur = cx.emit1("SelectV2", [("condition", at_j), ("then", vi), ("else", cur)],
                   desc=(torch.int32, tuple(shape)), port="result")
    return cx.emit1("SelectV2", [("condition", at_i), ("then", vj), ("else", cur)],
                    desc=(torch.int32, tuple(shape)), port="result")


def perm_to_pivots(cx, p, k):
    """The first k LAPACK pivots (1-based int32) of the permutation p (A[p] = L U)."""
    shape = tuple(p.shape)
    cur = _arange(cx, shape)
    cols = []
    for i in range(k):
        target = _column(cx, p, i, shape)
        hit = cx.emit1("Equal", [("x1", cur), ("x2", target)], desc=(torch.bool, shape))
        j = cx.emit1("ArgMaxV2", [("x", cx.cast(hit, torch.int32)),
                                  ("dimension", cx.const(len(shape) - 1, torch.int64))],
                     {"dtype": torch.int32}, (torch.int32, shape[:-1]))
        j = cx.emit1("Unsqueeze", [("x", j)], {"axes": [len(shape) - 1]},
                     (torch.int32, shape[:-1] + (1,)))
        cols.append(cx.emit1("Add", [("x1", j), ("x2", cx.const(1, torch.int32))],
                             desc=(torch.int32, shape[:-1] + (1,))))
        cur = _swap(cx, cur, i, j, shape)
    return cx.emit1("ConcatV2", [("x", cols), ("concat_dim", cx.const(len(shape) - 1,
                                                                      torch.int64))],
                    {"N": len(cols)}, (torch.int32, shape[:-1] + (k,))) if len(cols) > 1 \
        else cols[0]


def pivots_to_perm(cx, pivots, m):
    """The permutation p of m rows (A[p] = L U) of LAPACK pivots: the swaps applied in turn."""
    pshape = tuple(pivots.shape)
    shape = pshape[:-1] + (m,)
    piv = cx.cast(pivots, torch.int32)
    cur = _arange(cx, shape)
    for i in range(pshape[-1]):
        j = cx.emit1("Sub", [("x1", _column(cx, piv, i, pshape)),
                             ("x2", cx.const(1, torch.int32))],
                     desc=(torch.int32, shape[:-1] + (1,)))
        cur = _swap(cx, cur, i, j, shape)
    return cur


def _slice(cx, x, rows, cols):
    *batch, m, n = x.shape
    if (rows, cols) == (m, n):
        return x
    r = len(x.shape)
    return cx.emit1("StridedSlice", [("x", x), ("begin", cx.const([0] * r, torch.int64)),
                                     ("end", cx.const(list(batch) + [rows, cols], torch.int64)),
                                     ("strides", cx.const([1] * r, torch.int64))],
                    desc=(x.dtype, tuple(batch) + (rows, cols)))


def _unpack(cx, lu):
    """(L [..., m, k] unit lower, U [..., k, n] upper) of a packed [..., m, n] L\\U."""
    *batch, m, n = lu.shape
    k = min(m, n)
    left = _slice(cx, lu, m, k)
    eye = cx.const(torch.eye(m, k, dtype=lu.dtype))
    strict = cx.emit1("Tril", [("x", left)], {"diagonal": -1}, (lu.dtype, left.shape))
    lower = cx.emit1("Add", [("x1", strict), ("x2", eye)], desc=(lu.dtype, left.shape))
    top = _slice(cx, lu, k, n)
    upper = cx.emit1("Triu", [("x", top)], {"diagonal": 0}, (lu.dtype, top.shape))
    return lower, upper


def _perm_matrix(cx, p, dtype):
    """P with A = P L U: P[p[i], i] = 1."""
    shape = tuple(p.shape) + (p.shape[-1],)
    rows = cx.emit1("OneHot", [("x", p), ("depth", cx.const(p.shape[-1], torch.int32)),
                               ("on_value", cx.const(1, dtype)), ("off_value", cx.const(0, dtype))],
                    {"axis": -1}, (dtype, shape))  # rows[i, p[i]] = 1
    rank = len(shape)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return cx.emit1("Transpose", [("x", rows), ("perm", cx.const(perm, torch.int64))],
                    desc=(dtype, shape))


@register([aten.linalg_lu_factor_ex.default], EMITS + ["ConcatV2", "PadV3", "StridedSlice"])
def _lu_factor_ex(cx, a, *, pivot=True, check_errors=False):
    if not pivot:
        raise UnsupportedOpError(f"%{cx.node.name}: LU without pivoting (GE's Lu pivots)")
    _check(cx, a)
    lu, piv = _factor(cx, a)
    (ldt, _), (idt, ishape) = cx.out(0), cx.out(2)
    return [cx.cast(lu, ldt), piv, cx.const(torch.zeros(ishape, dtype=idt))]


@register([aten.linalg_lu.default], EMITS + ["ConcatV2", "PadV3", "StridedSlice"])
def _linalg_lu(cx, a, *, pivot=True):
    if not pivot:
        raise UnsupportedOpError(f"%{cx.node.name}: LU without pivoting (GE's Lu pivots)")
    m, _ = _check(cx, a)
    dtype = cx.out(0)[0]
    lu, piv = _factor(cx, a)
    lower, upper = _unpack(cx, lu)
    p = pivots_to_perm(cx, piv, m)
    return [cx.cast(_perm_matrix(cx, p, lu.dtype), dtype), cx.cast(lower, dtype),
            cx.cast(upper, dtype)]


@register([aten.lu_unpack.default], EMITS + ["StridedSlice"])
def _lu_unpack(cx, lu, pivots, unpack_data=True, unpack_pivots=True):
    m, _ = _check(cx, lu)
    work = _work(cx, lu)
    outs = []
    if unpack_pivots:
        p = pivots_to_perm(cx, pivots, m)
        outs.append(cx.cast(_perm_matrix(cx, p, work.dtype), cx.out(0)[0]))
    else:
        outs.append(cx.const(torch.zeros(cx.out(0)[1], dtype=cx.out(0)[0])))
    if unpack_data:
        lower, upper = _unpack(cx, work)
        outs += [cx.cast(lower, cx.out(1)[0]), cx.cast(upper, cx.out(2)[0])]
    else:
        outs += [cx.const(torch.zeros(cx.out(i)[1], dtype=cx.out(i)[0])) for i in (1, 2)]
    return outs


def _rows(cx, x, order):
    """x's rows (dim -2) in ``order`` ([..., m] int): a 0/1 selection summed (exact; Mul and
    ReduceSum take float64, GatherElements here does not)."""
    *batch, m, k = x.shape
    sel = cx.emit1("OneHot", [("x", cx.cast(order, torch.int32)),
                              ("depth", cx.const(m, torch.int32)),
                              ("on_value", cx.const(1, x.dtype)),
                              ("off_value", cx.const(0, x.dtype))],
                   {"axis": -1}, (x.dtype, tuple(batch) + (m, m)))  # sel[r, order[r]] = 1
    sel = cx.emit1("Unsqueeze", [("x", sel)], {"axes": [len(batch) + 2]},
                   (x.dtype, tuple(batch) + (m, m, 1)))
    wide = cx.emit1("Unsqueeze", [("x", x)], {"axes": [len(batch)]},
                    (x.dtype, tuple(batch) + (1, m, k)))
    prod = cx.emit1("Mul", [("x1", sel), ("x2", wide)], desc=(x.dtype, tuple(batch) + (m, m, k)))
    return cx.emit1("ReduceSum", [("x", prod), ("axes", cx.const([len(batch) + 1], torch.int64))],
                    {"keep_dims": False}, (x.dtype, tuple(batch) + (m, k)))


def _mt(cx, x):
    rank = len(x.shape)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))],
                    desc=(x.dtype, tuple(x.shape[:-2]) + (x.shape[-1], x.shape[-2])))


@register([aten.linalg_lu_solve.default], EMITS + ["ScatterElements", "StridedSlice", "Mul",
                                                   "ReduceSum"])
def _lu_solve(cx, lu, pivots, b, *, left=True, adjoint=False):
    """A X = B with A = P L U: X = U^-1 L^-1 P^T B; A^H X = B: X = P L^-H U^-H B; the
    right-hand forms (X A = B, X A^H = B) are the left ones transposed (real matrices)."""
    n, n2 = _check(cx, lu)
    if n != n2:
        raise UnsupportedOpError(f"%{cx.node.name}: lu_solve of a non-square LU")
    dtype = cx.out_dtype
    lu = _work(cx, lu)
    work = lu.dtype
    rhs = cx.cast(b, work)
    if tuple(pivots.shape[:-1]) != tuple(rhs.shape[:-2]):
        raise UnsupportedOpError(f"%{cx.node.name}: lu_solve with broadcast batch dims")
    if not left:
        rhs = _mt(cx, rhs)
    transposed = adjoint if left else not adjoint  # solve with A^T on the (transposed) rhs
    shape = tuple(rhs.shape)
    lower, upper = _unpack(cx, lu)
    p = pivots_to_perm(cx, pivots, n)
    tri = lambda mat, low, adj, v: cx.emit1(  # noqa: E731
        "MatrixTriangularSolve", [("matrix", mat), ("rhs", v)], {"lower": low, "adjoint": adj},
        (work, shape))
    if not transposed:
        x = tri(upper, False, False, tri(lower, True, False, _rows(cx, rhs, p)))  # B[p]
    else:
        w = tri(lower, True, True, tri(upper, False, True, rhs))
        inverse = cx.emit1("ScatterElements", [("data", _arange(cx, tuple(p.shape))),
                                               ("indices", p), ("updates", _arange(cx, tuple(p.shape)))],
                           {"axis": len(p.shape) - 1, "reduction": "none"},
                           (torch.int32, tuple(p.shape)))
        x = _rows(cx, w, inverse)  # P W: row r is W's row inverse[r]
    if not left:
        x = _mt(cx, x)
    return cx.cast(x, dtype)
