"""Ops whose output length depends on the values, in the default mode (max-autotune), with
``dynamic=True`` and ``torch._dynamo.config.capture_dynamic_output_shape_ops = True`` (what
vllm-ascend's TorchAir runner sets), on inputs not marked static: compiled == eager on inputs
of several lengths (one compile, the symbolic sizes read at run time)."""
import pytest
import torch

from torchair_dist.base.torch_support import torch_at_least

import torchair_dist as ta


@pytest.fixture(autouse=True)
def _dynamic_output_shapes():
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        yield
    torch._dynamo.reset()


def _moe_counts(ids, x):
    """An MoE router's tokens per expert, then the tokens of the routed rows."""
    counts = torch.bincount(ids.flatten(), minlength=8)
    return counts.cumsum(0), x[ids[:, 0] > 2].sum(0)


CASES = {
    "bincount_minlength": (lambda i: torch.bincount(i, minlength=8),
                           [torch.tensor([1, 2, 2, 5]), torch.tensor([0, 3, 3, 3, 9, 1]),
                            torch.tensor([], dtype=torch.int64)]),
    "bincount_weights": (lambda i, w: torch.bincount(i, w, minlength=4),
                         [(torch.tensor([1, 2, 2]), torch.tensor([0.5, 1.0, 2.0])),
                          (torch.tensor([0, 6, 6, 1, 1]), torch.arange(5.0))]),
    "masked_select": (lambda x: torch.masked_select(x, x > 0),
                      [torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0]), torch.linspace(-1, 1, 7)]),
    "masked_select_broadcast": (lambda x, m: torch.masked_select(x, m),
                                [(torch.arange(12.0).reshape(3, 4),
                                  torch.tensor([[True], [False], [True]])),
                                 (torch.arange(20.0).reshape(5, 4),
                                  torch.tensor([[False], [True], [True], [False], [True]]))]),
    "nonzero": (lambda x: torch.nonzero(x > 0),
                [torch.tensor([[1.0, -1.0], [2.0, 3.0]]), torch.linspace(-1, 1, 12).reshape(4, 3)]),
    "unique": (lambda x: torch.unique(x, return_counts=True),
               [torch.tensor([3.0, 1.0, 3.0, 2.0]), torch.tensor([5.0, 5.0, 1.0, 0.0, 1.0])]),
    "moe_counts": (_moe_counts,
                   [(torch.tensor([[1, 3], [4, 0], [3, 3]]), torch.arange(6.0).reshape(3, 2)),
                    (torch.tensor([[7, 1], [2, 2], [5, 6], [0, 4]]),
                     torch.arange(8.0).reshape(4, 2))]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_data_dependent_ops_with_dynamic_shapes_equal_eager(name):
    fn, inputs = CASES[name]
    if name == "bincount_weights" and not torch_at_least(2, 13):
        # torch 2.11's fake bincount traces float weights as int64: refused by name (test_ge_dynamic_shapes)
        pytest.skip("torch < 2.13 traces a float-weighted bincount as int64; max-autotune refuses it")
    compiled = torch.compile(fn, backend=ta.get_npu_backend(compiler_config=ta.CompilerConfig()),
                             dynamic=True, fullgraph=True)
    for args in inputs:
        args = args if isinstance(args, tuple) else (args,)
        got, want = compiled(*args), fn(*args)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), (name, args, g, w)


def test_masked_select_of_two_symbolic_shapes_is_refused_by_name():
    """A symbolic dim against another symbolic one broadcast at run time only: named."""
    from torchair_dist.errors import UnsupportedOpError

    def fn(x, m):
        return torch.masked_select(x, m)

    compiled = torch.compile(fn, backend=ta.get_npu_backend(compiler_config=ta.CompilerConfig()),
                             dynamic=True, fullgraph=True)
    x, m = torch.arange(6.0).reshape(2, 3), torch.tensor([True, False, True])
    try:
        out = compiled(x, m)
    except Exception as exc:  # noqa: BLE001 - the refusal arrives wrapped by Dynamo
        cause = exc
        while cause is not None and not isinstance(cause, UnsupportedOpError):
            cause = cause.__cause__ or cause.__context__
        assert cause is not None and "masked_select" in str(cause), exc
    else:
        assert torch.equal(out, fn(x, m))
