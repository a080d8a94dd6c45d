"""Integer inputs that only reach tensor ops as values: one capture serves every value.

A device graph bakes host values in at capture time, so a changing Python int (a decode
position passed as an int, as transformers' sliding-window cache does) used to cost a capture
per value. The ACL backend now feeds such ints as 0-d tensors and runs their host arithmetic
per call (``backends/aclgraph/sym_values.py``); ints that decide a shape still capture per value.
Every call is compared with eager, and each int output with eager's.
"""
import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.backends.aclgraph.sym_values import split_value_ints


pytestmark = pytest.mark.usefixtures("record_capture")


def compile_fn(fn, mode, inductor_kernels=False):
    cfg = CompilerConfig()
    cfg.mode = mode
    cfg.experimental_config.inductor_kernels = inductor_kernels
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True,
                         dynamic=True)


def _counts():
    report = torchair_dist.capture_report()
    return (sum(k["captures"] for g in report.values() for k in g.values()),
            sum(k["replays"] for g in report.values() for k in g.values()))


def position_step(x, pos: int):
    """A decode-like step: an int position becomes a mask and an offset; returns pos + 1."""
    window = torch.arange(8) + (pos - 7)          # positions in the window (int arithmetic)
    mask = window[None, :] <= pos
    return (x + pos) * mask, pos + 1, max(pos - 3, 0)


@pytest.mark.parametrize("mode,inductor_kernels", [("npugraph_ex", False),
                                                    ("reduce-overhead", False),
                                                    ("npugraph_ex", True)])
def test_value_int_is_captured_once_and_equals_eager_every_step(mode, inductor_kernels):
    compiled = compile_fn(position_step, mode, inductor_kernels)
    x = torch.randn(2, 8)
    for pos in range(3, 12):
        expected = position_step(x, pos)
        got = compiled(x, pos)
        # inductor's kernels may fuse the multiply: a stated tolerance there, exact otherwise
        tol = 1e-6 if inductor_kernels else 0
        torch.testing.assert_close(got[0], expected[0], rtol=tol, atol=tol)
        assert got[1:] == expected[1:], (got[1:], expected[1:])
        assert all(type(v) is int for v in got[1:])
    captures, replays = _counts()
    assert captures == 1 and replays == 8, (captures, replays)


def test_int_that_decides_a_shape_still_captures_per_value():
    def fn(x, n: int):
        return x.new_ones(n) * x.sum() + n

    compiled = compile_fn(fn, "npugraph_ex")
    x = torch.randn(4)
    for n in (2, 3, 4, 3):
        torch.testing.assert_close(compiled(x, n), fn(x, n))
    captures, replays = _counts()
    assert captures == 3 and replays == 1, (captures, replays)


def test_each_value_input_has_its_own_fake_tensor():
    """Two value inputs (``pos - 7`` and ``pos``) must not share one fake tensor: a compiler that
    retraces the graph (inductor) takes inputs with the same fake as one aliased input and reads
    both values from one of them (wrong values; it happened)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(position_step, tracing_mode="symbolic")(torch.randn(2, 8), 5)
    split = split_value_ints(gm)
    values = split.gm.graph.find_nodes(op="placeholder")[-split.n_values:]
    assert split.n_values == 2
    assert len({id(p.meta["val"]) for p in values}) == split.n_values


def test_split_rewrites_only_value_uses():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(position_step, tracing_mode="symbolic")(torch.randn(2, 8), 5)
    split = split_value_ints(gm)
    assert split is not None
    targets = [n.target for n in split.gm.graph.nodes if n.op == "call_function"]
    assert not any(callable(t) and getattr(t, "__module__", "") in ("_operator", "operator")
                   for t in targets), "host arithmetic left in the device graph"
    phs = split.gm.graph.find_nodes(op="placeholder")
    assert len(phs) == 2 + split.n_values and split.n_values >= 1
    assert split.value_positions == [1]
    consumed_and_outs = split.host([torch.randn(2, 8), 9])
    assert list(consumed_and_outs[split.n_values:]) == [10, 6]


def test_graph_without_ints_is_left_alone():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: x * 2)(torch.randn(3))
    assert split_value_ints(gm) is None
