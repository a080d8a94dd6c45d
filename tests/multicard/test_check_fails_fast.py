"""The cross-rank check fails every rank fast where ranks would wait for each other (issue 10,
item 7's library fix), on 2 and 4 gloo ranks, with the default 60 s consistency timeout:

* a rank whose graph has a receive its peer's graph lacks (the peer has only the world
  all_reduce): before, the peer passed the check, ran and blocked in the all_reduce while the
  receiver waited out the timeout; now the peer waits for the receiver's confirmation, the two
  waits form a cycle, and both raise ``CollectiveMismatchError`` naming it;
* at 4 ranks, rank 3 moves its only collective to the subgroup [2, 3]: ranks 0-2 wait for its
  world fingerprint, rank 3 waits for rank 2's on the subgroup: a cycle, every rank raises;
* at 4 ranks, ranks 0 and 1 disagree on a send/recv only they share; ranks 2 and 3 share just
  the world all_reduce with them: before, 2 and 3 passed the check and hung in the all_reduce
  until the process-group timeout; now they wait for 0 and 1's confirmations and raise the
  mismatch 0 and 1 published.

The harness timeout (45 s, below the consistency timeout) fails a case that falls back to
waiting; every rank's error class and message are checked.
"""
import pytest

from collective_cases import compile_for

_SUB = {}


def _run(fn, x):
    import time

    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import consistency
    from torchair_dist.errors import TorchairDistError

    torch._dynamo.reset()
    compiled = compile_for(fn, "npugraph_ex", False, [], [])
    t0 = time.monotonic()
    try:
        compiled(x)
        result = (None, "no error", time.monotonic() - t0)
    except TorchairDistError as exc:
        result = (type(exc).__name__, str(exc), time.monotonic() - t0)
    dist.barrier()
    consistency.reset_check_sequence()
    return result


def _missing_send(rank, ws):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x + rank
        if rank == 1:  # rank 0's graph has no matching send
            buf = torch.zeros_like(y)
            dist.recv(buf, src=0)
            y = y + buf
        dist.all_reduce(y)
        return y
    return _run(fn, torch.ones(4))


def _subgroup_only(rank, ws):
    import torch
    import torch.distributed as dist

    if "g23" not in _SUB:
        _SUB["g23"] = dist.new_group([2, 3])

    def fn(x):
        y = x + rank
        dist.all_reduce(y, group=_SUB["g23"] if rank == 3 else None)
        return y
    return _run(fn, torch.ones(4))


def _p2p_mismatch_bystanders(rank, ws):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x + rank
        if rank == 0:
            dist.send(y, dst=1)
        elif rank == 1:
            buf = torch.zeros(5)  # 5 elements, rank 0 sends 4
            dist.recv(buf, src=0)
            y = y + buf[:4]
        dist.all_reduce(y)
        return y
    return _run(fn, torch.ones(4))


@pytest.mark.parametrize("ws,program,marker", [
    (2, _missing_send, "wait for each other"),
    (4, _missing_send, None),
    (4, _subgroup_only, None),
    (4, _p2p_mismatch_bystanders, None),
], ids=["missing-send-ws2", "missing-send-ws4", "subgroup-only-ws4", "p2p-bystanders-ws4"])
def test_every_rank_raises_the_mismatch_without_waiting_out_the_timeout(request, ws, program,
                                                                         marker):
    pool = request.getfixturevalue(f"ranks{ws}")
    results = pool.run(program, timeout=45)
    for rank, (kind, msg, seconds) in enumerate(results):
        assert kind == "CollectiveMismatchError", f"rank {rank}: {kind}: {msg}"
        assert "different collectives" in msg, msg
        if marker:
            assert marker in msg, msg
    print(f"\n{program.__name__} ws={ws}: seconds to error per rank "
          f"{[round(r[2], 2) for r in results]}")
