"""Reference kernels of GE's FFT and complex ops (TensorFlow's semantics, as CANN registers
them): ``FFT``/``IFFT`` transform the innermost dimension of a complex tensor, ``IFFT`` divides
by its length; ``RFFT`` takes a float32 signal and ``fft_length`` (the signal is cut or
zero-padded to it) and returns the fft_length//2+1 non-negative bins; ``IRFFT`` takes such a
half spectrum and returns ``fft_length`` real samples, divided by fft_length; ``Conj`` and
``Angle`` are elementwise (``Angle``'s ``Tout`` names the real output type)."""
from __future__ import annotations

import torch

from .kernels import _fixed, ints, kernel
from .opspec import OpSpec

kernel("FFT")(_fixed(lambda x: torch.fft.fft(x, dim=-1)))
kernel("IFFT")(_fixed(lambda x: torch.fft.ifft(x, dim=-1)))
kernel("FFT2D")(_fixed(lambda x: torch.fft.fft2(x, dim=(-2, -1))))
kernel("IFFT2D")(_fixed(lambda x: torch.fft.ifft2(x, dim=(-2, -1))))
kernel("Conj")(_fixed(lambda x: torch.conj_physical(x)))


@kernel("RFFT")
def _rfft(spec: OpSpec):
    return lambda x, fft_length: torch.fft.rfft(x, n=ints(fft_length)[0], dim=-1)


@kernel("IRFFT")
def _irfft(spec: OpSpec):
    return lambda x, fft_length: torch.fft.irfft(x, n=ints(fft_length)[0], dim=-1)


@kernel("Angle")
def _angle(spec: OpSpec):
    out = spec.outputs[0][0]
    return lambda x: torch.angle(x).to(out)


@kernel("ComplexAbs")
def _complex_abs(spec: OpSpec):
    """The modulus sqrt(re^2 + im^2) of each element (without intermediate overflow), as
    ``Tout``."""
    out = spec.outputs[0][0]
    return lambda x: torch.abs(x).to(out)
