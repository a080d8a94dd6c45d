"""LU through GE's Lu (converters/aten_lu.py): LAPACK pivots rebuilt from GE's permutation
equal torch's exactly; packed factors, P/L/U, lu_unpack and lu_solve (all four left/adjoint
forms) equal torch for square, wide, tall, batched and singular matrices; and the Lu kernel
follows TensorFlow's definition (input[p] = L U) on a one-op graph."""
import pytest
import torch

from test_ge_common import ge_roundtrip  # noqa: F401  (ge_validate is autouse)
from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.cpu.ge_reference import ReferenceRuntime

TOL = dict(rtol=1e-4, atol=1e-4)
SHAPES = [(4, 4), (3, 5), (5, 3), (2, 3, 4, 4), (2, 4, 6)]


def _m(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _same(fn, *inputs):
    out, _, _ = ge_roundtrip(fn, *inputs)
    want = fn(*inputs)
    want = want if isinstance(want, (tuple, list)) else [want]
    for got, ref in zip(out, want):
        if ref.dtype.is_floating_point:
            torch.testing.assert_close(got, ref, **TOL)
        else:
            assert torch.equal(got, ref)


@pytest.mark.parametrize("shape", SHAPES)
def test_lu_factor_pivots_and_unpack(shape):
    a = _m(*shape)
    _same(lambda x: torch.linalg.lu_factor_ex(x)[:2], a)  # lu_factor adds a check the
    # backend drops (lowering.drop_asserts); make_fx here keeps it
    _same(lambda x: torch.linalg.lu_factor_ex(x), a)
    _same(lambda x: torch.linalg.lu(x), a)
    lu, piv = torch.linalg.lu_factor(a)
    _same(lambda x, p: torch.lu_unpack(x, p), lu, piv)


def test_singular_matrix_factors_like_torch():
    a = _m(5, 5)
    a[:, 2] = a[:, 0] * 2  # rank deficient
    _same(lambda x: torch.linalg.lu_factor_ex(x), a)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lu_solve_every_form(left, adjoint, dtype):
    a = _m(3, 4, 4, seed=1, dtype=dtype) + 4 * torch.eye(4, dtype=dtype)
    b = _m(3, 4, 2, seed=2, dtype=dtype) if left else _m(3, 2, 4, seed=2, dtype=dtype)
    lu, piv = torch.linalg.lu_factor(a)
    _same(lambda x, p, r: torch.linalg.lu_solve(x, p, r, left=left, adjoint=adjoint), lu, piv, b)


def test_lu_kernel_is_tensorflows_lu():
    x = _m(5, 5, seed=3)
    b = GraphBuilder("g")
    lu, p = b.op("Lu", [("input", b.data(torch.float32, (5, 5)))],
                 {"output_idx_type": torch.int32},
                 [("lu", (torch.float32, (5, 5))), ("p", (torch.int32, (5,)))])
    b.net_output([lu, p])
    rt = ReferenceRuntime(check=True)
    rt.load(b.model().SerializeToString())
    packed, perm = rt.run([x])
    lower = torch.tril(packed, -1) + torch.eye(5)
    upper = torch.triu(packed)
    torch.testing.assert_close(x[perm.long()], lower @ upper, **TOL)
    assert perm.dtype == torch.int32 and sorted(perm.tolist()) == list(range(5))
