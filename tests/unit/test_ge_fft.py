"""FFTs and complex numbers in the GE mode: torch.fft's transforms over any dims and every
normalisation equal eager; the GE graph holds GE's FFT ops; and the reference kernels of FFT,
IFFT, RFFT and IRFFT follow TensorFlow's semantics (innermost dim, IFFT/IRFFT divide by the
length, RFFT/IRFFT cut or pad to fft_length), checked on hand-built one-op graphs."""
import pytest
import torch

from test_ge_common import assert_same, ge_roundtrip  # noqa: F401  (ge_validate is autouse)

from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.cpu.ge_reference import ReferenceRuntime

TOL = dict(rtol=1e-4, atol=1e-4)


def _types(converted):
    return {op.type for op in converted.model.graph[0].op}


def _signal(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name,fn", [
    ("fft", lambda x, norm: torch.fft.fft(x, norm=norm)),
    ("fft_dim0", lambda x, norm: torch.fft.fft(x, dim=0, norm=norm)),
    ("fft2", lambda x, norm: torch.fft.fft2(x, norm=norm)),
    ("ifftn", lambda x, norm: torch.fft.ifftn(x, dim=(0, 2), norm=norm)),
    ("rfft", lambda x, norm: torch.fft.rfft(x, norm=norm)),
    ("rfft_n", lambda x, norm: torch.fft.rfft(x, n=9, dim=1, norm=norm)),
    ("rfftn", lambda x, norm: torch.fft.rfftn(x, norm=norm)),
    ("irfft", lambda x, norm: torch.fft.irfft(torch.fft.rfft(x), n=7, norm=norm)),
    ("irfft2", lambda x, norm: torch.fft.irfft2(torch.fft.rfft2(x), norm=norm)),
    ("hfft", lambda x, norm: torch.fft.hfft(torch.fft.fft(x), norm=norm)),
    ("ihfft", lambda x, norm: torch.fft.ihfft(x, norm=norm)),
])
def test_transforms_equal_eager(name, fn, norm):
    x = _signal(3, 4, 6)
    out, converted, _ = ge_roundtrip(lambda v: fn(v, norm), x)
    assert_same(fn(x, norm), out, **TOL)
    assert _types(converted) & {"FFT", "IFFT", "RFFT", "IRFFT"}


def test_complex128_inverse_real_transform_rebuilds_the_spectrum():
    # GE's IRFFT takes complex64 only: complex128 goes through IFFT of the Hermitian spectrum
    for n in (6, 7):
        x = _signal(2, 5, dtype=torch.float64)

        def fn(v):
            return torch.fft.irfft(torch.fft.rfft(v), n=n)

        out, converted, _ = ge_roundtrip(fn, x)
        assert_same(fn(x), out, **TOL)
        assert "IRFFT" not in _types(converted) and "Conj" in _types(converted)


def test_conj_angle_complex_real_imag_and_a_complex_clone():
    z = torch.complex(_signal(4, 3), _signal(4, 3, seed=1))
    r = torch.tensor([-2.0, 0.0, 3.0, float("nan"), -0.0])

    def fn(z, r):
        c = torch.conj_physical(z)
        return (c, torch.angle(z), torch.angle(r), torch.complex(r, r * 2), c.real, c.imag,
                z.clone())

    out, converted, _ = ge_roundtrip(fn, z, r)
    assert_same(fn(z, r), out, **TOL)
    assert {"Conj", "Angle", "Complex", "Real", "Imag"} <= _types(converted)


def test_view_as_complex_of_half_is_refused_with_a_reason():
    from torchair_dist.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="view_as_complex of a torch.float16"):
        ge_roundtrip(lambda x: torch.view_as_complex(x) * 2, torch.randn(4, 2).half())


def _one_op(op_type, x, fft_length=None, out_dtype=None, out_len=None):
    b = GraphBuilder("g")
    inputs = [("input" if op_type == "RFFT" else "x", b.data(x.dtype, tuple(x.shape)))]
    if fft_length is not None:
        inputs.append(("fft_length", b.const([fft_length], torch.int32)))
    shape = tuple(x.shape[:-1]) + ((out_len,) if out_len else (x.shape[-1],))
    y = b.op(op_type, inputs, None, [("y", (out_dtype or x.dtype, shape))])
    b.net_output(y)
    rt = ReferenceRuntime(check=True)
    rt.load(b.model().SerializeToString())
    return rt.run([x])[0]


def test_fft_kernels_follow_the_ge_definitions():
    # the DFT written out: X[k] = sum_j x[j] exp(-2 pi i jk/n), over the innermost dim only
    z = torch.complex(_signal(2, 5, dtype=torch.float64), _signal(2, 5, seed=3,
                                                                  dtype=torch.float64))
    n = z.shape[-1]
    j = torch.arange(n, dtype=torch.float64)
    w = torch.exp(-2j * torch.pi * j[:, None] * j[None, :] / n)
    dft = z @ w
    torch.testing.assert_close(_one_op("FFT", z), dft)
    torch.testing.assert_close(_one_op("IFFT", dft), z)  # IFFT divides by n
    # RFFT: a float32 signal cut or zero-padded to fft_length, fft_length//2+1 bins
    x = _signal(3, 6)
    torch.testing.assert_close(_one_op("RFFT", x, 4, torch.complex64, 3),
                               torch.fft.fft(x[:, :4])[:, :3], **TOL)
    padded = torch.cat([x, torch.zeros(3, 2)], 1)
    torch.testing.assert_close(_one_op("RFFT", x, 8, torch.complex64, 5),
                               torch.fft.fft(padded)[:, :5], **TOL)
    # IRFFT: a half spectrum back to fft_length real samples (divided by fft_length)
    half = torch.fft.fft(x)[:, :4]
    torch.testing.assert_close(_one_op("IRFFT", half, 6, torch.float32, 6), x, **TOL)


def test_silu_of_a_complex_tensor():
    z = torch.complex(_signal(4, 5), _signal(4, 5, seed=7))
    out, converted, _ = ge_roundtrip(lambda v: torch.nn.functional.silu(v), z)
    assert_same(torch.nn.functional.silu(z), out, **TOL)
    assert "Swish" not in _types(converted) and "Exp" in _types(converted)


def test_abs_and_sgn_of_complex_use_the_modulus():
    # abs of a complex tensor once went through a complex->float Cast (dropping the imaginary
    # part) into the real Abs: a silent wrong result; now it is GE's ComplexAbs
    z = torch.complex(_signal(3, 5), _signal(3, 5, seed=2))
    z[0, 0] = 0
    z128 = z.to(torch.complex128)
    r = _signal(4)

    def fn(z, z128, r):
        return z.abs(), z128.abs(), z.sgn(), torch.fft.rfft(r).abs() ** 2, r.abs()

    out, converted, _ = ge_roundtrip(fn, z, z128, r)
    assert_same(fn(z, z128, r), out, **TOL)
    assert "ComplexAbs" in _types(converted)


def test_complex_abs_kernel_is_the_modulus_as_tout():
    # |3+4i| = 5; huge parts must not overflow in the square; Tout names the real output type
    z = torch.tensor([3 + 4j, -5 - 12j, 0j, complex(3e30, 4e30), complex(0, -2)],
                     dtype=torch.complex64)
    b = GraphBuilder("g")
    x = b.data(z.dtype, tuple(z.shape))
    y = b.op("ComplexAbs", [("x", x)], {"Tout": torch.float32}, [("y", (torch.float32, (5,)))])
    b.net_output(y)
    rt = ReferenceRuntime(check=True)
    rt.load(b.model().SerializeToString())
    got = rt.run([z])[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor([5.0, 13.0, 0.0, 5e30, 2.0]))
