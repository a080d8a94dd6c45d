"""Ops whose output size, or the rows they reduce, depend on the input values, in max-autotune:
segment_reduce and embedding_bag (segment ids computed in the graph, GE's UnsortedSegment*
ops; their kernels checked alone on hand-built graphs), tensor_split at tensor indices (the
storage offset Dynamo records only for a dropped assert), and edge inputs of the data-dependent
lengths converted in aten_order (all-false/all-true masks, zero-size, repeated values, int and
bool dtypes, NaN), each compiled function called again with another data-dependent size: the
new shape, never a stale one."""
import pytest
import torch

from test_ge_common import recording_conversions
from test_ge_kernel_semantics import run_op
from torchair_dist.base.torch_support import torch_at_least
from torchair_dist.errors import UnsupportedOpError


from test_ge_common import compile_ge as _compile, ge_validate  # noqa: F401,E402  (autouse)


def _check(fn, cases, want_ops, tol=0.0):
    """Compiled == eager for every case, one compiled fn for all of them (exact by default:
    the same elementwise ops; ``tol`` where a sum runs in another order); the GE graphs hold
    ``want_ops``."""
    compiled = _compile(fn)
    with recording_conversions() as converted:
        for args in cases:
            got, exp = compiled(*args), fn(*args)
            got, exp = (got, exp) if isinstance(exp, tuple) else ((got,), (exp,))
            for g, e in zip(got, exp):
                assert g.shape == e.shape and g.dtype == e.dtype, (args, g, e)
                torch.testing.assert_close(g, e, rtol=tol, atol=tol, equal_nan=True)
    types = {op.type for c in converted for op in c.model.graph[0].op}
    assert set(want_ops) <= types, types


def test_nonzero_and_argwhere_edge_masks_and_a_second_count():
    masks = [torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]]), torch.zeros(2, 3),
             torch.ones(2, 3), torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0]])]
    _check(torch.nonzero, [(m,) for m in masks], ["NonZero"])
    _check(torch.argwhere, [(m.to(torch.int32),) for m in masks], ["NonZero"])
    _check(torch.nonzero, [(torch.zeros(0, 3),), (torch.tensor([True, False, True]),)],
           ["NonZero"])
    _check(lambda x: torch.nonzero(x).sum(0) + 1, [(m,) for m in masks], ["NonZero"])


@pytest.mark.parametrize("size,fill", [(2, -1), (8, 5), (0, -1)])
def test_nonzero_static_pads_or_cuts(size, fill):
    masks = [torch.tensor([[0, 1, 1], [1, 0, 1]]), torch.zeros(2, 3, dtype=torch.int64),
             torch.ones(2, 3, dtype=torch.int64)]
    _check(lambda x: torch.nonzero_static(x, size=size, fill_value=fill),
           [(m,) for m in masks], [])


def test_masked_select_broadcast_all_false_all_true_dtypes():
    x = torch.randn(3, 4)
    masks = [x > 0, torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool)]
    _check(torch.masked_select, [(x, m) for m in masks], [])
    _check(torch.masked_select, [(x, torch.tensor([True, False, False, True])),
                                 (x, torch.tensor([False, False, False, False]))],
           [])
    xi = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    _check(torch.masked_select, [(xi, xi % 3 == 0), (xi, xi > 100)], [])
    xb = torch.randn(3, 4).to(torch.bfloat16)
    _check(torch.masked_select, [(xb, xb > 0)], [])


def test_masked_scatter_counts_from_the_mask():
    x, src = torch.randn(3, 4), torch.arange(12, dtype=torch.float32)
    masks = [x > 0, torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool)]
    _check(torch.Tensor.masked_scatter, [(x, m, src) for m in masks], [])
    _check(torch.Tensor.masked_scatter, [(x, torch.tensor([True, False, True, False]), src)],
           [])
    xb = x.to(torch.bfloat16)
    _check(torch.Tensor.masked_scatter, [(xb, xb > 0, src.to(torch.bfloat16))], [])


def test_put_negative_indices_and_accumulate():
    x = torch.randn(3, 4)
    idx = torch.tensor([0, -1, 5, -12])
    src = torch.tensor([1.0, 2.0, 3.0, 4.0])
    _check(lambda a, i, s: torch.put(a, i, s), [(x, idx, src)], ["ScatterElements"])
    dup = torch.tensor([[1, 1], [-11, 7]])
    _check(lambda a, i, s: torch.put(a, i, s, accumulate=True),
           [(x, dup, src.reshape(2, 2)), (x, idx.reshape(2, 2), src.reshape(2, 2))],
           ["ScatterElements"])
    xi = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    _check(lambda a, i, s: torch.put(a, i, s, accumulate=True),
           [(xi, torch.tensor([0, 0, 5]), torch.tensor([1, 2, 3], dtype=torch.int32))],
           ["ScatterElements"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_unique_sorted_inverse_counts(dtype):
    cases = [torch.tensor([[3, 1, 3], [2, 1, 3]]), torch.tensor([[5, 5, 5], [5, 5, 5]]),
             torch.tensor([[0, 1, 2], [4, 3, 5]])]
    cases = [(c.to(dtype),) for c in cases]
    _check(lambda x: torch.unique(x, return_inverse=True, return_counts=True), cases,
           [])
    _check(torch.unique, cases, [])


def test_unique_consecutive_flat_and_dim_refused():
    cases = [(torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0, 1.0]),), (torch.ones(6),),
             (torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),)]
    _check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
           cases, ["UniqueConsecutive"])
    with pytest.raises(Exception, match="unique_consecutive"):  # along a dim: refused
        _compile(lambda x: torch.unique_consecutive(x, dim=0))(torch.ones(4, 2))


def test_bincount_counts_weights_minlength_and_a_second_size():
    cases = [(torch.tensor([0, 1, 1, 3]),), (torch.tensor([7, 7, 0, 2]),), (torch.zeros(4, dtype=torch.int64),)]
    _check(torch.bincount, cases, ["Bincount"])
    _check(lambda x: torch.bincount(x, minlength=6), cases, ["Bincount"])
    w = torch.tensor([0.5, 1.0, 2.0, -1.0])
    weighted = lambda x, w: torch.bincount(x, weights=w)  # noqa: E731
    if torch_at_least(2, 13):
        _check(weighted, [(c[0], w) for c in cases], ["Bincount"])
    else:  # torch 2.11 traces float-weighted bincount as int64: refused, never truncated
        with pytest.raises(Exception, match="bincount with torch.float32 weights was traced "
                                            "with output type torch.int64"):
            _compile(weighted)(cases[0][0], w)
    _check(lambda x: torch.bincount(x, minlength=3), [(torch.zeros(0, dtype=torch.int64),)], [])


def test_tensor_split_by_a_tensor_of_indices_is_refused_not_wrong(request):
    # the pieces are views of the input at data-dependent offsets: AOT rebuilds them from the
    # GE outputs' storage offsets, which fresh GE tensors do not carry (a bool input, whose
    # carrier Cast makes a fresh tensor even on CPU, gave rows 0:2 for 1:3 before)
    import torch._dynamo

    from torchair_dist import CompilerConfig, get_npu_backend

    # config.patch, not monkeypatch: on torch 2.14 the name is an alias that a monkeypatch
    # undo deletes for every later test
    patch = torch._dynamo.config.patch(capture_scalar_outputs=True)
    patch.__enter__()
    request.addfinalizer(lambda: patch.__exit__(None, None, None))
    torch._dynamo.reset()
    fn = torch.compile(lambda a, i: torch.tensor_split(a, i),
                       backend=get_npu_backend(compiler_config=CompilerConfig()), fullgraph=True)
    with pytest.raises(Exception) as info:
        fn(torch.arange(25).reshape(5, 5) % 3 == 0, torch.tensor([1, 3]))
    assert "storage offset" in str(info.value)
    assert isinstance(info.value, UnsupportedOpError) or "UnsupportedOpError" in str(info.value)


def test_unsorted_segment_kernels_tf_semantics():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    ids = torch.tensor([2, 0, 2, -1])
    lowest = torch.finfo(torch.float32).min
    want = {"UnsortedSegmentSum": [[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]],
            "UnsortedSegmentProd": [[3.0, 4.0], [1.0, 1.0], [5.0, 12.0]],
            "UnsortedSegmentMax": [[3.0, 4.0], [lowest, lowest], [5.0, 6.0]]}
    for op_type, expected in want.items():
        (y,) = run_op(op_type, [("x", x), ("segment_ids", ids),
                                ("num_segments", torch.tensor(3))],
                      outputs=[("y", (torch.float32, (3, 2)))], consts=("num_segments",))
        assert y.tolist() == expected, op_type


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_lengths_offsets_initial_empty(reduce):
    data = torch.tensor([1.0, -2.0, 3.0, 4.0, 0.5, 6.0])
    lengths = [torch.tensor([0, 1, 2, 3]), torch.tensor([6, 0, 0, 0]), torch.tensor([2, 2, 1, 1])]
    _check(lambda d, ln: torch.segment_reduce(d, reduce, lengths=ln), [(data, ln) for ln in lengths],
           [_SEG[reduce]])
    _check(lambda d, ln: torch.segment_reduce(d, reduce, lengths=ln, initial=1.5),
           [(data, ln) for ln in lengths], [_SEG[reduce]])
    offsets = [torch.tensor([0, 2, 2, 6]), torch.tensor([1, 3, 4, 5])]
    _check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o), [(data, o) for o in offsets],
           [_SEG[reduce]])
    rows = data.reshape(3, 2)
    _check(lambda d, ln: torch.segment_reduce(d, reduce, lengths=ln, axis=0),
           [(rows, torch.tensor([1, 0, 2])), (rows, torch.tensor([3, 0, 0]))], [_SEG[reduce]])


_SEG = {"sum": "UnsortedSegmentSum", "mean": "UnsortedSegmentSum", "max": "UnsortedSegmentMax",
        "min": "UnsortedSegmentMin", "prod": "UnsortedSegmentProd"}


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_offsets_padding_empty_bags(mode):
    import torch.nn.functional as F

    weight = torch.randn(10, 3)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    cases = [(idx, torch.tensor([0, 3, 3, 8])), (idx, torch.tensor([0, 0, 0, 8])),
             (idx, torch.tensor([0, 1, 2, 3]))]
    tol = 1e-6  # the bag sums run in another order than torch's
    _check(lambda i, o: F.embedding_bag(i, weight, o, mode=mode), cases, [
        "GatherV2", "UnsortedSegmentMax" if mode == "max" else "UnsortedSegmentSum"], tol)
    _check(lambda i, o: F.embedding_bag(i, weight, o, mode=mode, padding_idx=4), cases,
           ["GatherV2"], tol)
    last = lambda i, o: F.embedding_bag(i, weight, o, mode=mode, include_last_offset=True)  # noqa: E731
    if mode == "sum":
        _check(last, cases, ["GatherV2"], tol)
    else:
        with pytest.raises(Exception, match="_embedding_bag.*include_last_offset"):
            _compile(last)(*cases[0])
    _check(lambda i: F.embedding_bag(i, weight, mode=mode), [(idx.reshape(2, 4),)], ["GatherV2"],
           tol)
    if mode == "sum":
        psw = torch.randn(8)
        _check(lambda i, o, w: F.embedding_bag(i, weight, o, mode=mode, per_sample_weights=w),
               [(i, o, psw) for i, o in cases], ["GatherV2", "Mul"], tol)
