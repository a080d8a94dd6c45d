"""Hugging Face ``LlamaForCausalLM`` (tiny random config) sharded with ``parallelize_module``
(Colwise q/k/v/gate/up, Rowwise o/down per layer) on a 2-rank CPU mesh, compiled per rank with
``fullgraph=True``: logits equal eager within ATOL, exactly one graph per rank.

Attention: HF's default (``sdpa``, i.e. ``aten._scaled_dot_product_flash_attention_for_cpu``)
in every mode, and HF's ``eager`` attention (matmul + softmax) once more in max-autotune.

Tolerance: compiled vs sharded eager ``ATOL = 1e-5`` (the same aten ops in the same order; 0.0
observed), sharded eager vs the unsharded model ``REF_ATOL = 1e-4`` (all_reduce summation order).
"""
import pytest
from model_cases import MODES, check_results, llama_case

ATOL, REF_ATOL = 1e-5, 1e-4


@pytest.mark.parametrize("mode", MODES)
def test_llama_tp_two_ranks(ranks2, mode):
    results = ranks2.run(llama_case, mode, timeout=240)
    check_results(results, ATOL, REF_ATOL, "sharded")
    for r in results:
        assert sum("all_reduce" in op for op in r["graphs"][0]) == 4  # o_proj + down_proj x 2


def test_llama_tp_eager_attention_max_autotune(ranks2):
    results = ranks2.run(llama_case, "max-autotune", 2, 8, "eager", timeout=240)
    check_results(results, ATOL, REF_ATOL, "sharded")
