"""GE/AOE/dump options reach the CANN runtime as TorchAir's session and graph options.

A test double stands in for TorchAir's executor binding (``torchair.core._backend``): it records
what ``initialize_graph_engine`` and ``TorchNpuGraph.load`` receive and runs the graph on the
reference executor, so the compiled result is still checked against eager.
"""
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist.pipeline import option_support
from torchair_dist import platform as td_platform
from torchair_dist.backends.ge.runtime import cann, cann_options
from torchair_dist.cpu.ge_reference import ReferenceRuntime


class FakeGeBinding:
    """Records the options; runs the graph on the reference executor."""

    def __init__(self):
        self.session_options = []
        self.graph_options = []
        binding = self

        class TorchNpuGraph:
            def load(self, model_bytes, options):
                binding.graph_options.append(dict(options))
                self.ref = ReferenceRuntime(torch.device("cpu"))
                self.ref.load(model_bytes)

            def compile(self):
                pass

            def run(self, inputs):
                return self.ref.run(inputs)

        self.TorchNpuGraph = TorchNpuGraph

    def initialize_graph_engine(self, options):
        self.session_options.append(dict(options))


@pytest.fixture
def fake_npu(monkeypatch):
    binding = FakeGeBinding()
    monkeypatch.setattr(cann, "_require_cann", lambda: binding)
    npu = td_platform.NpuPlatform("npu", "npu", "hccl", None, None, None)
    monkeypatch.setattr(td_platform, "current", lambda: npu)
    return binding


def test_ge_config_maps_to_torchair_keys(tmp_path):
    cfg = torchair_dist.CompilerConfig()
    cfg.ge_config.enable_single_stream = True
    cfg.ge_config.oo_constant_folding = False
    cfg.ge_config.aicore_num = "24|48"
    cfg.experimental_config.topology_sorting_strategy = "BFS"
    cfg.experimental_config.frozen_parameter = True
    cfg.dump_config.enable_dump = True
    cfg.dump_config.dump_path = str(tmp_path)
    cfg.dump_config.dump_step = "0|2"
    session, graph = cann_options.cann_options(cfg, rank=1, world=2)
    assert session["ge.enableSingleStream"] == "true"
    assert session["ge.oo.constantFolding"] == "false"
    assert "ge.oo.deadCodeElimination" not in session  # None: GE decides
    assert session["ge.aicoreNum"] == "24|48"
    assert session["ge.exec.enableDump"] == "1"
    assert session["ge.exec.dumpPath"] == str(tmp_path / "worldsize2_global_rank1")
    assert session["ge.exec.dumpStep"] == "0|2"
    assert graph["ge.topoSortingMode"] == "0" and graph["frozenInput"] == "1"


def test_oo_level_o1_forces_stable_rdfs():
    cfg = torchair_dist.CompilerConfig()
    cfg.experimental_config.topology_sorting_strategy = "BFS"
    cfg.ge_config.oo_level = "O1"
    _, graph = cann_options.cann_options(cfg)
    assert graph["ge.topoSortingMode"] == "3"  # ge_config is merged last, as in TorchAir


def test_compile_hands_the_options_to_the_runtime(fake_npu, tmp_path):
    cfg = torchair_dist.CompilerConfig()
    cfg.ge_config.enable_single_stream = True
    cfg.experimental_config.topology_sorting_strategy = "RDFS"
    cfg.aoe_config.aoe_mode = "2"
    cfg.aoe_config.work_path = str(tmp_path)

    def f(x):
        return torch.relu(x) * 3

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = torchair_dist.get_npu_backend(compiler_config=cfg)
        x = torch.randn(4, 4)
        out = torch.compile(f, backend=backend, fullgraph=True)(x)
    assert torch.equal(out, f(x))
    assert not [w for w in caught if "do not take effect" in str(w.message)]
    assert len(fake_npu.session_options) == 1 and len(fake_npu.graph_options) == 1
    session, graph = fake_npu.session_options[0], fake_npu.graph_options[0]
    assert session["ge.enableSingleStream"] == "true"
    assert session["ge.jobType"] == "2" and session["ge.tuningPath"] == str(tmp_path)
    assert graph["ge.topoSortingMode"] == "2"


def test_the_same_options_warn_on_cpu():
    cfg = torchair_dist.CompilerConfig()
    cfg.ge_config.enable_single_stream = True
    found = option_support.ineffective_options(cfg, platform="cpu")
    assert found["ge_config.enable_single_stream"][1] == "only on npu"
    assert "ge_config.enable_single_stream" not in option_support.ineffective_options(cfg, "npu")
