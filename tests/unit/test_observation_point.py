"""Every observer of a compiled graph sees it at one declared point, the same in every mode: the
graph after the AOT-pass stages (``pipeline.OBSERVATION_POINT``). A backend that lowers
(GE's converter decomposes ops it has no converter for) rewrites its own copy, so
``record_graphs()``, the compile cache's recorder and the cross-rank check read the same graph
whether the mode is max-autotune or an ACL mode."""
import dataclasses
import json
import os

import pytest
import torch

import torchair_dist
from torchair_dist.cache.graph_data import graph_from_data
from torchair_dist.collectives import consistency
from torchair_dist.pipeline import route, stages as pipeline

MODES = ["max-autotune", "npugraph_ex"]


class Net(torch.nn.Module):
    def forward(self, x):
        # GE has no converter for aten.logaddexp: its lowering decomposes it
        return torch.logaddexp(x, x * 2)


def _ops(gm: torch.fx.GraphModule):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _observe(mode, tmp_path, monkeypatch):
    """What each observer saw of one compiled graph in ``mode``."""
    seen = {}
    real_guard = consistency.guard_first_run

    def spy_guard(runner, ctx):  # the cross-rank check reads ctx.gm when it wraps the runner
        seen["consistency"] = _ops(ctx.gm)
        return real_guard(runner, ctx)

    stage = pipeline.STAGES["consistency"]  # the table holds the function: put the spy there
    monkeypatch.setitem(pipeline.STAGES, "consistency", dataclasses.replace(stage, fn=spy_guard))
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    net = Net()
    x = torch.rand(4) + 0.5
    directory = tmp_path / mode
    with route.record_graphs(after=pipeline.OBSERVATION_POINT) as last_pass, \
            route.record_graphs() as graphs, torch.no_grad():
        fn = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(directory))
        torch.testing.assert_close(fn(x), torch.logaddexp(x, x * 2))
        torch.testing.assert_close(fn(x), torch.logaddexp(x, x * 2))
    (ctx,) = graphs
    seen["record_graphs"] = _ops(ctx.gm)
    seen["after_last_pass"] = _ops(last_pass[0])
    root = fn.directory()
    (entry,) = [f for f in os.listdir(root) if f.startswith("entry-")]
    with open(os.path.join(root, entry)) as f:
        seen["cache"] = _ops(graph_from_data(json.load(f)["graph"]))
    return seen


def test_observers_see_the_declared_point_in_every_mode(tmp_path, monkeypatch):
    by_mode = {mode: _observe(mode, tmp_path, monkeypatch) for mode in MODES}
    for mode, seen in by_mode.items():
        assert set(seen) == {"consistency", "record_graphs", "after_last_pass", "cache"}
        assert len({tuple(v) for v in seen.values()}) == 1, (mode, seen)
        assert "aten.logaddexp.default" in seen["record_graphs"], (mode, seen)
    assert by_mode["max-autotune"] == by_mode["npugraph_ex"]


def test_the_observation_point_is_the_last_aot_pass_of_every_row():
    for mode in pipeline.MODE_TABLE:
        passes = [s.name for s in pipeline.stages_of(mode) if s.level == "aot-pass"]
        assert passes[-1] == pipeline.OBSERVATION_POINT, mode


@pytest.mark.parametrize("mode", MODES)
def test_backend_steps_leave_the_graph_they_were_given(mode):
    """Every backend step that rewrites a graph rewrites its own copy."""
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with route.record_graphs() as graphs:
        torch.compile(lambda t: torch.logaddexp(t, t * 2),
                      backend=torchair_dist.get_npu_backend(compiler_config=cfg))(torch.ones(3))
    (ctx,) = graphs
    code = ctx.gm.code
    route.build_runner(ctx).runner([torch.ones(3)])
    assert ctx.gm.code == code and "logaddexp" in code
