"""MoE block with expert parallelism (one expert per rank, expert-choice routing with uneven
static token counts) over ``dist.all_to_all_single`` dispatch + combine, compiled per rank with
``fullgraph=True`` on 2 ranks: equal to eager within ATOL, one graph per rank.

Tolerance: compiled vs eager ``ATOL = 1e-5`` (0.0 observed); eager vs the single-process
reference ``REF_ATOL = 1e-5``.
"""
import pytest
from model_cases import MODES, check_results, moe_case

ATOL, REF_ATOL = 1e-5, 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_moe_expert_parallel_two_ranks(ranks2, mode):
    results = ranks2.run(moe_case, mode, timeout=180)
    check_results(results, ATOL, REF_ATOL, "EP")
    for r in results:
        assert sum("all_to_all" in op for op in r["graphs"][0]) == 2  # dispatch + combine
