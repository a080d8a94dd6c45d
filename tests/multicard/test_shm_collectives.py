"""``distributed_config.cpu_shm_collectives`` on 2 and 4 gloo ranks: the benchmark's MoE block
(fixed-capacity dispatch: equal all_to_all pieces, and a TP shared expert's all_reduce) runs its
collectives through shared memory in every mode, overlap on and off, static and dynamic, equal to
eager on every rank; a group whose rank cannot use the transport stays on gloo on every rank, with
one warning naming that rank and why.

Tolerance: 2 ranks exact (the shared-memory sum of two slots is gloo's); 4 ranks 1e-5 (gloo's ring
adds in another order; every rank still holds the same bits).
"""
import os
import sys

import pytest

_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")


def _moe_case(rank, world, mode, overlap, dynamic):
    import torch

    import torchair_dist
    from torchair_dist.collectives import groups
    from torchair_dist.cpu import shm

    if _BENCH not in sys.path:
        sys.path.insert(0, _BENCH)
    from workloads import MoEBlock

    torch.set_num_threads(1)
    torch._dynamo.reset()
    moe = MoEBlock(rank, world, tokens=32, hidden=16, ffn=16, shared_ffn=32)
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.distributed_config.overlap_collectives = overlap
    cfg.distributed_config.cpu_shm_collectives = True
    compiled = torch.compile(moe, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                             fullgraph=True, dynamic=dynamic)
    world_group = groups.stable_name_of(None)
    before = shm.exchanges(world_group) or 0
    diffs = []
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(32, 16, generator=torch.Generator().manual_seed(rank * 10 + step))
            diffs.append((compiled(x) - moe(x)).abs().max().item())
    return {"diffs": diffs, "exchanges": (shm.exchanges(world_group) or 0) - before}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_moe_block_over_shared_memory_two_ranks(ranks2, mode, overlap, dynamic):
    results = ranks2.run(_moe_case, mode, overlap, dynamic, timeout=240)
    for rank, r in enumerate(results):
        assert r["diffs"] == [0.0] * 3, f"rank {rank}: {r['diffs']}"
        # 3 calls x (dispatch + all_reduce + combine), one exchange each at this size
        assert r["exchanges"] == 9, f"rank {rank}: {r['exchanges']} exchanges"


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_moe_block_over_shared_memory_four_ranks(ranks4, mode):
    results = ranks4.run(_moe_case, mode, True, False, timeout=300)
    for rank, r in enumerate(results):
        assert max(r["diffs"]) <= 1e-5, f"rank {rank}: {r['diffs']}"
        assert r["exchanges"] == 9, f"rank {rank}: {r['exchanges']} exchanges"


def _fallback_case(rank, world, mode, refusing_rank):
    import warnings

    import torch
    import torch.distributed as dist

    import torchair_dist
    from torchair_dist.cpu import shm, shm_segment

    torch._dynamo.reset()
    shm.reset()   # every rank sets the group's channel up again (GE resolves a group by ranks)
    pg = dist.new_group(list(range(world)))
    if rank == refusing_rank:
        shm_segment.unavailable_reason = lambda: "no shared memory in this test"

    def tp_sum(x):
        y = x * 2
        dist.all_reduce(y, group=pg)
        return y + 1

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.distributed_config.cpu_shm_collectives = True
    x = torch.arange(8, dtype=torch.float32) + rank
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(tp_sum, backend=torchair_dist.get_npu_backend(
                compiler_config=cfg), fullgraph=True)(x)
    finally:
        shm_segment.unavailable_reason = shm_segment._unavailable_reason
    messages = [str(w.message) for w in caught if "stays on gloo" in str(w.message)]
    from torchair_dist.collectives import groups
    result = {"diff": (out - tp_sum(x)).abs().max().item(), "warnings": messages,
              "exchanges": shm.exchanges(groups.stable_name_of(pg))}
    shm.reset()   # later tests in these processes set channels up again
    return result


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_a_rank_that_cannot_map_the_segment_keeps_the_group_on_gloo(ranks2, mode):
    results = ranks2.run(_fallback_case, mode, 1, timeout=120)
    for rank, r in enumerate(results):
        assert r["diff"] == 0.0
        assert r["exchanges"] is None, f"rank {rank} used the transport"
        assert len(r["warnings"]) == 1, r["warnings"]
        assert "rank 1: no shared memory in this test" in r["warnings"][0]
