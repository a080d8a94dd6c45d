"""reinplace_collectives: dead-input all_reduce becomes all_reduce_, values unchanged."""
import torch
import torch.fx

from torchair_dist import CompilerConfig
from torchair_dist.passes.graph_info import op_targets
from torchair_dist.passes.reinplace import reinplace_collectives

aten = torch.ops.aten
c10d = torch.ops._c10d_functional


def _graph(read_after: bool, input_is_placeholder: bool = False):
    """x -> mm -> all_reduce -> wait -> copy(mm, wait) -> add; optionally mm read later."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    buf = x if input_is_placeholder else g.call_function(aten.mm.default, (x, w))
    ar = g.call_function(c10d.all_reduce.default, (buf, "sum", "0"))
    wait = g.call_function(c10d.wait_tensor.default, (ar,))
    copy = g.call_function(aten.copy.default, (buf, wait))
    out = g.call_function(aten.add.Tensor, (copy, x))
    outputs = (out, g.call_function(aten.mul.Tensor, (buf, 2))) if read_after else (out,)
    g.output(outputs)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_dead_input_is_reduced_in_place_and_copy_dropped():
    gm = reinplace_collectives(_graph(read_after=False), [], CompilerConfig())
    ops = op_targets(gm)
    assert "_c10d_functional.all_reduce_.default" in ops
    assert "_c10d_functional.all_reduce.default" not in ops
    assert "aten.copy.default" not in ops


def test_input_read_after_the_collective_is_left_functional():
    gm = reinplace_collectives(_graph(read_after=True), [], CompilerConfig())
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)


def test_graph_inputs_are_never_reduced_in_place():
    gm = reinplace_collectives(_graph(read_after=False, input_is_placeholder=True), [],
                               CompilerConfig())
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)


def test_switch_off(run_stage):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    gm = run_stage("reinplace", cfg, _graph(read_after=False), [], cfg)
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)


def _dispatch(x, slot, keep_buffer: bool):
    """An MoE dispatch: rows of x added into a fresh zero buffer (optionally read again)."""
    buf = x.new_zeros(6, x.shape[1])
    buf.index_add_(0, slot, x * 2)
    out = buf.sum(0)
    return (out, buf.clone()) if keep_buffer else out


def test_index_add_into_a_fresh_buffer_becomes_in_place_and_equals_eager():
    """Through the real pipeline (npugraph_ex, CPU record stand-in): AOT functionalizes
    ``buf.index_add_`` into ``index_add(new_zeros(..))``; the pass writes the buffer in place."""
    from torchair_dist import get_npu_backend
    from torchair_dist.pipeline.route import record_graphs

    for option, expect_inplace in ((None, True), (True, False)):
        torch._dynamo.reset()
        cfg = CompilerConfig()
        cfg.mode = "npugraph_ex"
        if option is not None:
            cfg.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = option
        f = torch.compile(lambda x, s: _dispatch(x, s, False), fullgraph=True,
                          backend=get_npu_backend(compiler_config=cfg))
        with record_graphs() as graphs:
            for seed in range(3):
                x = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed))
                slot = torch.tensor([0, 2, 2, 5, 1])
                torch.testing.assert_close(f(x, slot), _dispatch(x, slot, False), rtol=0, atol=0)
        ops = op_targets(graphs[0].gm)
        assert ("aten.index_add_.default" in ops) is expect_inplace, ops
        assert ("aten.index_add.default" in ops) is not expect_inplace, ops


def test_scatter_into_a_buffer_read_again_or_an_input_stays_functional():
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, idx, src):
        on_input = torch.ops.aten.index_add(x, 0, idx, src)        # a graph input: kept
        fresh = torch.zeros_like(x)
        kept = torch.ops.aten.index_add(fresh, 0, idx, src)        # fresh, read again: kept
        alone = torch.ops.aten.index_add(torch.zeros_like(x), 0, idx, src)  # rewritten
        return on_input, kept, fresh * 2, alone

    args = (torch.randn(4, 3), torch.tensor([0, 3]), torch.randn(2, 3))
    gm = reinplace_collectives(make_fx(fn, tracing_mode="fake")(*args), [], CompilerConfig())
    ops = op_targets(gm)
    assert ops.count("aten.index_add.default") == 2 and ops.count("aten.index_add_.default") == 1
    for a, b in zip(gm(*args), fn(*args)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
