"""2-stage pipeline over ``dist.send`` / ``dist.recv`` (stage 0 -> stage 1 -> back to stage 0),
compiled per rank with ``fullgraph=True`` on 2 ranks: equal to eager within ATOL, one graph per
rank, the p2p ops inside it.

Tolerance: compiled vs eager ``ATOL = 1e-6`` (0.0 observed); vs the single-process reference
``REF_ATOL = 1e-6``.
"""
import pytest
from model_cases import pipeline_case

ATOL, REF_ATOL = 1e-6, 1e-6


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead", "max-autotune"])
def test_pipeline_send_recv_two_ranks(ranks2, mode):
    results = ranks2.run(pipeline_case, mode, timeout=180)
    for rank, r in enumerate(results):
        assert r["diff"] <= ATOL, f"rank {rank}: compiled vs eager {r['diff']}"
        assert r["ref_diff"] <= REF_ATOL, f"rank {rank}: pipeline vs reference {r['ref_diff']}"
        assert len(r["graphs"]) == 1, f"rank {rank} compiled {len(r['graphs'])} graphs"
        ops = r["graphs"][0]
        assert any("send" in op for op in ops) and any("recv" in op for op in ops), ops
