"""debug.aclgraph.remove_cat_ops: producers of a cat write into its output (ACL modes, the
real pipeline with the default CPU capture stand-in)."""
import pytest
import torch
import torch.distributed as dist

import torchair_dist
from torchair_dist.pipeline import route as compiler
from torchair_dist.passes.graph_info import op_targets

pytestmark = pytest.mark.usefixtures("one_rank_group")

CAT = "aten.cat.default"


def _compile(fn, remove_cat=True, dynamic=False):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.debug.aclgraph.remove_cat_ops = remove_cat
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True, dynamic=dynamic)


def _run(fn, make_args, steps=3, **kw):
    """Compile, call with fresh inputs each step (capture, then replays), compare with eager
    exactly; returns the graph the backend received."""
    compiled = _compile(fn, **kw)
    with compiler.record_graphs() as graphs:
        for _ in range(steps):
            args = make_args()
            out, ref = compiled(*args), fn(*args)
            out, ref = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
            assert all(torch.equal(o, r) for o, r in zip(out, ref)) and len(out) == len(ref)
    assert len(graphs) == 1
    return graphs[0].gm


def matmul_and_add(a, b, x, y):
    return torch.cat([a @ b, x + y], 0) * 2


def pointwise_last_dim(x, y, z):
    return torch.cat([x * y, torch.sigmoid(z), torch.addmm(z, x, y.t()[:, :2]) * 1.0], -1)


def cat_is_output(a, b, x):
    return torch.cat([a @ b, torch.exp(x)], 0)


@pytest.mark.parametrize("fn, make_args, writes", [
    (matmul_and_add, lambda: (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5),
                              torch.randn(2, 5)), ["aten.mm.out", "aten.add.out"]),
    (pointwise_last_dim, lambda: (torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 2)),
     ["aten.mul.out", "aten.sigmoid.out"]),
    (cat_is_output, lambda: (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5)),
     ["aten.mm.out", "aten.exp.out"]),
])
def test_producers_write_into_the_cat_output_and_equal_eager(fn, make_args, writes):
    ops = op_targets(_run(fn, make_args))
    assert CAT not in ops
    assert "aten.empty.memory_format" in ops
    for op in writes:
        assert op in ops


def test_option_off_leaves_the_graph_as_the_previous_stage_left_it():
    def make():
        return torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5), torch.randn(2, 5)

    compiled = _compile(matmul_and_add, remove_cat=False)
    with compiler.record_graphs(after="reinplace_inputs") as before, \
            compiler.record_graphs(after="remove_cat_ops") as after, \
            compiler.record_graphs() as final:
        args = make()
        assert torch.equal(compiled(*args), matmul_and_add(*args))
    assert after == []  # the stage did not run: the table's gate is off
    assert before[0].code == final[0].gm.code
    assert CAT in op_targets(final[0].gm)


def mixed_dtypes(x, y):
    return torch.cat([x * 2, y * 2], 0)  # float32 and float64: cat promotes


def producer_with_other_user(x, y):
    s = x + y
    return torch.cat([s, y * 3], 0) + s.sum()


def matmul_into_strided_slice(a, b, c):
    return torch.cat([a @ b, a @ c], 1)  # rows of 3: each slice is strided


def input_in_cat(x, y):
    return torch.cat([x, y * 2], 0)


def same_producer_twice(x):
    t = x * 2
    return torch.cat([t, t], 0)


@pytest.mark.parametrize("fn, make_args", [
    (mixed_dtypes, lambda: (torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64))),
    (producer_with_other_user, lambda: (torch.randn(2, 3), torch.randn(2, 3))),
    (matmul_into_strided_slice, lambda: (torch.randn(3, 4), torch.randn(4, 2),
                                         torch.randn(4, 5))),
    (input_in_cat, lambda: (torch.randn(2, 3), torch.randn(2, 3))),
    (same_producer_twice, lambda: (torch.randn(2, 3),)),
])
def test_cats_it_cannot_prove_safe_are_left_alone(fn, make_args):
    ops = op_targets(_run(fn, make_args))
    assert CAT in ops
    assert not any(op.endswith(".out") for op in ops)


def test_symbolic_sizes_are_left_alone():
    sizes = iter([(3, 2), (5, 4), (7, 6)])

    def make():
        m, n = next(sizes)
        return torch.randn(m, 4), torch.randn(4, 5), torch.randn(n, 5), torch.randn(n, 5)

    ops = op_targets(_run(matmul_and_add, make, dynamic=True))
    assert CAT in ops and "aten.mm.out" not in ops


def test_with_a_collective_on_the_cat_output():
    """The cat's output is all-reduced (re-inplaced into the buffer) and read afterwards."""
    def f(a, b, x):
        y = torch.cat([a @ b, x + 1], 0)
        dist.all_reduce(y)
        return y * 2

    ops = op_targets(_run(f, lambda: (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5))))
    assert CAT not in ops and "aten.mm.out" in ops


class RollingState(torch.nn.Module):
    """A buffer overwritten with a cat each step (a mutated graph input)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 3))

    def forward(self, x, w):
        new = torch.cat([x @ w, self.state[2:] * 0.5], 0)
        self.state.copy_(new)
        return new.sum(0)


def test_cat_written_back_into_a_mutated_input():
    eager, mod = RollingState(), RollingState()
    compiled = _compile(mod)
    with compiler.record_graphs() as graphs:
        for _ in range(4):
            x, w = torch.randn(2, 5), torch.randn(5, 3)
            assert torch.equal(compiled(x, w), eager(x, w))
            assert torch.equal(mod.state, eager.state)
    ops = op_targets(graphs[0].gm)
    assert CAT not in ops and "aten.mm.out" in ops and "aten.mul.out" in ops
    assert graphs[0].mutated_input_indices


def test_inductor_kernels_keep_the_cat():
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.experimental_config.inductor_kernels = True
    compiled = torch.compile(matmul_and_add, fullgraph=True,
                             backend=torchair_dist.get_npu_backend(compiler_config=cfg))
    args = (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5), torch.randn(2, 5))
    with compiler.record_graphs() as graphs:
        assert torch.allclose(compiled(*args), matmul_and_add(*args))
    assert CAT in op_targets(graphs[0].gm)


class CatNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 5, generator=g))

    def forward(self, x, y):
        return torch.cat([x @ self.w, y + 1], 0) * 2


def test_cache_round_trip_of_the_rewritten_graph(tmp_path):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    net = CatNet().eval()
    x, y = torch.randn(3, 4), torch.randn(2, 5)
    with torch.no_grad():
        ref = net(x, y)
    with compiler.record_graphs() as graphs:
        fn = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
        assert torch.equal(fn(x, y), ref) and fn.last_source == "compiled"
    assert "aten.mm.out" in op_targets(graphs[0].gm)
    loaded = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
    assert torch.equal(loaded(x, y), ref)
    assert loaded.last_source == "cache" and not loaded.rejections


def test_producer_on_another_stream_is_left_alone():
    from torchair_dist.streams import npu_stream_switch, npu_stream_wait_stream

    def f(a, b, x):
        h = a @ b
        with npu_stream_switch("side", priority=1):
            y = x * 2
        npu_stream_wait_stream(None, "side")
        return torch.cat([h, y], 0), torch.cat([a @ b, x + 1], 0)

    ops = op_targets(_run(f, lambda: (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5))))
    assert ops.count(CAT) == 1  # the first cat mixes streams; the second is rewritten
    assert "aten.mul.out" not in ops and "aten.add.out" in ops
