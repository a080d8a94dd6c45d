"""A mode's backend is one object with ``start(ctx)``, ``load(handle, ctx)`` and ``finish(build)``
(a runner and a JSON handle); a fresh compile starts, a compile-cache warm start loads the stored
handle, and both runners get the cross-rank check in the same place (``route.build_runner``)."""
import dataclasses
import json

import pytest
import torch
import torch.nn as nn

import torchair_dist
from torchair_dist.pipeline import route as compiler, stages as pipeline
from torchair_dist.backends.interface import Backend
from torchair_dist.base.graph_context import GraphContext
from torchair_dist.errors import HandleMismatchError


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
        assert type(backend).start is not Backend.start, f"{mode}: start not implemented"
        assert type(backend).finish is not Backend.finish, f"{mode}: finish not implemented"
    assert compiler.backend_for_mode("npugraph_ex") is compiler.backend_for_mode("reduce-overhead")
    assert compiler.backend_for_mode("max-autotune") is not compiler.backend_for_mode(
        "npugraph_ex")


def test_base_load_checks_the_handle_then_starts_the_rebuilt_graph():
    seen = []

    class Spy(Backend):
        name = "spy"

        def start(self, ctx):
            seen.append(ctx)
            return "build"

    ctx = GraphContext(gm=None, example_inputs=[], config=None, static_input_indices=[],
                       mutated_input_indices=[], graph_name="g")
    spy = Spy()
    assert spy.load(spy.handle(None), ctx) == "build" and seen == [ctx]
    with pytest.raises(HandleMismatchError, match="cannot load a handle of 'ge'"):
        spy.load({"backend": "ge", "format": "fx-graph"}, ctx)
    with pytest.raises(NotImplementedError, match="backend 'backend'"):
        Backend().start(ctx)


def test_backends_hold_no_callbacks_in_graph_context():
    """GraphContext is data: no field holds a function (the route calls the backend, never the
    other way round)."""
    names = {f.name for f in dataclasses.fields(GraphContext)}
    assert "run_steps" not in names and "cache_entry" not in names
    for backend in {compiler.backend_for_mode(m) for m in pipeline.MODE_TABLE}:
        assert not hasattr(backend, "run_steps") and not hasattr(backend, "compile")


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_cold_compile_starts_and_warm_start_loads_the_handle(mode, tmp_path, monkeypatch):
    backend = compiler.backend_for_mode(mode)
    calls = []
    real_start, real_load, real_finish = backend.start, backend.load, backend.finish

    def spy_start(ctx):
        calls.append(("start", ctx.graph_name))
        return real_start(ctx)

    def spy_load(handle, ctx):
        calls.append(("load", ctx.graph_name))
        assert handle == {"backend": backend.name, "format": backend.handle_format}
        assert isinstance(ctx.gm, torch.fx.GraphModule) and ctx.handle is handle
        return real_load(handle, ctx)

    def spy_finish(build):
        compiled = real_finish(build)
        calls.append(("finish", build.ctx.graph_name))
        json.dumps(compiled.handle)  # a handle is JSON data
        return compiled

    guarded = []
    from torchair_dist.collectives import consistency

    real_guard = consistency.guard_first_run

    def spy_guard(runner, ctx):
        guarded.append(ctx.graph_name)
        return real_guard(runner, ctx)

    monkeypatch.setattr(backend, "start", spy_start)
    monkeypatch.setattr(backend, "load", spy_load)
    monkeypatch.setattr(backend, "finish", spy_finish)
    stage = pipeline.STAGES["consistency"]  # the table holds the function: put the spy there
    monkeypatch.setitem(pipeline.STAGES, "consistency", dataclasses.replace(stage, fn=spy_guard))

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    net = Net().eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        ref = net(x)
    cold = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
    assert torch.equal(cold(x), ref) and cold.last_source == "compiled"
    assert [c[0] for c in calls] == ["start", "finish"]
    warm = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path))
    assert torch.equal(warm(x), ref) and warm.last_source == "cache" and not warm.rejections
    # the default load checks the handle and builds the rebuilt graph (no Dynamo/AOT run)
    assert [c[0] for c in calls] == ["start", "finish", "load", "start", "finish"]
    assert calls[2][1].startswith("cached_") and calls[4][1] == calls[2][1]
    assert guarded == [calls[0][1], calls[2][1]]  # both paths checked, in one place
