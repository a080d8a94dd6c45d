"""The coverage check of ``benchmarks/hf_coverage.py`` on a small default set: a dense and a
MoE architecture from transformers' own list (config classes with a base TP plan), loaded with
``tp_plan="auto"`` on 2 gloo ranks; per mode, the compiled full forward (fullgraph, one graph,
logits within 1e-4 of eager) and the compiled static-cache decode (one graph, tokens equal to
eager) on every rank; one layer to keep it short. The full sweep is the script itself.
"""
import os
import sys

import pytest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

import hf_coverage  # noqa: E402

DEFAULT_SET = ["qwen3", "qwen3_moe"]


def test_architectures_come_from_transformers():
    found = hf_coverage.architectures()
    assert len(found) >= 20
    for arch in ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"):
        assert arch in found
    assert hf_coverage.kind("qwen3_moe") == "MoE" and hf_coverage.kind("qwen3") == "dense"


@pytest.mark.parametrize("arch", DEFAULT_SET)
def test_coverage_default_set(ranks2, tmp_path, arch):
    row = hf_coverage.run_arch(ranks2, arch, hf_coverage.MODES, str(tmp_path), timeout=300,
                               num_hidden_layers=1)
    assert "excluded" not in row, row
    assert "note" not in row, row  # the decode is checked too
    assert row["modes"] == {m: "ok" for m in hf_coverage.MODES}, row


def test_table_names_the_error():
    rows = {"a": {"modes": {"m1": "ok", "m2": "no GE converter: aten.sort.default"}},
            "b": {"excluded": "transformers TP/eager: RuntimeError: x"}}
    text = hf_coverage.render(rows, {"a": "dense", "b": "MoE"}, ["m1", "m2"], markdown=True)
    assert "| a | dense | ok | no GE converter: aten.sort.default |" in text
    assert "excluded: transformers TP/eager: RuntimeError: x" in text
    assert hf_coverage.summary(rows, ["m1", "m2"]).startswith("2 architectures, 1 excluded")
