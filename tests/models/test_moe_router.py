"""A hand-written MoE router (top-1 routing into a fixed-capacity buffer with ``one_hot`` +
``cumsum``, equal-split ``all_to_all_single`` dispatch/combine) compiled with
``fullgraph=True`` in every mode on 2 ranks: equal to eager, and eager equal to a
token-by-token single-process reference. ``one_hot`` brings runtime asserts
(``aten._assert_async``) into the graph: max-autotune drops them (lowering.py) and converts
the rest.

Tolerance: compiled vs eager ``ATOL = 1e-5``; eager vs reference ``REF_ATOL = 1e-5``.
"""
import pytest
from model_cases import MODES, check_results, router_case

ATOL, REF_ATOL = 1e-5, 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_capacity_router_two_ranks(ranks2, mode):
    results = ranks2.run(router_case, mode, timeout=180)
    check_results(results, ATOL, REF_ATOL, "router")
    assert any(r["dropped"] > 0 for r in results)  # the capacity rule is exercised
    for r in results:
        ops = r["graphs"][0]
        assert sum("all_to_all" in op for op in ops) == 2
        assert any("cumsum" in op for op in ops)
