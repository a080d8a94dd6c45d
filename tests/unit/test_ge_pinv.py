"""linalg.pinv through GE's Svd equals torch's for every way torch picks the cut-off: the
default rtol, an atol that zeroes the default rtol, both given, per-matrix tensor tolerances,
rank-deficient matrices, and hermitian=True reading only the lower triangle."""
import pytest
import torch

from test_ge_common import ge_roundtrip  # noqa: F401  (ge_validate is autouse)

TOL = dict(rtol=1e-4, atol=1e-4)


def _m(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _same(fn, *inputs):
    out, converted, _ = ge_roundtrip(fn, *inputs)
    torch.testing.assert_close(out[0], fn(*inputs), **TOL)
    return {op.type for op in converted.model.graph[0].op}


def _rank2(seed):
    return _m(4, 2, seed=seed) @ _m(2, 5, seed=seed + 1)  # 4x5 of rank 2


@pytest.mark.parametrize("kw", [{}, {"rtol": 0.2}, {"atol": 1.0}, {"atol": 0.5, "rtol": 0.1},
                                {"atol": 0.0}])
def test_pinv_cutoffs(kw):
    assert "Svd" in _same(lambda a: torch.linalg.pinv(a, **kw), _m(3, 4, 5))
    _same(lambda a: torch.linalg.pinv(a, **kw), _rank2(3))


def test_pinv_tensor_tolerances_per_matrix():
    a = _m(3, 4, 4, seed=5)
    atol, rtol = torch.tensor([0.0, 0.5, 2.0]), torch.tensor([0.1, 0.0, 0.3])
    _same(lambda x, t: torch.linalg.pinv(x, atol=t), a, atol)
    _same(lambda x, t, r: torch.linalg.pinv(x, atol=t, rtol=r), a, atol, rtol)


def test_pinv_hermitian_reads_the_lower_triangle_only():
    a = _m(5, 5, seed=7)
    sym = a + a.T
    junk = torch.tril(sym) + torch.triu(_m(5, 5, seed=8), 1)  # upper triangle is noise
    _same(lambda x: torch.linalg.pinv(x, hermitian=True), sym)
    _same(lambda x: torch.linalg.pinv(x, hermitian=True), junk)


def test_pinverse_rcond():
    _same(lambda a: torch.pinverse(a, rcond=0.3), _m(6, 3, seed=9))
