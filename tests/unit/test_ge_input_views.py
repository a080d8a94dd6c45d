"""Outputs that view a graph input, in the default mode (max-autotune) with symbolic sizes.

AOT autograd rebuilds an output that aliases an input from the sizes, strides and storage offset
of what the compiled graph returns; GE returns dense tensors at offset 0, so the runner must give
its result the view's layout, evaluated from the run's sizes. Before, ``x.narrow(0, 1, n)``
came back as ``x[:n]`` (every element wrong) once a second call made the length symbolic.
"""
import pytest
import torch

import torchair_dist
from torchair_dist.errors import UnsupportedOpError


def _backend():
    return torchair_dist.get_npu_backend()  # the default mode: max-autotune


def _same_view(expected: torch.Tensor, got: torch.Tensor, base: torch.Tensor) -> None:
    assert torch.equal(expected, got)
    assert got.stride() == expected.stride()
    assert got.storage_offset() == expected.storage_offset()
    assert got.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


@pytest.mark.parametrize("fn", [
    lambda x: x.narrow(0, 1, x.size(0) - 1),
    lambda x: x.t()[:x.size(1) - 1],
    lambda x: x[:, ::2][:x.size(0) - 1],
    lambda x: x[x.size(0) // 2:, 1:],
], ids=["narrow", "t_slice", "step_slice", "offset_by_size"])
def test_a_second_length_turns_sizes_symbolic_and_the_view_stays_eagers(fn):
    compiled = torch.compile(fn, backend=_backend())  # no dynamic=: automatic dynamic shapes
    for rows in (3, 4, 5, 7):
        x = torch.arange(1., 1 + rows * 6).reshape(rows, 6)
        _same_view(fn(x), compiled(x), x)


def test_narrow_by_a_size_argument_keeps_its_offset():
    def f(x, n):
        return x.narrow(0, 1, n)

    compiled = torch.compile(f, backend=_backend(), dynamic=True)
    for n in (2, 3, 5):
        x = torch.arange(1., 1 + (n + 1) * 2).reshape(n + 1, 2)
        _same_view(f(x, n), compiled(x, n), x)


def test_a_view_of_an_input_at_a_data_dependent_offset_is_refused_by_name():
    def f(x, y):
        n = y.item()
        torch._check(n >= 0)
        torch._check(n < x.shape[0])
        return x[n:]

    compiled = torch.compile(f, backend=_backend(), dynamic=True)
    x = torch.arange(12.).reshape(6, 2)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        with pytest.raises(Exception) as info:
            compiled(x, torch.tensor(2))
    cause = info.value
    while cause is not None and not isinstance(cause, UnsupportedOpError):
        cause = cause.__cause__ or cause.__context__
    assert cause is not None, info.value
    assert "views a graph input" in str(cause) and ".clone()" in str(cause)
