"""Special functions composed from elementwise GE ops (converters/aten_special.py) equal torch
over wide ranges — not only OpInfo's sample: around the poles and zeros, tiny and huge
arguments, negative arguments, +-0, +-inf and NaN — within rtol=atol=1e-4 in float32."""
import pytest
import torch

from test_ge_common import ge_roundtrip  # noqa: F401  (ge_validate is autouse)

EDGES = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 1e-6, 0.5, 1.0,
         2.0, -1.0, -2.0, -2.5, -3.0001, -2.9999, 7.999, 8.0, 8.001, 1e3, 1e6, 3e36]


def _grid(lo, hi, n=4001, extra=EDGES):
    return torch.cat([torch.linspace(lo, hi, n), torch.tensor(extra)])


def _check(fn, x, rtol=1e-4, atol=1e-4):
    out, converted, _ = ge_roundtrip(fn, x)
    want = fn(x)
    want = want if isinstance(want, (tuple, list)) else [want]
    for got, ref in zip(out, want):
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True)
    return {op.type for op in converted.model.graph[0].op}


@pytest.mark.parametrize("name,fn,lo,hi", [
    ("lgamma", torch.lgamma, -20.0, 40.0),
    ("digamma", torch.digamma, -20.0, 40.0),
    ("mvlgamma3", lambda x: torch.mvlgamma(x.clamp(min=1.01), 3), 1.0, 30.0),
    ("erfcx", torch.special.erfcx, -9.0, 60.0),
    ("log_ndtr", torch.special.log_ndtr, -40.0, 10.0),
    ("spherical_j0", torch.special.spherical_bessel_j0, -50.0, 50.0),
    ("i0", torch.i0, -80.0, 80.0),
    ("i1", torch.special.i1, -80.0, 80.0),
])
def test_composed_special_functions_equal_torch(name, fn, lo, hi):
    types = _check(fn, _grid(lo, hi))
    assert types & {"Mul", "RealDiv"}  # composed: no single GE op of that name exists


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_polygamma_is_a_scaled_zeta(n):
    x = _grid(0.05, 30.0, extra=[1e-3, 1.0, 2.0, 50.0, float("inf"), float("nan")])
    types = _check(lambda v: torch.polygamma(n, v), x, rtol=1e-4, atol=1e-3)
    assert "Zeta" in types


def test_digamma_signed_zero_poles_and_negative_integers():
    x = torch.tensor([0.0, -0.0, -1.0, -7.0, float("-inf"), float("inf")])
    _check(torch.digamma, x)


def test_lgamma_near_negative_poles_keeps_its_precision():
    # r = x - round(x) is exact, so log|sin(pi x)| does not lose digits next to a pole
    x = torch.tensor([-3.0 + 2 ** -10, -3.0 - 2 ** -10, -10.0 + 2 ** -5, -1.0 + 1e-4])
    _check(torch.lgamma, x)


def test_frexp_mantissa_and_exponent():
    x = torch.cat([_grid(-1e4, 1e4, 2001), torch.tensor([7.9999995, 8.0, 0.5, 1e-45, -1e-40,
                                                          3.4e38])])
    _check(torch.frexp, x, rtol=0, atol=0)


def test_bfloat16_is_computed_in_float32():
    x = torch.linspace(0.1, 20, 200).bfloat16()
    out, _, _ = ge_roundtrip(torch.lgamma, x)
    assert out[0].dtype == torch.bfloat16
    torch.testing.assert_close(out[0], torch.lgamma(x.float()).bfloat16(), rtol=2e-2, atol=2e-2)
