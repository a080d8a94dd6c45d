"""Ranks fail together (issue 10, item 1), on 2 and 4 gloo ranks.

One rank fails while compiling (a GE conversion failure in max-autotune; a Dynamo trace failure
under ``fullgraph=True``) a graph whose collectives it shares with the others. The failing rank
publishes its failure through the c10d store, so every healthy rank raises ``PeerFailedError``
naming the failed rank and its error at the cross-rank check, instead of waiting out the
consistency timeout (60 s here, the default) and blaming a mismatch. The time from the failing
rank's error to each healthy rank's error is returned (and printed, not asserted).
"""
import time

import pytest

from collective_cases import compile_for


def _run_expecting_error(fn, x, mode):
    import torch

    from torchair_dist.errors import TorchairDistError

    torch._dynamo.reset()
    compiled = compile_for(fn, mode, False, [], [])
    try:
        compiled(x)
    except Exception as exc:  # noqa: BLE001 - unwrapped below
        err = exc
        while err is not None and not isinstance(err, TorchairDistError):
            err = err.__cause__ or getattr(err, "inner_exception", None) or err.__context__
        err = err or exc
        return type(err).__name__, str(err), time.time()
    return None, "no error", time.time()


def _finish(result):
    import torch.distributed as dist

    from torchair_dist.collectives import consistency

    dist.barrier()
    consistency.reset_check_sequence()  # the failed compile left the ranks out of step
    return result


def _conversion_failure(rank, ws, failing):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x + 1
        if rank in failing:  # an op without a GE converter, only on these ranks
            y = torch.special.bessel_y0(y)
        dist.all_reduce(y)
        return y * 2
    return _finish(_run_expecting_error(fn, torch.ones(4, 3), "max-autotune"))


def _trace_failure(rank, ws, failing):
    import torch
    import torch.distributed as dist

    def fn(x):
        y = x + 1
        if rank in failing and y.sum() > 0:  # data-dependent branch: fullgraph trace fails
            y = y - 1
        dist.all_reduce(y)
        return y * 2
    return _finish(_run_expecting_error(fn, torch.ones(4, 3), "npugraph_ex"))


def _check(results, failing, marker):
    failed_at = max(results[r][2] for r in failing)
    delays = {}
    for rank, (kind, msg, t) in enumerate(results):
        assert kind is not None, f"rank {rank} ran"
        if rank in failing:
            assert kind != "PeerFailedError", f"rank {rank}: {msg}"
            continue
        assert kind == "PeerFailedError", f"rank {rank}: {kind}: {msg}"
        for r in failing:
            assert f"rank {r} failed" in msg, msg
        assert marker in msg, msg  # the failed rank's own error travels with the name
        delays[rank] = round(t - failed_at, 2)
    print(f"time from the failed rank's error to each healthy rank's error (s): {delays}")
    return delays


@pytest.mark.parametrize("ws,failing", [(2, [1]), (4, [1]), (4, [0, 3])],
                         ids=["ws2", "ws4", "ws4-two-fail"])
def test_conversion_failure_fails_every_rank(request, ws, failing):
    pool = request.getfixturevalue(f"ranks{ws}")
    results = pool.run(_conversion_failure, failing, timeout=120)
    _check(results, failing, "bessel_y0")


@pytest.mark.parametrize("ws", [2, 4], ids=["ws2", "ws4"])
def test_trace_failure_fails_every_rank(request, ws):
    pool = request.getfixturevalue(f"ranks{ws}")
    results = pool.run(_trace_failure, [1], timeout=120)
    _check(results, [1], "failed in compile")
