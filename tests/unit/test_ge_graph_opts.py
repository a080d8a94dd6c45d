"""ge_config.oo_constant_folding / oo_dead_code_elimination take effect on the graph GE gets."""
import pytest
import torch

import torchair_dist
from torchair_dist.pipeline import route as compiler
from torchair_dist.passes.graph_info import op_targets


def with_constants(x):
    table = torch.arange(8, dtype=torch.float32) * 2 + 1  # constant: foldable
    return torch.relu(x * table)


def _compile(fn, **options):
    cfg = torchair_dist.CompilerConfig()
    for path, value in options.items():
        cfg.option(path).set(value)
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


@pytest.mark.parametrize("fold", [None, False, True])
def test_constant_folding(fold):
    fn = _compile(with_constants, **{"ge_config.oo_constant_folding": fold})
    x = torch.randn(8)
    with compiler.record_graphs() as graphs:
        out = fn(x)
    torch.testing.assert_close(out, with_constants(x))
    gm = graphs[0].gm
    ops = op_targets(gm)
    consts = [n for n in gm.graph.nodes if n.op == "get_attr"]
    if fold:
        assert "aten.arange.start_step" not in ops and "aten.arange.default" not in ops
        assert len(consts) == 1
        assert torch.equal(getattr(gm, consts[0].target), torch.arange(8.0) * 2 + 1)
        assert ops == ["aten.mul.Tensor", "aten.relu.default"]  # what reads x stays
    else:
        assert any(op.startswith("aten.arange") for op in ops) and not consts


def _add_dead_sin(graph):
    x = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_after(x):
        dead = graph.call_function(torch.ops.aten.sin.default, (x,))
    dead.meta["val"] = x.meta.get("val")


@pytest.mark.parametrize("dce", [False, True])
def test_dead_code_elimination(dce):
    fn = _compile(lambda x: x * 3, **{"ge_config.oo_dead_code_elimination": dce,
                                      "post_grad_custom_pre_pass": _add_dead_sin})
    x = torch.randn(4)
    with compiler.record_graphs() as graphs:
        assert torch.equal(fn(x), x * 3)
    assert ("aten.sin.default" in op_targets(graphs[0].gm)) is (not dce)
