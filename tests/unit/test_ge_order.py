"""Searches, NaN-aware medians, reductions into indexed places and writes at computed
positions (converters/aten_order.py) equal eager beyond OpInfo's one sample: ties, NaNs,
all-NaN slices, negative indices, include_self both ways, integer floor division, empty
places, more or fewer nonzeros than asked for."""
import pytest
import torch

from test_ge_common import assert_same, ge_roundtrip  # noqa: F401  (ge_validate is autouse)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _same(fn, *inputs):
    out, converted, _ = ge_roundtrip(fn, *inputs)
    assert_same(fn(*inputs), out)
    return {op.type for op in converted.model.graph[0].op}


@pytest.mark.parametrize("offset,d1,d2", [(0, 0, 1), (1, 0, 1), (-2, 1, 2), (0, 2, 0)])
def test_diagonal_scatter(offset, d1, d2):
    x = _rand(4, 5, 6)
    src = torch.diagonal(x, offset, d1, d2).clone().normal_(generator=torch.Generator().manual_seed(1))
    assert "ScatterElements" in _same(
        lambda a, b: torch.diagonal_scatter(a, b, offset, d1, d2), x, src)


def test_as_strided_scatter_and_an_overlapping_window_is_refused():
    x = _rand(6, 4)
    _same(lambda a, b: torch.as_strided_scatter(a, b, (3, 2), (4, 1), 2), x, _rand(3, 2, seed=2))
    from torchair_dist.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="writes one element twice"):
        ge_roundtrip(lambda a, b: torch.as_strided_scatter(a, b, (3, 2), (1, 1)), x,
                     _rand(3, 2, seed=3))


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_mean(include_self, dtype):
    x = (torch.arange(15).reshape(3, 5) * 3 - 7).to(dtype)
    src = (torch.arange(15).reshape(3, 5) - 4).to(dtype)
    index = torch.tensor([[0, 0, 4, 4, 4], [1, 1, 1, 0, 0], [2, 3, 2, 3, 2]])  # col 1..3 empty
    _same(lambda a, i, s: a.scatter_reduce(1, i, s, "mean", include_self=include_self),
          x, index, src)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x, src = _rand(5, 3), _rand(4, 3, seed=4)
    index = torch.tensor([0, 4, 0, 2])
    _same(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=include_self),
          x, index, src)
    _same(lambda a, i, s: a.index_reduce(1, i, s.t(), reduce, include_self=include_self),
          x.t().contiguous(), index, src)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize(right):
    seq = torch.tensor([[1.0, 2.0, 2.0, 5.0], [0.0, 0.5, 3.0, 3.0]])
    vals = torch.tensor([[2.0, 0.0, 6.0], [3.0, -1.0, 0.5]])
    assert "SearchSorted" in _same(lambda s, v: torch.searchsorted(s, v, right=right), seq, vals)
    _same(lambda s, v: torch.searchsorted(s, v, right=right, out_int32=True), seq, vals)
    unsorted = torch.tensor([5.0, 1.0, 2.0, 2.0])
    sorter = torch.argsort(unsorted, stable=True)
    _same(lambda s, v, o: torch.searchsorted(s, v, right=right, sorter=o), unsorted,
          torch.tensor([2.0, 4.0, 0.0]), sorter)
    _same(lambda x, b: torch.bucketize(x, b, right=right), vals, torch.tensor([0.0, 2.0, 3.0]))


def test_nanmedian_with_nans_ties_and_an_all_nan_row():
    nan = float("nan")
    x = torch.tensor([[nan, 1.0, 3.0, 2.0, 4.0], [nan, nan, nan, nan, nan],
                      [5.0, 5.0, 1.0, nan, 2.0], [0.0, -1.0, 7.0, 3.0, 2.0]])
    _same(torch.nanmedian, x)
    _same(lambda v: torch.nanmedian(v, 1).values, x)
    _same(lambda v: torch.nanmedian(v, 0, keepdim=True).values, x[[0, 2, 3]])
    from torchair_dist.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="nanmedian indices"):
        ge_roundtrip(lambda v: torch.nanmedian(v, 1).indices, x)
    _same(torch.nanmedian, torch.tensor([nan, nan]))
    _same(torch.nanmedian, torch.arange(7))  # integers: the lower median


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_with_negative_indices(accumulate):
    x = _rand(3, 4)
    index = torch.tensor([[0, -1], [5, -12]])
    _same(lambda a, i, s: a.put(i, s, accumulate=accumulate), x, index, _rand(2, 2, seed=5))


def test_masked_scatter_in_row_major_order_with_a_broadcast_mask():
    x, src = _rand(3, 4), _rand(12, seed=6)
    _same(lambda a, m, s: a.masked_scatter(m, s), x, torch.tensor([True, False, True, True]),
          src)
    _same(lambda a, m, s: a.masked_scatter(m, s), x, torch.zeros(3, 4, dtype=torch.bool), src)


@pytest.mark.parametrize("size", [0, 2, 5, 9])
def test_nonzero_static_pads_or_cuts(size):
    x = torch.tensor([[0, 3, 0], [1, 0, 2]])
    _same(lambda v: torch.nonzero_static(v, size=size, fill_value=-7), x)
    _same(lambda v: torch.nonzero_static(v, size=size), torch.tensor(4.0))


def test_data_dependent_lengths_follow_every_call(monkeypatch, request):
    # one compiled graph; each call's nonzero/masked_select/unique/bincount length is its own
    import torch._dynamo

    from torchair_dist import CompilerConfig, get_npu_backend

    # config.patch, not monkeypatch: on torch 2.14 the name is an alias that a monkeypatch
    # undo deletes for every later test
    patch = torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
    patch.__enter__()
    request.addfinalizer(lambda: patch.__exit__(None, None, None))
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")

    def f(x, m, k):
        sel = torch.masked_select(x, m)
        values, inverse, counts = torch.unique(k, return_inverse=True, return_counts=True)
        runs = torch.unique_consecutive(k, return_counts=True)
        return (torch.nonzero(x), sel * 2 + 1, sel.sum(), torch.argwhere(m).float().mean(0),
                values, inverse, counts, runs[0], runs[1], torch.bincount(k, minlength=3))

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=get_npu_backend(compiler_config=CompilerConfig()),
                             fullgraph=True)
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(5, 6, generator=g) * (torch.rand(5, 6, generator=g) > 0.3 * seed)
        m = torch.rand(5, 6, generator=g) > 0.25 * seed
        k = torch.randint(0, 3 + 2 * seed, (7,), generator=g)
        assert_same(f(x, m, k), compiled(x, m, k))
    m_empty = torch.zeros(5, 6, dtype=torch.bool)
    assert_same(f(x, m_empty, k), compiled(x, m_empty, k))


@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False)])
def test_mode_smallest_most_frequent_and_its_last_index(dim, keepdim):
    x = torch.tensor([[3, 1, 3, 1, 2, 2], [5, 5, 4, 4, 4, 5], [0, 9, 8, 7, 6, 5]])
    _same(lambda v: torch.mode(v, dim, keepdim), x)
    _same(lambda v: torch.mode(v, dim, keepdim), x.float().t().contiguous())


def test_searchsorted_of_float64_is_refused_by_name():
    from torchair_dist.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="SearchSorted takes no float64"):
        ge_roundtrip(lambda s, v: torch.searchsorted(s, v), torch.arange(5.0).double(),
                     torch.tensor([1.5]).double())
