"""debug.fx_summary: a csv of each graph's ops with GE support; skip_compile runs eagerly."""
import csv
import glob
import os

import pytest
import torch

import torchair_dist
import torchair_dist.pipeline.route as compiler_mod


def f(x):
    return torch.special.bessel_j0(torch.relu(x) + 1) + torch.relu(x)


def _compile(mode, skip_compile):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.debug.fx_summary.type = "csv"
    cfg.debug.fx_summary.skip_compile = skip_compile
    return torch.compile(f, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


@pytest.mark.parametrize("mode", ["max-autotune", "npugraph_ex"])
def test_summary_rows_and_skip_compile_runs_eagerly(mode, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def no_backend(mode):
        raise AssertionError("skip_compile must not reach the backend")

    monkeypatch.setattr(compiler_mod, "backend_for_mode", no_backend)
    x = torch.randn(8)
    assert torch.equal(_compile(mode, True)(x), f(x))
    files = glob.glob(str(tmp_path / f"fx_summary_graph_*_rank_0_pid_{os.getpid()}_ts_*.csv"))
    assert len(files) == 1
    rows = {r["target"]: r for r in csv.DictReader(open(files[0]))}
    assert rows["aten.relu.default"]["count"] == "2"  # relu(x) appears twice in f
    assert rows["aten.relu.default"]["ge_converter"] == "yes"
    assert rows["aten.relu.default"]["example_input"] == "(float32[8])"
    assert rows["aten.special_bessel_j0.default"]["ge_converter"] == "no"
    assert rows["aten.add.Tensor"]["count"] == "2" and rows["aten.add.Tensor"]["kind"] == "aten"


def test_without_skip_compile_the_backend_still_compiles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = torch.randn(8)
    with compiler_mod.record_graphs() as graphs:
        assert torch.equal(_compile("npugraph_ex", False)(x), f(x))
    assert len(graphs) == 1
    assert len(glob.glob(str(tmp_path / "fx_summary_*.csv"))) == 1
