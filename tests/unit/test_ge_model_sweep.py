"""Hugging Face decoder-only architectures in ``max-autotune`` (GE on the reference executor):
tiny random model, compiled forward and static-KV-cache decode vs eager (logits within 1e-4,
cache buffers updated in place). By default a dense and an MoE model; every architecture with a
base TP plan when ``TORCHAIR_DIST_GE_SWEEP=1`` (the same as ``python benchmarks/ge_model_sweep.py``).
"""
import os
import sys

import pytest

from test_ge_common import ge_validate  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
pytest.importorskip("transformers")
import ge_model_sweep  # noqa: E402

DEFAULT = ["llama", "qwen3_moe"]
ARCHS = ge_model_sweep.architectures() if os.environ.get("TORCHAIR_DIST_GE_SWEEP") == "1" else DEFAULT


@pytest.mark.parametrize("arch", ARCHS)
def test_architecture_forward_and_decode_match_eager(arch):
    result = ge_model_sweep.sweep_one(arch)
    if all(v.startswith(ge_model_sweep.EXCLUDED) for v in result.values()):
        pytest.skip(f"{arch} does not run eagerly / under Dynamo from a tiny config: {result}")
    assert all(v == "ok" or v.startswith(ge_model_sweep.EXCLUDED) for v in result.values()), result


def test_the_sweep_covers_at_least_20_architectures_with_a_tp_plan():
    archs = ge_model_sweep.architectures()
    assert len(archs) >= 20
    assert {"llama", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "gemma3_text"} <= set(archs)
