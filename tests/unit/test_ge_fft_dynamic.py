"""torch.fft through torch.compile in max-autotune, static and with symbolic sizes.

The normalisation of a transform over a dim of symbolic length is computed from the run's
sizes (it was a constant from the -1 that stands for a symbolic dim: ``rfft2(norm="ortho")``
came back 11.8 off); a real signal is transformed with ``RFFT`` along its last dim; lengths
given as symbolic sizes (``irfft(n=x.shape[-1])``) reach ``IRFFT`` as run-time values.
"""
import pytest
import torch

import torchair_dist

CASES = {
    "rfft2_ortho": lambda x: torch.fft.rfft2(x, norm="ortho"),
    "fft_of_real_dim0": lambda x: torch.fft.fft(x, dim=0),
    "fftn_of_real_forward": lambda x: torch.fft.fftn(x, norm="forward"),
    "ifft2_complex": lambda x: torch.fft.ifft2(x.to(torch.complex64), norm="ortho"),
    "irfft_to_its_length": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1],
                                                     norm="ortho"),
    "irfftn_to_its_sizes": lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=x.shape[-2:]),
    "fft_real_part": lambda x: torch.fft.fftn(x).real,
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fft_programs_equal_eager(name, dynamic):
    fn = CASES[name]
    compiled = torch.compile(fn, backend=torchair_dist.get_npu_backend(), dynamic=dynamic)
    gen = torch.Generator().manual_seed(0)
    for shape in ((4, 6), (6, 10), (5, 7)):
        x = torch.randn(shape, generator=gen)
        expected, got = fn(x), compiled(x)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1.3e-6, atol=1e-5)


def test_an_n_d_fft_is_as_accurate_as_eagers():
    """GE registers 1-D and 2-D transforms, so fftn is a transform per dim; eager's n-D kernel
    rounds otherwise (they differ by up to 3e-5 on a 16^3 signal, more than torch's default
    float32 tolerance of 1e-5). The stated bound: ours is within 1.25x of eager's own error
    against the float64 transform."""
    x = torch.randn(16, 16, 16, generator=torch.Generator().manual_seed(0))
    fn = torch.fft.fftn
    got = torch.compile(fn, backend=torchair_dist.get_npu_backend())(x)
    truth = fn(x.double())
    ours = (got.to(torch.complex128) - truth).abs().max().item()
    eager = (fn(x).to(torch.complex128) - truth).abs().max().item()
    assert ours <= 1.25 * eager, (ours, eager)
