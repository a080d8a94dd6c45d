"""Cross-rank consistency check and fault handling on 2 gloo ranks.

* a rank taking another branch with a different collective -> CollectiveMismatchError on BOTH
  ranks naming the first divergent collective and what each rank had;
* an unmatched send/recv pair (different shapes) -> the same, on both ranks;
* ranks declaring other capture sizes -> the same, naming each rank's sizes;
* a rank whose graph has no collectives -> the others fail within consistency_timeout, naming it;
* the check switched off -> no store traffic; its cost on a 2-rank compile is measured;
* a killed rank / a stopped rank -> the survivor gets CollectiveFaultError within the
  process-group timeout, never a hang.
"""
import os
import signal
import time

import pytest

from collective_cases import compile_for
from harness import RankFailure

PG_TIMEOUT_S = 8  # the fault pool's process-group timeout (gloo per-op timeout)


def _compile(fn, **fields):
    return compile_for(fn, "npugraph_ex", False, [], [], **fields)


def _expect_error(fn, *args, **fields):
    import torch

    from torchair_dist.errors import TorchairDistError

    torch._dynamo.reset()
    compiled = _compile(fn, **fields)
    t0 = time.monotonic()
    try:
        compiled(*args)
    except TorchairDistError as exc:
        return type(exc).__name__, str(exc), time.monotonic() - t0
    return None, "no error", time.monotonic() - t0


def _branch_mismatch(rank, ws):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x + 1
        if rank == 1:  # rank 1 takes another branch with a different collective
            out = y.new_empty((ws * 4, 3))
            dist.all_gather_into_tensor(out, y)
            return out
        dist.all_reduce(y)
        return y
    return _expect_error(fn, torch.ones(4, 3), **{"distributed_config.consistency_timeout": 20})


def test_branch_mismatch_raises_on_every_rank(ranks2):
    results = ranks2.run(_branch_mismatch, timeout=60)
    for rank, (kind, msg, seconds) in enumerate(results):
        assert kind == "CollectiveMismatchError", msg
        assert seconds < 20
        assert "collective #0 on group [0, 1]" in msg, msg
        assert "all_reduce(float32['4', '3'], reduce=sum)" in msg, msg
        assert "all_gather(float32['4', '3'])" in msg, msg
        assert "test_collectives_checks.py" in msg  # the user's source line of each collective
        assert f"rank {rank}:" in msg


def _different_capture_sizes(rank, ws):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x * 2
        dist.all_reduce(y)
        return y

    torch._dynamo.reset()
    sizes = [2, 4, 8] if rank == 0 else [2, 4, 16]
    compiled = compile_for(fn, "npugraph_ex", True, [], [], **{
        "npugraphex_config.capture_sizes": sizes, "npugraphex_config.pad_to_capture_size": True,
        "distributed_config.consistency_timeout": 20})
    from torchair_dist.errors import TorchairDistError
    try:
        compiled(torch.ones(4, 3))
    except TorchairDistError as exc:
        return type(exc).__name__, str(exc)
    return None, "no error"


def test_ranks_declaring_other_capture_sizes_fail_on_every_rank(ranks2):
    """Declared capture sizes decide the shapes the graph's collectives run with: ranks that
    declare other ones fail before the first run, each naming both ranks' sizes."""
    for rank, (kind, msg) in enumerate(ranks2.run(_different_capture_sizes, timeout=90)):
        assert kind == "CollectiveMismatchError", msg
        assert "capture_sizes=[2, 4, 8] pad=True" in msg and "capture_sizes=[2, 4, 16] pad=True" \
            in msg, msg


def _unmatched_p2p(rank, ws):
    import torch
    import torch.distributed as dist

    def fn(x):
        if rank == 0:
            dist.send(x, dst=1)
            return x
        buf = torch.empty(4, 4)  # rank 1 expects another shape
        dist.recv(buf, src=0)
        return buf
    return _expect_error(fn, torch.ones(4, 3), **{"distributed_config.consistency_timeout": 20})


def test_unmatched_send_recv_is_reported_on_both_ranks(ranks2):
    results = ranks2.run(_unmatched_p2p, timeout=60)
    for rank, (kind, msg, _) in enumerate(results):
        assert kind == "CollectiveMismatchError", msg
        assert "between ranks" in msg and "unmatched" in msg, msg
        assert "float32['4', '3']" in msg and "float32['4', '4']" in msg, msg


def _one_rank_without_collectives(rank, ws):
    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import consistency

    def fn(x):
        if rank == 0:
            dist.all_reduce(x)
        return x * 2
    result = _expect_error(fn, torch.ones(4), **{"distributed_config.consistency_timeout": 3})
    dist.barrier()
    consistency.reset_check_sequence()  # rank 0's failed check left the ranks out of step
    return result


def test_missing_rank_is_named_within_the_timeout(ranks2):
    (kind, msg, seconds), (kind1, _, _) = ranks2.run(_one_rank_without_collectives, timeout=60)
    assert kind == "CollectiveMismatchError" and "timed out after 3s" in msg, msg
    assert "rank(s) [1]" in msg, msg
    assert 3 <= seconds < 15
    assert kind1 is None  # rank 1 has nothing to check and runs


def _check_switch(rank, ws, check):
    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import consistency

    def fn(x):
        y = x * 2
        dist.all_reduce(y)
        out = y.new_empty((ws * 4, 8))
        dist.all_gather_into_tensor(out, y)
        return out
    torch._dynamo.reset()
    consistency.last_check_seconds = None
    compiled = _compile(fn, **{"distributed_config.consistency_check": check})
    out = compiled(torch.ones(4, 8))
    return consistency.last_check_seconds, out.tolist()


def test_check_switch(ranks2):
    """The option switches the check on and off (what it costs is measured by
    ``benchmarks/check_cost.py``, never asserted here)."""
    on = ranks2.run(_check_switch, True)
    off = ranks2.run(_check_switch, False)
    expected = [[4.0] * 8] * 8  # (1 * 2) all-reduced over 2 ranks, gathered twice
    for rank in range(2):
        assert on[rank][0] is not None and off[rank][0] is None
        assert on[rank][1] == expected and off[rank][1] == expected


# ------------------------------------------------------------------------------------ faults
def _killed_rank(rank, ws, shm=False):
    import torch
    import torch.distributed as dist

    from torchair_dist.errors import TorchairDistError

    def fn(x):
        dist.all_reduce(x)
        return x + 1
    torch._dynamo.reset()
    compiled = _compile(fn, **{"distributed_config.cpu_shm_collectives": shm})
    for step in range(3):
        compiled(torch.ones(4))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # dies mid-run
    time.sleep(0.5)
    t0 = time.monotonic()
    try:
        compiled(torch.ones(4))
    except TorchairDistError as exc:
        return type(exc).__name__, str(exc), time.monotonic() - t0
    return None, "no error", time.monotonic() - t0


def _stopped_rank(rank, ws, shm=False):
    import torch
    import torch.distributed as dist

    from torchair_dist.errors import TorchairDistError

    def fn(x):
        dist.all_reduce(x)
        return x + 1
    torch._dynamo.reset()
    compiled = _compile(fn, **{"distributed_config.cpu_shm_collectives": shm})
    compiled(torch.ones(4))
    store = dist.distributed_c10d._get_default_store()
    store.set(f"fault_pid_{rank}", str(os.getpid()))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # stops mid-run (resumed by rank 0 below)
        return "resumed"
    peer = int(store.get("fault_pid_1"))
    t0 = time.monotonic()
    try:
        compiled(torch.ones(4))
        result = (None, "no error", time.monotonic() - t0)
    except TorchairDistError as exc:
        result = (type(exc).__name__, str(exc), time.monotonic() - t0)
    os.kill(peer, signal.SIGCONT)
    return result


@pytest.mark.parametrize("shm", [False, True], ids=["gloo", "shm"])
def test_killed_rank_fails_the_survivor_fast(rank_pool, shm):
    pool = rank_pool(2, pg_timeout_s=PG_TIMEOUT_S)
    with pytest.raises(RankFailure) as info:
        pool.run(_killed_rank, shm, timeout=60, failure_grace=PG_TIMEOUT_S + 20)
    assert info.value.per_rank[1] == "died (exit code -9)"
    kind, msg, seconds = info.value.results[0]
    assert kind == "CollectiveFaultError", msg
    assert "rank 0: a collective of graph_" in msg and "all_reduce" in msg, msg
    assert seconds < PG_TIMEOUT_S + 5
    if shm:  # the transport looks at a late peer's process every 0.2 s
        assert "rank 1 never reached it: its process" in msg and "has exited" in msg, msg
        assert seconds < 2, seconds


@pytest.mark.parametrize("shm", [False, True], ids=["gloo", "shm"])
def test_stopped_rank_fails_the_survivor_within_pg_timeout(rank_pool, shm):
    pool = rank_pool(2, pg_timeout_s=PG_TIMEOUT_S)
    results = pool.run(_stopped_rank, shm, timeout=60)
    kind, msg, seconds = results[0]
    assert kind == "CollectiveFaultError", msg
    assert seconds < PG_TIMEOUT_S + 10, seconds
    if shm:
        assert f"did not arrive within {PG_TIMEOUT_S:g} s (the group timeout" in msg, msg
    assert results[1] == "resumed"
    pool.shutdown(kill=True)  # the process group is broken now


# ------------------------------------------------------------------------ eager op kernels
def _eager_kernels(rank, ws):
    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import groups

    td, fn_ops = torch.ops.torchair_dist, torch.ops._c10d_functional
    name = groups.stable_name_of(None)
    x = torch.arange(6.0).reshape(2, 3) + 10 * rank
    equal = td.all_gather([torch.empty_like(x)] * ws, x, name)
    assert [t.tolist() for t in equal] == [(torch.arange(6.0).reshape(2, 3) + 10 * r).tolist()
                                           for r in range(ws)]
    u = torch.full((rank + 1, 2), float(rank))
    unequal = td.all_gather([u.new_empty((r + 1, 2)) for r in range(ws)], u, name)
    assert [t.tolist() for t in unequal] == [[[float(r)] * 2] * (r + 1) for r in range(ws)]
    # all_to_all_v: rank r sends r + 1 rows of 2 to each peer; displacements in elements
    rows = torch.arange(float(2 * (rank + 1) * ws)).reshape(-1, 2) + 100 * rank
    send = [2 * (rank + 1)] * ws
    recv = [2 * (r + 1) for r in range(ws)]
    disp = lambda counts: [sum(counts[:i]) for i in range(len(counts))]  # noqa: E731
    # packed pieces run asynchronously: the result is valid after wait_tensor, as documented
    got = fn_ops.wait_tensor(td.all_to_all_v(rows, send, disp(send), recv, disp(recv), name))
    ref = rows.new_empty((sum(recv) // 2, 2))
    dist.all_to_all_single(ref, rows, [c // 2 for c in recv], [c // 2 for c in send])
    assert torch.equal(got, ref)
    # send/recv: issued asynchronously, completed by wait_tensor
    peer = 1 - rank
    token = td.send(x * 2, peer, 5, name)
    buf = fn_ops.wait_tensor(td.recv(torch.empty_like(x), peer, 5, name))
    fn_ops.wait_tensor(token)
    assert torch.equal(buf, (torch.arange(6.0).reshape(2, 3) + 10 * peer) * 2)
    return True


def test_op_library_eager_kernels(ranks2):
    assert ranks2.run(_eager_kernels) == [True, True]
