"""Platform patches: each one named, applied once per process, with a visible effect."""
import subprocess
import sys
import textwrap

import pytest
import torch

from torchair_dist.pipeline import torch_patches as patches
from torchair_dist.errors import ConfigError


def test_table_names_are_unique_and_documented():
    names = [p.name for p in patches.PATCHES]
    assert len(names) == len(set(names))
    assert all(p.doc for p in patches.PATCHES)


def test_applied_once(monkeypatch):
    calls = []
    monkeypatch.setattr(patches, "PATCHES", [patches.Patch("probe", lambda: calls.append(1), "d")])
    monkeypatch.setattr(patches, "_applied", {})
    assert patches.apply_platform_patches() == ["probe"]
    assert patches.apply_platform_patches() == []
    assert calls == [1]


def test_enable_p2p_compilation(monkeypatch):
    from torchair_dist.base.torch_support import p2p_compilation_switch

    if not p2p_compilation_switch():  # torch 2.11: no switch; the patch sets nothing
        patches.patch_enable_p2p_compilation()
        assert not hasattr(torch._dynamo.config, "enable_p2p_compilation")
        return
    monkeypatch.setattr(torch._dynamo.config, "enable_p2p_compilation", False)
    patches.patch_enable_p2p_compilation()
    assert torch._dynamo.config.enable_p2p_compilation is True


def test_break_graph_ops_splits_the_graph():
    # A fresh process: disallow_in_graph is process-global.
    code = textwrap.dedent("""
        import os, torch
        os.environ["TORCHAIR_DIST_BREAK_GRAPH_OPS"] = "torch.nn.functional.gelu"
        from torchair_dist.pipeline.torch_patches import patch_break_graph_ops
        patch_break_graph_ops()
        graphs = []
        def count(gm, inputs):
            graphs.append(gm)
            return gm.forward
        f = torch.compile(lambda x: torch.nn.functional.gelu(x + 1) * 2, backend=count)
        x = torch.randn(4)
        assert torch.equal(f(x), torch.nn.functional.gelu(x + 1) * 2)
        print(len(graphs))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "2"


def test_break_graph_ops_names_a_missing_callable():
    with pytest.raises(ConfigError, match="torch.nn.functional.nonexistent"):
        patches.resolve_qualname("torch.nn.functional.nonexistent")


def test_decomposition_patches_decompose_vector_norm():
    table = patches.decomposition_patches()
    assert torch.ops.aten.linalg_vector_norm.default in table
