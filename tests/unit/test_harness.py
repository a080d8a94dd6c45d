"""The multicard rank harness itself: results, a raising rank, a dead rank, a hang."""
import os
import sys
import time

import pytest

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multicard"))

from harness import RankFailure, RankPool  # noqa: E402


def _sum_ranks(rank, world_size, scale):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return rank, world_size, t.item() * scale, torch.get_num_threads(), \
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]


def _raise_on_rank1(rank, world_size):
    if rank == 1:
        raise ValueError("boom on rank 1")
    return rank


def _exit_on_rank1(rank, world_size):
    import torch
    import torch.distributed as dist

    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(1))  # the peer is gone: gloo must fail, not hang
    return rank


def _hang_on_rank1(rank, world_size):
    import torch
    import torch.distributed as dist

    if rank == 1:
        while True:
            time.sleep(0.05)  # a stuck rank (e.g. waiting on the wrong collective)
    dist.all_reduce(torch.ones(1))  # rank 0 waits for rank 1 forever
    return rank


@pytest.fixture(scope="module")
def pool():
    p = RankPool(2)
    yield p
    p.shutdown()


def test_results_per_rank_and_reuse(pool):
    out = pool.run(_sum_ranks, 2.0)
    assert out == [(0, 2, 2.0, 1, "0"), (1, 2, 2.0, 1, "0")]
    gen = pool.generation
    assert pool.run(_sum_ranks, 1.0)[1][2] == 1.0
    assert pool.generation == gen  # the same processes served both calls


def test_raising_rank_reports_its_traceback_then_pool_recovers(pool):
    with pytest.raises(RankFailure) as info:
        pool.run(_raise_on_rank1, timeout=60)
    msg = str(info.value)
    assert "ValueError: boom on rank 1" in msg and "_raise_on_rank1" in msg
    assert info.value.per_rank[1] == "raised"
    gen = pool.generation
    assert pool.run(_sum_ranks, 1.0)[0][2] == 1.0  # respawned for the next case
    assert pool.generation == gen + 1


def test_dead_rank_is_reported_and_peer_fails(pool):
    with pytest.raises(RankFailure) as info:
        pool.run(_exit_on_rank1, timeout=60, failure_grace=30)
    assert info.value.per_rank[1] == "died (exit code 3)"
    # the survivor got an error from gloo (connection closed) instead of hanging
    assert info.value.per_rank[0] in ("raised", "hung")


def test_hang_reports_every_rank_stack_within_timeout(pool):
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        pool.run(_hang_on_rank1, timeout=6)
    elapsed = time.monotonic() - t0
    assert elapsed < 6 + 15, elapsed
    msg = str(info.value)
    assert info.value.per_rank == {0: "hung", 1: "hung"}
    # each rank's faulthandler dump names the function it is stuck in
    assert msg.count("_hang_on_rank1") >= 2, msg
    assert "all_reduce" in info.value.errors[0], info.value.errors[0]
    assert "_hang_on_rank1" in info.value.errors[1]
