"""2-stage pipeline over ``dist.send`` / ``dist.recv`` (stage 0 -> stage 1 -> back to stage 0),
compiled per rank with ``fullgraph=True`` on 2 ranks: equal to eager within ATOL, one graph per
rank, the p2p ops inside it.

Tolerance: compiled vs eager ``ATOL = 1e-6`` (0.0 observed); vs the single-process reference
``REF_ATOL = 1e-6``.
"""
import pytest
from model_cases import MODES, check_results, pipeline_case

ATOL, REF_ATOL = 1e-6, 1e-6


@pytest.mark.parametrize("mode", MODES)
def test_pipeline_send_recv_two_ranks(ranks2, mode):
    results = ranks2.run(pipeline_case, mode, timeout=180)
    check_results(results, ATOL, REF_ATOL, "pipeline")
    for r in results:
        ops = r["graphs"][0]
        assert any("send" in op for op in ops) and any("recv" in op for op in ops), ops
