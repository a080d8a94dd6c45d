"""Slicing and indexing edge cases in max-autotune against eager, exactly (issue 41):
slice_scatter into empty slices (start == end, start past the end, end before start, negative
bounds, step > 1) and negative indices in the index/index_put family, _unsafe_masked_index
included (PyTorch's decomposition clamps a negative index to 0; eager wraps it)."""
import pytest
import torch

from test_ge_common import assert_same, compile_ge, ge_validate  # noqa: F401

aten = torch.ops.aten


def exact(fn, *args):
    assert_same(fn(*args), compile_ge(fn)(*args), rtol=0, atol=0)


@pytest.mark.parametrize("start,end,step", [
    (10, 10, 1), (4, 4, 1), (12, 15, 1), (-3, -3, 1), (5, 5, 2), (7, 3, 1), (-4, -1, 1),
    (-20, 2, 1), (8, 2, 3), (0, 10, 3), (None, None, 1)])
def test_slice_scatter_bounds(start, end, step):
    x = torch.arange(10.)
    n = len(range(*slice(start, end, step).indices(10)))
    exact(lambda x, s: torch.slice_scatter(x, s, 0, start, end, step), x, torch.full((n,), -1.))


def test_slice_scatter_empty_dim1():
    exact(lambda x, s: torch.slice_scatter(x, s, 1, 4, 2), torch.ones(2, 5), torch.ones(2, 0))


def test_unsafe_masked_index_negative():
    a = torch.arange(5.)
    exact(lambda a, m, i: aten._unsafe_masked_index(a, m, [i], 7.0),
          a, torch.tensor([True, True, False, True]), torch.tensor([-2, 1, -1, -5]))


def test_unsafe_masked_index_2d_none_and_int32():
    a = torch.arange(12.).reshape(3, 4)
    exact(lambda a, m, i: aten._unsafe_masked_index(a, m, [None, i], -1.0),
          a, torch.tensor([[True, False, True]]), torch.tensor([-1, 0, -4], dtype=torch.int32))
    exact(lambda a, m, i, j: aten._unsafe_masked_index(a, m, [i, j], 0.5),
          a, torch.tensor([True, False]), torch.tensor([-1, -3]), torch.tensor([-4, 2]))


def test_index_family_negative():
    a = torch.arange(5.)
    exact(lambda a, i: (a[i], aten._unsafe_index(a, [i])), a, torch.tensor([-1, -5, 2]))
    exact(lambda a, i, v: (a.index_put([i], v), a.index_put([i], v, accumulate=True)),
          a, torch.tensor([-1, -5]), torch.tensor([9., 8.]))
    exact(lambda a, m, i, v: aten._unsafe_masked_index_put_accumulate(a, m, [i], v),
          a, torch.tensor([True, False, True]), torch.tensor([-2, -1, 0]), torch.tensor([1., 2., 3.]))
