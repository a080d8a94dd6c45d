"""Chebyshev polynomials (converters/aten_polynomials.py) of a tensor degree equal torch over a
grid of x inside and outside [-1, 1] (and its edges, +-inf, NaN) and of degrees -2 .. 40
(non-integer ones truncate as torch's do), within rtol=atol=1e-4 in float32, including
torch's NaN where its recurrence overflows."""
import pytest
import torch

from test_ge_common import ge_roundtrip  # noqa: F401  (ge_validate is autouse)

X = torch.cat([torch.linspace(-3, 3, 301), torch.tensor(
    [1.0, -1.0, 0.0, 0.5, -0.5, 1.0001, -1.0001, 50.0, -50.0, float("inf"), float("-inf"),
     float("nan")])])
N = torch.tensor([-2.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0, 12.0, 20.0,
                  40.0, 300.0])

FNS = {
    "t": torch.special.chebyshev_polynomial_t, "u": torch.special.chebyshev_polynomial_u,
    "v": torch.special.chebyshev_polynomial_v, "w": torch.special.chebyshev_polynomial_w,
    "st": torch.special.shifted_chebyshev_polynomial_t,
    "su": torch.special.shifted_chebyshev_polynomial_u,
    "sv": torch.special.shifted_chebyshev_polynomial_v,
    "sw": torch.special.shifted_chebyshev_polynomial_w,
}


@pytest.mark.parametrize("name", list(FNS))
def test_chebyshev_equals_torch(name):
    fn = FNS[name]
    x = X if not name.startswith("s") else (X + 1) / 2  # the shifted ones live on [0, 1]
    xs, ns = x[:, None].expand(-1, len(N)).contiguous(), N[None, :].expand(len(x), -1).contiguous()
    out, converted, _ = ge_roundtrip(fn, xs, ns)
    torch.testing.assert_close(out[0], fn(xs, ns), rtol=1e-4, atol=1e-4, equal_nan=True)
    assert "Acos" in {op.type for op in converted.model.graph[0].op}


def test_hermite_stays_refused_with_the_reason():
    from torchair_dist.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="special function"):
        ge_roundtrip(torch.special.hermite_polynomial_h, torch.rand(4), torch.tensor([3.0]))


def test_chebyshev_near_float32_overflow_and_in_float64():
    # a float32 Cosh through exp(t)/2 overflows at t = 88.72; cosh itself only at 89.42
    x = torch.tensor([2.5, 2.5, 2.5, -2.5, 3.0, 1.5])
    n = torch.tensor([57.0, 58.0, 59.0, 57.0, 49.0, 92.0])
    for fn in (torch.special.chebyshev_polynomial_t, torch.special.chebyshev_polynomial_u,
               torch.special.chebyshev_polynomial_v, torch.special.chebyshev_polynomial_w):
        out, _, _ = ge_roundtrip(fn, x, n)
        torch.testing.assert_close(out[0], fn(x, n), rtol=1e-4, atol=1e-4, equal_nan=True)
    xd, nd = X.double()[:, None], N.double()[None, :]
    xs, ns = xd.expand(-1, len(N)).contiguous(), nd.expand(len(X), -1).contiguous()
    out, _, _ = ge_roundtrip(torch.special.chebyshev_polynomial_t, xs, ns)
    torch.testing.assert_close(out[0], torch.special.chebyshev_polynomial_t(xs, ns), rtol=1e-6,
                               atol=1e-6, equal_nan=True)
