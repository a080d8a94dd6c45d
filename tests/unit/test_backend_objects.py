"""A mode's backend is one object with ``compile(ctx)`` and ``load(entry, ctx)``; a fresh compile
goes through ``compile``, a compile-cache warm start through ``load``, and both runners get the
cross-rank check in the same place (``compiler.build_runner``)."""
import pytest
import torch
import torch.nn as nn

import torchair_dist
from torchair_dist.pipeline import route as compiler, stages as pipeline
from torchair_dist.base.graph_context import Backend, GraphContext


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1


def test_every_mode_row_names_a_backend_object():
    for mode, row in pipeline.MODE_TABLE.items():
        backend = compiler.backend_for_mode(mode)
        assert isinstance(backend, Backend), mode
        assert type(backend).compile is not Backend.compile, f"{mode}: compile not implemented"
    assert compiler.backend_for_mode("npugraph_ex") is compiler.backend_for_mode("reduce-overhead")
    assert compiler.backend_for_mode("max-autotune") is not compiler.backend_for_mode(
        "npugraph_ex")


def test_base_load_compiles_the_rebuilt_graph():
    seen = []

    class Spy(Backend):
        name = "spy"

        def compile(self, ctx):
            seen.append(ctx)
            return "runner"

    ctx = GraphContext(gm=None, example_inputs=[], config=None, static_input_indices=[],
                       mutated_input_indices=[], graph_name="g")
    assert Spy().load({"graph": {}}, ctx) == "runner" and seen == [ctx]
    with pytest.raises(NotImplementedError, match="backend 'backend'"):
        Backend().compile(ctx)


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_cold_compile_uses_compile_and_warm_start_uses_load(mode, tmp_path, monkeypatch):
    backend = compiler.backend_for_mode(mode)
    calls = []
    real_compile, real_load = backend.compile, backend.load

    def spy_compile(ctx):
        calls.append(("compile", ctx.graph_name))
        return real_compile(ctx)

    def spy_load(entry, ctx):
        calls.append(("load", ctx.graph_name))
        assert isinstance(entry, dict) and "graph" in entry and "signature" in entry
        assert isinstance(ctx.gm, torch.fx.GraphModule)
        return real_load(entry, ctx)

    guarded = []
    from torchair_dist.collectives import consistency

    real_guard = consistency.guard_first_run

    def spy_guard(runner, ctx):
        guarded.append(ctx.graph_name)
        return real_guard(runner, ctx)

    monkeypatch.setattr(backend, "compile", spy_compile)
    monkeypatch.setattr(backend, "load", spy_load)
    monkeypatch.setattr(consistency, "guard_first_run", spy_guard)
    monkeypatch.setattr(pipeline, "_resolved", {})  # the table resolves the spy

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    net = Net().eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        ref = net(x)
    cold = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
    assert torch.equal(cold(x), ref) and cold.last_source == "compiled"
    assert [c[0] for c in calls] == ["compile"]
    warm = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
    assert torch.equal(warm(x), ref) and warm.last_source == "cache" and not warm.rejections
    # the default load compiles the rebuilt graph (no Dynamo/AOT run): load, then compile
    assert [c[0] for c in calls] == ["compile", "load", "compile"]
    assert calls[1][1].startswith("cached_") and calls[2][1] == calls[1][1]
    assert guarded == [calls[0][1], calls[1][1]]  # both paths checked, in one place
