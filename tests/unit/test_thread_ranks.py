"""Ranks as threads of one process (issue 39, item 3): torch's threaded process group, what
PyTorch's own distributed tests use (``spawn_threads_and_init_comms``, the ``threaded`` backend
of ``torch.testing._internal.distributed.multi_threaded_pg``).

Every per-rank state is the calling thread's rank's, not the process's: the cross-rank check's
sequence (identical programs were reported as 'different collectives': one counter per group,
shared by the thread ranks), the failure board, the shared-memory channels (cached per group,
each bound to one rank: the backward hung). Compiled functional collectives with a backward
equal eager on 2 thread ranks in every mode; a real mismatch is still named, with both ranks;
a runner compiled on one rank refuses to run on another.
"""
import time

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.testing._internal.common_distributed import spawn_threads_and_init_comms

from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.collectives import consistency
from torchair_dist.base.torch_support import torch_at_least
from torchair_dist.cpu import shm
from torchair_dist.errors import CollectiveFaultError, CollectiveMismatchError, WrongRankError

# Thread ranks are tested from torch 2.13 (the library warns below it). Torch 2.11's Dynamo
# crashed this process (a segfault in FakeTensorMode.__enter__ while one thread rank compiled
# and its peer ran) and its destroy_process_group fails on the threaded world ("'ThreadLocalWorld'
# object has no attribute 'comms'"), which then stays for the worker's later tests (GE graphs
# with extra inputs in unrelated files).
pytestmark = pytest.mark.skipif(
    not torch_at_least(2, 13),
    reason="thread ranks need torch >= 2.13: torch 2.11's Dynamo segfaults compiling on one "
           "thread rank while another runs, and its threaded world is never torn down")

MODES = ["npugraph_ex", "max-autotune", "reduce-overhead"]
WORLD = "tag=;ranks=0,1"  # the stable name of the default group of 2 ranks


@pytest.fixture(autouse=True)
def _clean_ranks():
    consistency.reset_check_sequence()  # no group in this thread: every rank's sequence
    shm.reset()
    yield
    shm.reset()


def on_thread_ranks(body, world_size=2):
    """``body(rank)`` on ``world_size`` thread ranks (torch's helper: it joins the threads and
    raises with every failed rank's traceback); returns ``{rank: body's result}``."""
    results = {}

    @spawn_threads_and_init_comms(world_size=world_size)
    def run(_):
        results[dist.get_rank()] = body(dist.get_rank())

    run(None)
    return results


def compiled(fn, mode, **distributed):
    cfg = CompilerConfig()
    cfg.mode = mode
    for name, value in distributed.items():
        setattr(cfg.distributed_config, name, value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True)


def _all_to_all(x):
    y = funcol.all_to_all_single_autograd(x * 2, None, None, group=dist.group.WORLD)
    return (y.sin() * 3).sum(0)


def _all_gather(x):
    return funcol.all_gather_tensor_autograd(x * 2, 0, group=dist.group.WORLD).cos().sum(0)


def _reduce_scatter(x):
    return funcol.reduce_scatter_tensor_autograd(x * 2, "sum", 0, group=dist.group.WORLD).sin()


def _all_reduce(x):
    return (funcol.all_reduce(x * 2, "sum", group=dist.group.WORLD) * x).sin()


PROGRAMS = {"all_to_all": _all_to_all, "all_gather": _all_gather,
            "reduce_scatter": _reduce_scatter, "all_reduce": _all_reduce}
ON_SHM = {"all_to_all", "all_reduce"}  # what the shared-memory transport covers


def _step(fn, x):
    """Output (copied before the backward: a replay may reuse its buffer) and input grad."""
    x = x.clone().requires_grad_()
    y = fn(x)
    out = y.detach().clone()
    y.sum().backward()
    return out, x.grad


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("collective", sorted(PROGRAMS))
def test_compiled_collectives_with_backward_equal_eager(mode, collective):
    fn = PROGRAMS[collective]

    def body(rank):
        torch.manual_seed(rank)
        inputs = [torch.randn(4, 3) for _ in range(3)]
        c = compiled(fn, mode)
        for x in inputs:  # the first call checks and captures, the later ones replay
            (out, grad), (ref, ref_grad) = _step(c, x), _step(fn, x)
            assert torch.equal(out, ref) and torch.equal(grad, ref_grad), (rank, collective)
        checks = {scope: n for (r, scope), n in consistency._check_counts.items() if r == rank}
        return checks, shm.exchanges(WORLD)

    results = on_thread_ranks(body)
    # each rank checked its forward and its backward graph, in its own sequence
    assert results[0][0] == results[1][0] == {"group:0,1": 2}
    if collective in ON_SHM:  # each rank reached its own end of the group's channel
        assert results[0][1] == results[1][1] == 2 * 3


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_without_the_check_the_shared_memory_backward_does_not_hang(mode):
    """The issue's second symptom: with the check off, the shared-memory transport hung in the
    backward (one channel per process and group, bound to the rank that made it)."""
    def body(rank):
        torch.manual_seed(rank)
        x = torch.randn(4, 3)
        c = compiled(_all_to_all, mode, consistency_check=False)
        (out, grad), (ref, ref_grad) = _step(c, x), _step(_all_to_all, x)
        assert torch.equal(out, ref) and torch.equal(grad, ref_grad)
        return shm.exchanges(WORLD)

    assert on_thread_ranks(body) == {0: 2, 1: 2}


@pytest.mark.timeout(240)
def test_identical_programs_out_of_phase_never_mismatch():
    """Two compiled functions (three graphs with collectives on the world group, two modes), one
    rank half a second behind: every check pairs the ranks' own sequences (the shared counter
    put them at different check numbers: a false 'different collectives')."""
    def other(x):
        return funcol.all_reduce(x + 1, "max", group=dist.group.WORLD) * 2

    def body(rank):
        if rank == 1:
            time.sleep(0.5)
        x = torch.randn(4, 3)
        a, b = compiled(_all_gather, "npugraph_ex"), compiled(other, "max-autotune")
        for _ in range(2):
            assert torch.equal(_step(a, x)[1], _step(_all_gather, x)[1])
            assert torch.equal(b(x), other(x))
        return {s: n for (r, s), n in consistency._check_counts.items() if r == rank}

    assert on_thread_ranks(body) == {0: {"group:0,1": 3}, 1: {"group:0,1": 3}}


@pytest.mark.timeout(240)
def test_a_real_mismatch_on_thread_ranks_names_both_ranks():
    def body(rank):
        if rank == 0:
            def fn(x):
                return funcol.all_reduce(x, "sum", group=dist.group.WORLD) + 1
        else:
            def fn(x):
                return funcol.all_gather_tensor(x, 0, group=dist.group.WORLD) + 1
        with pytest.raises(CollectiveMismatchError) as info:
            compiled(fn, "npugraph_ex")(torch.ones(4))
        return str(info.value)

    messages = on_thread_ranks(body)
    for rank, text in messages.items():
        assert "different collectives" in text, text
        assert "rank 0 has all_reduce" in text and "rank 1 has all_gather" in text, text


@pytest.mark.timeout(240)
def test_a_graph_compiled_on_one_thread_rank_is_refused_on_another():
    """One compiled function called by both thread ranks, its group given by ranks: Dynamo's
    guards cannot tell the ranks apart and hand one rank's graph to the other. That rank
    refuses it (naming both ranks), and its peer, left waiting in the shared-memory exchange,
    fails at once with its error instead of hanging (or racing on the runner's buffers)."""
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"

    def fn(x):
        return funcol.all_reduce(x * 2, "sum", group=[0, 1]) * x

    shared = torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True)
    errors = {}

    def body(rank):
        try:
            for i in range(3):
                x = torch.full((4,), float(rank + i))
                assert torch.equal(shared(x), fn(x))
        except Exception as exc:  # noqa: BLE001 - what each rank saw is the result
            errors[rank] = exc
            raise
        return None

    with pytest.raises(RuntimeError):  # torch's helper: a thread exited with an exception
        with pytest.warns(FutureWarning):  # torch: groups by ranks are deprecated
            on_thread_ranks(body)
    refused = [e for e in errors.values() if isinstance(e, WrongRankError)]
    assert refused, errors
    assert "was compiled on rank" in str(refused[0]) and "Compile per rank" in str(refused[0])


@pytest.mark.timeout(120)
def test_a_thread_rank_that_ended_is_named_by_its_peer():
    """Thread ranks share a pid: the shared-memory transport watches each rank's thread, so a
    rank that ended is a CollectiveFaultError on its peer at once, not a wait for the group
    timeout."""
    def body(rank):
        shm.all_reduce_(torch.ones(4), "sum", WORLD)  # both: the channel is set up
        if rank == 1:
            return None
        time.sleep(0.3)
        start = time.monotonic()
        with pytest.raises(CollectiveFaultError, match=r"rank 1 never reached it: its thread"):
            shm.all_reduce_(torch.ones(4), "sum", WORLD)
        return time.monotonic() - start

    assert on_thread_ranks(body)[0] < 10



@pytest.mark.timeout(240)
def test_declared_capture_sizes_are_captured_on_every_thread_rank():
    """Each thread rank compiles the same code (one Dynamo frame) with declared capture sizes:
    a frame's captured sizes are the calling rank's, so every rank captures every size in its
    own graph (the same captures, and collectives, in the same order on every rank); padded
    calls equal eager on every rank."""
    import torchair_dist

    def step(x):
        return funcol.all_reduce(x * 2, "sum", group=dist.group.WORLD) + x

    def body(rank):
        cfg = CompilerConfig()
        cfg.mode = "npugraph_ex"
        cfg.npugraphex_config.capture_sizes = [2, 4, 8]
        cfg.npugraphex_config.pad_to_capture_size = True
        fn = torch.compile(step, backend=get_npu_backend(compiler_config=cfg), dynamic=True)
        for n in (4, 3, 8, 5):
            x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3) + rank
            torch.testing.assert_close(fn(x), step(x), rtol=0, atol=0)
        return True

    torchair_dist.reset_capture_report()
    assert on_thread_ranks(body) == {0: True, 1: True}
    summary = torchair_dist.capture_summary()
    assert sum(g.get("captures", 0) for g in summary.values()) == 6, summary  # 3 sizes x 2 ranks
    assert not any(g.get("eager") for g in summary.values()), summary
