"""Converters: dense linear algebra onto GE's TF-style matrix ops (Cholesky, MatrixInverse,
MatrixDeterminant, LogMatrixDeterminant, Svd, Qr, SelfAdjointEig).

torch's ``*_ex`` forms also return an ``info`` error code: GE's ops have none, so it is a zero
Const (these graphs do not check errors, as ``check_errors=False`` asks). Outputs GE cannot
produce (``_linalg_det``'s LU factors and pivots) are refused when the graph reads them.
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten


def _read(cx, i: int) -> bool:
    """Whether output ``i`` of the node being converted is read by the graph."""
    import operator

    return any(u.target is operator.getitem and u.args[1] == i for u in cx.node.users)


def _refuse_unread(cx, outputs, what: str) -> None:
    for i in outputs:
        if _read(cx, i):
            raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} output {i} ({what}) "
                                     "has no GE counterpart")


def _info(cx, i: int):
    dtype, shape = cx.out(i)
    return cx.const(torch.zeros(shape, dtype=dtype))


def _work(cx, x):
    if x.dtype in (torch.float32, torch.float64):
        return x
    return cx.cast(x, torch.float32)


def _mt(cx, x, desc):
    """The last two dims swapped."""
    rank = len(x.shape)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))], None, desc)


@register([aten.linalg_cholesky_ex.default], ["Cholesky", "Transpose", "Cast", "Const"])
def _cholesky(cx, a, upper=False, check_errors=False):
    dtype, shape = cx.out(0)
    low = cx.emit1("Cholesky", [("x", _work(cx, a))], None, (_work(cx, a).dtype, shape))
    y = _mt(cx, low, (low.dtype, shape)) if upper else low
    return [cx.cast(y, dtype), _info(cx, 1)]


@register(["aten.cholesky.default"], ["Cholesky", "Transpose", "Cast"])  # gone in torch 2.14
def _cholesky_old(cx, a, upper=False):
    dtype, shape = cx.out()
    x = _work(cx, a)
    low = cx.emit1("Cholesky", [("x", x)], None, (x.dtype, shape))
    return cx.cast(_mt(cx, low, (x.dtype, shape)) if upper else low, dtype)


@register([aten.linalg_inv_ex.default], ["MatrixInverse", "Cast", "Const"])
def _inv(cx, a, check_errors=False):
    dtype, shape = cx.out(0)
    x = _work(cx, a)
    y = cx.emit1("MatrixInverse", [("x", x)], {"adjoint": False}, (x.dtype, shape))
    return [cx.cast(y, dtype), _info(cx, 1)]


@register([aten._linalg_det.default], ["MatrixDeterminant", "Cast"])
def _det(cx, a):
    _refuse_unread(cx, (1, 2), "LU factors / pivots")
    dtype, shape = cx.out(0)
    x = _work(cx, a)
    det = cx.emit1("MatrixDeterminant", [("x", x)], None, (x.dtype, shape))
    return [cx.cast(det, dtype), None, None]


@register([aten._linalg_slogdet.default], ["LogMatrixDeterminant", "Cast"])
def _slogdet(cx, a):
    _refuse_unread(cx, (2, 3), "LU factors / pivots")
    (dtype, shape) = cx.out(0)
    x = _work(cx, a)
    sign, logabs = cx.emit("LogMatrixDeterminant", [("x", x)], None,
                           [("sign", (x.dtype, shape)), ("y", (x.dtype, shape))])
    return [cx.cast(sign, dtype), cx.cast(logabs, cx.out(1)[0]), None, None]


@register([aten._linalg_svd.default], ["Svd", "Transpose", "Cast", "Const"])
def _svd(cx, a, full_matrices=False, compute_uv=True, driver=None):
    (udt, ushape), (sdt, sshape), (vdt, vshape) = cx.out(0), cx.out(1), cx.out(2)
    x = _work(cx, a)
    if not compute_uv:
        s, _, _ = cx.emit("Svd", [("x", x)], {"compute_uv": False,
                                              "full_matrices": bool(full_matrices)},
                          [("sigma", (x.dtype, sshape)), ("u", (x.dtype, (0,))),
                           ("v", (x.dtype, (0,)))])
        return [cx.const(torch.zeros(ushape, dtype=udt)), cx.cast(s, sdt),
                cx.const(torch.zeros(vshape, dtype=vdt))]
    vt = tuple(vshape[:-2]) + (vshape[-1], vshape[-2])
    s, u, v = cx.emit("Svd", [("x", x)], {"compute_uv": True, "full_matrices": bool(full_matrices)},
                      [("sigma", (x.dtype, sshape)), ("u", (x.dtype, ushape)),
                       ("v", (x.dtype, vt))])
    return [cx.cast(u, udt), cx.cast(s, sdt), cx.cast(_mt(cx, v, (x.dtype, vshape)), vdt)]


@register([aten.linalg_qr.default], ["Qr", "Cast"])
def _qr(cx, a, mode="reduced"):
    if mode == "r":
        raise UnsupportedOpError(f"%{cx.node.name}: linalg.qr(mode='r') has no GE lowering")
    (qdt, qshape), (rdt, rshape) = cx.out(0), cx.out(1)
    x = _work(cx, a)
    q, r = cx.emit("Qr", [("x", x)], {"full_matrices": mode == "complete"},
                   [("q", (x.dtype, qshape)), ("r", (x.dtype, rshape))])
    return [cx.cast(q, qdt), cx.cast(r, rdt)]


@register([aten._linalg_eigh.default], ["SelfAdjointEig", "Transpose", "Cast", "Const"])
def _eigh(cx, a, UPLO="L", compute_v=True):  # noqa: N803 - torch's name
    (wdt, wshape), (vdt, vshape) = cx.out(0), cx.out(1)
    x = _work(cx, a)
    if UPLO == "U":  # the op reads the lower triangle: hand it the upper one mirrored
        if compute_v and _read(cx, 1):
            raise UnsupportedOpError(
                f"%{cx.node.name}: eigh(UPLO='U') eigenvectors: GE's SelfAdjointEig reads the "
                "lower triangle, and torch's UPLO='U' eigenvectors differ in sign from those of "
                "the mirrored matrix with UPLO='L' (most random inputs); use UPLO='L'")
        x = _mt(cx, x, (x.dtype, x.shape))
    if not compute_v:
        w, _ = cx.emit("SelfAdjointEig", [("x", x)], {"compute_v": False},
                       [("eigen_value", (x.dtype, wshape)), ("eigen_vector", (x.dtype, (0,)))])
        return [cx.cast(w, wdt), cx.const(torch.zeros(vshape, dtype=vdt))]
    w, v = cx.emit("SelfAdjointEig", [("x", x)], {"compute_v": True},
                   [("eigen_value", (x.dtype, wshape)), ("eigen_vector", (x.dtype, vshape))])
    return [cx.cast(w, wdt), cx.cast(v, vdt)]


@register([aten._linalg_solve_ex.default], ["MatrixSolve", "Unsqueeze", "Squeeze", "Transpose",
                                            "Cast", "Const"])
def _solve(cx, a, b, left=True, check_errors=False):
    """A X = B (``left``) or X A = B (X = (A^T \\ B^T)^T) with GE's MatrixSolve; a vector B
    (one dim less than A) is solved as a one-column matrix."""
    _refuse_unread(cx, (1, 2), "LU factors / pivots")
    dtype, shape = cx.out(0)
    x, rhs = _work(cx, a), _work(cx, b)
    vector = len(b.shape) == len(a.shape) - 1
    if vector:
        rhs = cx.emit1("Unsqueeze", [("x", rhs)], {"axes": [-1]},
                       (rhs.dtype, tuple(rhs.shape) + (1,)))
    if not left:
        x = _mt(cx, x, (x.dtype, tuple(x.shape[:-2]) + (x.shape[-1], x.shape[-2])))
        rhs = _mt(cx, rhs, (rhs.dtype, tuple(rhs.shape[:-2]) + (rhs.shape[-1], rhs.shape[-2])))
    y = cx.emit1("MatrixSolve", [("matrix", x), ("rhs", rhs)], {"adjoint": False},
                 (x.dtype, rhs.shape))
    if not left:
        y = _mt(cx, y, (x.dtype, tuple(y.shape[:-2]) + (y.shape[-1], y.shape[-2])))
    if vector:
        y = cx.emit1("Squeeze", [("x", y)], {"axis": [-1]}, (x.dtype, tuple(y.shape[:-1])))
    return [cx.cast(y, dtype), None, None, _info(cx, 3)]


def _tri_solve(cx, a, b, lower: bool, adjoint: bool, shape):
    return cx.emit1("MatrixTriangularSolve", [("matrix", a), ("rhs", b)],
                    {"lower": lower, "adjoint": adjoint}, (a.dtype, tuple(shape)))


@register([aten.triangular_solve.default], ["MatrixTriangularSolve", "Identity", "Cast"])
def _triangular_solve(cx, b, a, upper=True, transpose=False, unitriangular=False):
    """(X with op(A) X = B, a copy of A); op(A) = A^T when ``transpose``."""
    if unitriangular:
        raise UnsupportedOpError(f"%{cx.node.name}: triangular_solve(unitriangular=True) has no "
                                 "GE lowering (MatrixTriangularSolve reads the diagonal)")
    (xdt, xshape), (adt, _) = cx.out(0), cx.out(1)
    a_w, b_w = _work(cx, a), _work(cx, b)
    x = _tri_solve(cx, a_w, b_w, not upper, bool(transpose), xshape)
    copy = cx.emit1("Identity", [("x", a)], None, (a.dtype, a.shape))
    return [cx.cast(x, xdt), cx.cast(copy, adt)]


def _chol_solve(cx, b, factor, upper: bool, shape):
    """X with (L L^H) X = B (L = factor, lower) or (U^H U) X = B (``upper``)."""
    if upper:  # U^H y = b, then U x = y
        y = _tri_solve(cx, factor, b, False, True, shape)
        return _tri_solve(cx, factor, y, False, False, shape)
    y = _tri_solve(cx, factor, b, True, False, shape)
    return _tri_solve(cx, factor, y, True, True, shape)


@register([aten.cholesky_solve.default], ["MatrixTriangularSolve", "Cast"])
def _cholesky_solve(cx, b, factor, upper=False):
    dtype, shape = cx.out()
    return cx.cast(_chol_solve(cx, _work(cx, b), _work(cx, factor), bool(upper), shape), dtype)


@register([aten.cholesky_inverse.default], ["MatrixTriangularSolve", "Cast", "Const"])
def _cholesky_inverse(cx, factor, upper=False):
    dtype, shape = cx.out()
    f = _work(cx, factor)
    n = shape[-1]
    eye = cx.const(torch.eye(n, dtype=f.dtype).expand(tuple(shape)).contiguous())
    return cx.cast(_chol_solve(cx, eye, f, bool(upper), shape), dtype)


@register([aten.linalg_pinv.atol_rtol_tensor, aten.linalg_pinv.atol_rtol_float],
          ["Svd", "Tril", "Transpose", "Add", "ReduceMax", "Mul", "Maximum", "Greater",
           "RealDiv", "SelectV2", "Fill", "Unsqueeze", "BatchMatMulV2", "Cast", "Const"])
def _pinv(cx, a, atol=None, rtol=None, hermitian=False):
    """V diag(1/s where s > max(atol, rtol * s_max), else 0) U^T from GE's Svd, torch's
    definition. ``rtol`` unset: 0 when ``atol`` > 0, else eps * max(m, n) (torch's rule).
    ``hermitian``: torch reads the lower triangle only, so the matrix is rebuilt from it
    first (an SVD of a symmetric matrix gives the same pseudo-inverse as its eigh)."""
    from .series import Ew

    if a.dtype.is_complex:
        raise UnsupportedOpError(f"%{cx.node.name}: pinv of a complex matrix (GE's Svd here is "
                                 "real)")
    dtype, shape = cx.out()
    if a.dtype == torch.float64:
        raise UnsupportedOpError(f"%{cx.node.name}: pinv of a float64 matrix: GE's BatchMatMulV2 "
                                 "has no float64 (computing in float32 would lose the precision "
                                 "asked for)")
    if any(d == 0 for d in shape):  # torch: an empty (..., n, m) result, no SVD
        return cx.const(torch.zeros(tuple(shape), dtype=dtype))
    x = _work(cx, a)
    work = x.dtype
    *batch, m, n = x.shape
    k = min(m, n)
    if hermitian:
        low = cx.emit1("Tril", [("x", x)], {"diagonal": 0}, (work, x.shape))
        strict = cx.emit1("Tril", [("x", x)], {"diagonal": -1}, (work, x.shape))
        x = cx.emit1("Add", [("x1", low), ("x2", _mt(cx, strict, (work, x.shape)))],
                     desc=(work, x.shape))
    s, u, v = cx.emit("Svd", [("x", x)], {"compute_uv": True, "full_matrices": False},
                      [("sigma", (work, tuple(batch) + (k,))), ("u", (work, tuple(batch) + (m, k))),
                       ("v", (work, tuple(batch) + (n, k)))])
    sshape = tuple(batch) + (k,)
    e = Ew(cx, work, sshape)
    top = cx.emit1("ReduceMax", [("x", s), ("axes", cx.const([len(sshape) - 1], torch.int64))],
                   {"keep_dims": True}, (work, tuple(batch) + (1,)))
    eps = torch.finfo(work).eps * max(m, n)
    tol_a = cx.cast(atol, work) if atol is not None and not isinstance(atol, (int, float)) else \
        e.t(float(atol or 0.0))
    if rtol is None:
        if atol is None:
            tol_r = e.t(eps)
        else:
            positive = cx.emit1("Greater", [("x1", tol_a), ("x2", e.t(0.0))],
                                desc=(torch.bool, tuple(getattr(tol_a, "shape", ()))))
            tol_r = cx.emit1("SelectV2", [("condition", positive), ("then", e.t(0.0)),
                                          ("else", e.t(eps))],
                             desc=(work, tuple(getattr(tol_a, "shape", ()))), port="result")
    else:
        tol_r = cx.cast(rtol, work) if not isinstance(rtol, (int, float)) else e.t(float(rtol))
    # atol/rtol broadcast against the batch: one value per matrix, as torch's [..., None]
    if not isinstance(atol, (int, float)) and atol is not None and tuple(tol_a.shape):
        tol_a = cx.emit1("Unsqueeze", [("x", tol_a)], {"axes": [-1]},
                         (work, tuple(tol_a.shape) + (1,)))
    if not isinstance(rtol, (int, float)) and tuple(getattr(tol_r, "shape", ())):
        tol_r = cx.emit1("Unsqueeze", [("x", tol_r)], {"axes": [-1]},
                         (work, tuple(tol_r.shape) + (1,)))
    cut = cx.emit1("Maximum", [("x1", tol_a), ("x2", cx.emit1(
        "Mul", [("x1", tol_r), ("x2", top)], desc=(work, tuple(batch) + (1,))))],
        desc=(work, tuple(batch) + (1,)))
    keep = cx.emit1("Greater", [("x1", s), ("x2", cut)], desc=(torch.bool, sshape))
    safe = e.where(keep, s, 1.0)
    inv = e.where(keep, e.div(1.0, safe), 0.0)
    vs = cx.emit1("Mul", [("x1", v), ("x2", cx.emit1("Unsqueeze", [("x", inv)], {"axes": [-2]},
                                                      (work, tuple(batch) + (1, k))))],
                  desc=(work, tuple(batch) + (n, k)))
    y = cx.emit1("BatchMatMulV2", [("x1", vs), ("x2", u)], {"adj_x1": False, "adj_x2": True},
                 (work, tuple(batch) + (n, m)))
    return cx.cast(y, dtype)


@register([aten._trilinear.default], ["Unsqueeze", "Mul", "ReduceSum", "Cast", "Const"])
def _trilinear(cx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """torch's definition written out: each input gets size-1 dims at its ``expand`` list, the
    three are multiplied with broadcasting and summed over ``sumdim`` (bilinear layers); low
    precision computes in float32."""
    dtype, shape = cx.out()
    work = torch.float64 if dtype == torch.float64 else torch.float32
    parts = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        t = cx.cast(t, work)
        full = list(t.shape)
        for d in sorted(expand):
            full.insert(d, 1)
        if expand:
            t = cx.emit1("Unsqueeze", [("x", t)], {"axes": sorted(int(d) for d in expand)},
                         (work, tuple(full)))
        parts.append(t)
    rank = len(parts[0].shape)
    full = tuple(max(p.shape[i] for p in parts) for i in range(rank))
    y = cx.emit1("Mul", [("x1", parts[0]), ("x2", parts[1])], desc=(work, full))
    y = cx.emit1("Mul", [("x1", y), ("x2", parts[2])], desc=(work, full))
    if sumdim:
        y = cx.emit1("ReduceSum", [("x", y), ("axes", cx.const(sorted(int(d) for d in sumdim),
                                                               torch.int64))],
                     {"keep_dims": False}, (work, tuple(shape)))
    return cx.cast(y, dtype)


@register([aten.linalg_solve_triangular.default],
          ["MatrixTriangularSolve", "Transpose", "Mul", "Add", "Const", "Cast"])
def _solve_triangular(cx, a, b, *, upper, left=True, unitriangular=False):
    """X with A X = B (``left``) or X A = B: GE MatrixTriangularSolve (TF semantics: ``lower``
    names A's triangle, ``adjoint`` solves with A^T), float32 for other float dtypes. A unit
    diagonal is written into A first; ``left=False`` solves A^T X^T = B^T."""
    dtype, shape = cx.out()
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    a, b = cx.cast(a, work), cx.cast(b, work)
    n = a.shape[-1]
    if unitriangular:
        from ....errors import UnsupportedOpError

        if n < 0:
            raise UnsupportedOpError(f"%{cx.node.name}: unitriangular solve with a symbolic size")
        eye = torch.eye(n, dtype=work)
        a = cx.emit1("Mul", [("x1", a), ("x2", cx.const(1 - eye))], None, (work, a.shape))
        a = cx.emit1("Add", [("x1", a), ("x2", cx.const(eye))], None, (work, a.shape))
    if not left:
        b = _swap_last(cx, b)
    y = cx.emit1("MatrixTriangularSolve", [("matrix", a), ("rhs", b)],
                 {"lower": not upper, "adjoint": not left}, (work, b.shape))
    if not left:
        y = _swap_last(cx, y)
    return cx.cast(y, dtype)


def _swap_last(cx, x):
    perm = list(range(len(x.shape)))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    shape = tuple(x.shape[p] for p in perm)
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))], None,
                    (x.dtype, shape))


@register([aten._cdist_forward.default], ["Cdist", "Cast"])
def _cdist(cx, x1, x2, p, compute_mode=None):
    dtype, shape = cx.out()
    work = torch.float32 if dtype not in (torch.float16, torch.float32) else dtype
    y = cx.emit1("Cdist", [("x1", cx.cast(x1, work)), ("x2", cx.cast(x2, work))],
                 {"p": float(p)}, (work, shape))
    return cx.cast(y, dtype)
