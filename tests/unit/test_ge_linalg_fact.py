"""GE lowering of linalg.pinv (aten_linalg's Svd composition) beyond test_ge_pinv: in
max-autotune: compiled equals eager (rtol=atol=1e-4 in float32, the OpInfo sweep's tolerance),
the GE graph holds the expected ops, and the family's refused ops name themselves."""
import pytest
import torch

from test_ge_common import compile_ge as _compile, record_ge_types


@pytest.fixture
def ge_types(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")
    return record_ge_types(monkeypatch)


def _rank_deficient(*shape, rank):
    g = torch.Generator().manual_seed(sum(shape) + rank)
    *batch, m, n = shape
    return torch.randn(*batch, m, rank, generator=g) @ torch.randn(*batch, rank, n, generator=g)


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x", [
    torch.randn(4, 4, generator=torch.Generator().manual_seed(1)),
    torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(2)),   # batched, tall
    torch.randn(3, 6, generator=torch.Generator().manual_seed(3)),      # wide
    _rank_deficient(5, 5, rank=2),                                       # singular
    _rank_deficient(3, 4, 6, rank=1),
    torch.zeros(3, 3),                                                   # all dropped
    torch.randn(1, 1, generator=torch.Generator().manual_seed(4)),
], ids=["square", "batched-tall", "wide", "singular", "batched-rank1", "zeros", "1x1"])
def test_pinv_matches_eager(ge_types, x):
    fn = torch.linalg.pinv
    _close(_compile(fn)(x), fn(x))
    assert {"Svd", "BatchMatMulV2", "SelectV2", "Greater"} <= set(ge_types)


def test_pinv_tolerances_and_pinverse(ge_types):
    x = _rank_deficient(2, 5, 4, rank=3) + 1e-3 * torch.randn(2, 5, 4)
    for kw in [{"atol": 1e-2}, {"rtol": 0.05}, {"atol": 0.0, "rtol": 1e-3}, {"atol": 10.0}]:
        fn = lambda a, kw=kw: torch.linalg.pinv(a, **kw)  # noqa: E731
        _close(_compile(fn)(x), fn(x))
    atol = torch.tensor([1e-2, 5.0], dtype=torch.float64)   # per-batch tensor tolerances
    fn = lambda a, t: torch.linalg.pinv(a, atol=t)  # noqa: E731
    _close(_compile(fn)(x, atol), fn(x, atol))
    fn = lambda a: torch.pinverse(a, rcond=1e-2)  # noqa: E731
    _close(_compile(fn)(x), fn(x))


def test_pinv_hermitian_reads_the_lower_triangle(ge_types):
    g = torch.Generator().manual_seed(7)
    b = torch.randn(3, 5, 5, generator=g)
    sym = b + b.mT
    low_rank = _rank_deficient(5, 2, rank=2)
    low_rank = low_rank @ low_rank.mT  # 5x5 of rank 2
    for x in (sym, low_rank, -sym):
        fn = lambda a: torch.linalg.pinv(a, hermitian=True)  # noqa: E731
        _close(_compile(fn)(x), fn(x))
    # an upper triangle that differs: torch reads the lower one only
    x = sym + torch.triu(torch.randn(3, 5, 5, generator=g), 1)
    fn = lambda a: torch.linalg.pinv(a, hermitian=True)  # noqa: E731
    _close(_compile(fn)(x), fn(x))
    assert {"Svd", "Tril"} <= set(ge_types)


def test_pinv_empty_and_float64_refused(ge_types):
    """A zero-size matrix gives the zero-size (..., n, m) result; float64 is refused (GE's
    BatchMatMulV2 has no float64) instead of silently computed in float32."""
    fn = torch.linalg.pinv
    for shape in [(0, 3), (2, 0, 4)]:
        e = torch.empty(*shape)
        got = _compile(fn)(e)
        assert got.shape == fn(e).shape
    with pytest.raises(Exception, match="pinv of a float64 matrix"):
        _compile(fn)(torch.randn(3, 3, dtype=torch.float64))


@pytest.mark.parametrize("fn,name", [
    (lambda a: torch.linalg.matrix_exp(a), "matrix_exp"),
    (lambda a: torch.linalg.eigvals(a).real, "linalg_eig"),
    (lambda a: torch.geqrf(a)[0], "geqrf"),
    (lambda a: torch.linalg.eigh(a + a.mT, UPLO="U")[1], "eigh"),
], ids=["matrix_exp", "eig", "geqrf", "eigh-U-vectors"])
def test_refused_ops_name_themselves(fn, name):
    x = torch.randn(4, 4)
    with pytest.raises(Exception) as info:
        _compile(fn)(x)
    assert "UnsupportedOpError" in str(info.value) and name in str(info.value)
