"""Common passes and graph validation, on AOT graphs recorded before/after."""
import operator

import pytest
import torch
import torch.fx

import torchair_dist
from torchair_dist import CompilerConfig
from torchair_dist.pipeline import route as compiler
from torchair_dist.errors import GraphValidationError
from torchair_dist.passes.common import remove_noop_ops, view_to_reshape
from torchair_dist.passes.graph_info import mutated_input_indices, op_targets
from torchair_dist.passes.validate import validate_graph

aten = torch.ops.aten


def aot_graph(fn, *inputs):
    """The AOT inference graph of ``fn`` as our real pipeline produces it, before our passes
    (recorded after the first AOT-pass stage: a user pre-pass that changes nothing)."""
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.post_grad_custom_pre_pass = lambda gm, example_inputs, config: None
    with compiler.record_graphs(after="custom_pre_pass") as graphs:
        torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                      fullgraph=True)(*inputs)
    torch._dynamo.reset()
    return graphs[0]


def run(gm, *inputs):
    return gm(*inputs)


def test_remove_noop_ops_removes_identity_views_only():
    def f(x):
        a = x.view(4, 4) + 1          # view of the same shape: no-op
        b = a[:, 0:4]                 # full slice: no-op
        return a.view(2, 8) * 2, b.expand(4, 4) * 3  # real reshape, identity expand

    x = torch.randn(4, 4)
    gm = aot_graph(f, x)
    before = op_targets(gm)
    out = remove_noop_ops(gm, [x], CompilerConfig())
    after = op_targets(out)
    assert len(after) < len(before)
    assert "aten.slice.Tensor" not in after and "aten.expand.default" not in after
    assert "aten.view.default" in after  # the (2, 8) view stays
    got, want = run(out, x), f(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_remove_noop_ops_keeps_outputs_and_can_be_switched_off(run_stage):
    def f(x):
        return x.view(3)

    x = torch.randn(3)
    gm = aot_graph(f, x)
    n = len(op_targets(gm))
    assert len(op_targets(remove_noop_ops(gm, [x], CompilerConfig()))) == n
    cfg = CompilerConfig()
    cfg.experimental_config.remove_noop_ops = False
    gm2 = aot_graph(lambda x: x.view(3) + 1, x)
    before = op_targets(gm2)
    assert op_targets(run_stage("remove_noop_ops", cfg, gm2, [x], cfg)) == before
    cfg.experimental_config.remove_noop_ops = True
    assert len(op_targets(run_stage("remove_noop_ops", cfg, gm2, [x], cfg))) < len(before)


def test_view_to_reshape():
    x = torch.randn(2, 6)
    gm = view_to_reshape(aot_graph(lambda x: x.view(3, 4) + 1, x), [x], CompilerConfig())
    assert "aten.view.default" not in op_targets(gm)
    assert "aten.reshape.default" in op_targets(gm)
    assert torch.equal(run(gm, x)[0], x.view(3, 4) + 1)


def test_collapse_view_chains_only_with_npu_fx_pass():
    x = torch.randn(2, 6)
    f = lambda x: (x + 1).reshape(3, 4).reshape(4, 3).reshape(12) * 2  # noqa: E731

    def after_collapse(cfg):
        cfg.mode = "npugraph_ex"
        with compiler.record_graphs(after="collapse_view_chains") as graphs:
            out = torch.compile(f, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                                fullgraph=True)(x)
        torch._dynamo.reset()
        assert torch.equal(out, f(x))
        return graphs

    cfg = CompilerConfig()
    assert after_collapse(cfg) == []  # the stage did not run: its gate is off
    cfg.experimental_config.npu_fx_pass = True
    (gm2,) = after_collapse(cfg)
    assert op_targets(gm2).count("aten.reshape.default") == 1
    assert torch.equal(run(gm2, x)[0], f(x))


def test_mutated_input_indices():
    def f(a, b, c):  # Dynamo orders graph inputs by first use: a, b, c
        y = a + b
        c.mul_(2)
        return y

    gm = aot_graph(f, torch.ones(2), torch.ones(2), torch.ones(2))
    assert mutated_input_indices(gm) == [2]


def test_validate_graph_names_a_foreign_call():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(print, (x,))
    g.output(y)
    with pytest.raises(GraphValidationError, match="print"):
        validate_graph(torch.fx.GraphModule(torch.nn.Module(), g))


def test_validate_graph_accepts_aten_and_size_arithmetic():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    s = g.call_function(aten.sym_size.int, (x, 0))
    s2 = g.call_function(operator.mul, (s, 2))
    y = g.call_function(aten.mul.Tensor, (x, s2))
    g.output(y)
    validate_graph(torch.fx.GraphModule(torch.nn.Module(), g))


def test_validate_graph_rejects_late_placeholders():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(aten.neg.default, (x,))
    z = g.placeholder("z")
    g.output((y, z))
    with pytest.raises(GraphValidationError, match="placeholder z"):
        validate_graph(torch.fx.GraphModule(torch.nn.Module(), g))


def test_remove_copy_into_empty_drops_copies_of_fresh_results_only():
    from torchair_dist.passes.common import remove_copy_into_empty

    def f(x, y):
        a = torch.empty_like(x)
        a.copy_(x * 2)                 # fresh result into an unwritten buffer: removable
        b = torch.empty_like(x)
        b.copy_(y)                     # copy of a graph input: must stay (no aliasing)
        c = torch.empty_like(x.t())    # other strides than the source: must stay
        c.copy_(x + 1)
        return a + 1, b, c

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    gm = aot_graph(f, x, y)
    assert op_targets(gm).count("aten.copy.default") == 3
    out = remove_copy_into_empty(gm, [x, y], CompilerConfig())
    assert op_targets(out).count("aten.copy.default") == 2
    got, want = run(out, x, y), f(x, y)
    for g, w in zip(got, want):
        assert torch.equal(g, w) and g.stride() == w.stride()
    assert got[1].data_ptr() != y.data_ptr()
