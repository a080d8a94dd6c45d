"""Ranks that disagree about a shared-memory exchange get an error on every rank, never a wrong
or stale result; a peer dying during set-up leaves nothing in ``/dev/shm`` (2 and 4 gloo ranks,
both modes). Each case gave wrong sums, stale data or a leak before the set-up agreement, the
per-exchange header and the unlink-on-every-path."""
import os

import pytest

from harness import RankFailure

MODES = ["npugraph_ex", "max-autotune"]


def _compiled_all_reduce(mode, dynamic=False):
    import torch
    import torch.distributed as dist

    import torchair_dist

    torch._dynamo.reset()
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.distributed_config.cpu_shm_collectives = True

    def fn(x):
        y = x * 1
        dist.all_reduce(y)
        return y
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True, dynamic=dynamic)


def _outcome(call):
    try:
        out = call()
        return "ok", out.reshape(-1)[:4].tolist()
    except Exception as exc:  # noqa: BLE001 - the test inspects what each rank raised
        return type(exc).__name__, str(exc)


def _different_slot_bytes(rank, world, mode):
    import torch

    from torchair_dist.cpu import shm, shm_segment

    shm.reset()
    os.environ[shm_segment.SLOT_ENV] = "4096" if rank != world - 1 else "8192"
    try:
        compiled = _compiled_all_reduce(mode)
        return _outcome(lambda: compiled(torch.full((3000,), float(rank + 1))))
    finally:
        os.environ.pop(shm_segment.SLOT_ENV, None)
        shm.reset()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("mode", MODES)
def test_ranks_with_different_slot_sizes_all_raise(rank_pool, mode, world):
    results = rank_pool(world).run(_different_slot_bytes, mode, timeout=180)
    for rank, (kind, msg) in enumerate(results):
        assert kind == "CollectiveMismatchError", (rank, kind, msg)
        assert "TORCHAIR_DIST_SHM_SLOT_BYTES" in msg and "'slot bytes': 8192" in msg, msg


def _bad_variable(rank, world, mode, name):
    import torch

    from torchair_dist.cpu import shm

    shm.reset()
    if rank == 1:
        os.environ[name] = "abc"
    try:
        compiled = _compiled_all_reduce(mode)
        return _outcome(lambda: compiled(torch.ones(8)))
    finally:
        os.environ.pop(name, None)
        shm.reset()


@pytest.mark.parametrize("name", ["TORCHAIR_DIST_SHM_SLOT_BYTES", "TORCHAIR_DIST_SHM_TIMEOUT"])
def test_a_bad_variable_on_one_rank_is_an_error_naming_it_on_every_rank(rank_pool, name):
    results = rank_pool(2).run(_bad_variable, "npugraph_ex", name, timeout=180)
    for rank, (kind, msg) in enumerate(results):
        assert kind == "ConfigError", (rank, kind, msg)
        assert f"rank 1: environment variable {name}='abc'" in msg, msg


def _different_sizes(rank, world, mode):
    import torch

    from torchair_dist.cpu import shm

    shm.reset()
    compiled = _compiled_all_reduce(mode, dynamic=True)
    # every rank 8 elements: fine (read now: a replay overwrites a captured output)
    first = compiled(torch.ones(8)).tolist()
    n = 16 if rank == world - 1 else 8
    result = _outcome(lambda: compiled(torch.ones(n)))
    shm.reset()
    return first, result


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("mode", MODES)
def test_ranks_with_different_dynamic_sizes_all_raise(rank_pool, mode, world):
    results = rank_pool(world).run(_different_sizes, mode, timeout=180)
    for rank, (first, (kind, msg)) in enumerate(results):
        assert first == [float(world)] * 8
        assert kind == "CollectiveMismatchError", (rank, kind, msg)
        assert "the ranks disagree" in msg and "all_reduce of 16 torch.float32" in msg, msg


def _peer_dies_during_setup(rank, world):
    """The segments this process made and left behind (not a before/after listing of
    /dev/shm: the tests of the other xdist worker make and remove their own meanwhile)."""
    import torch

    from torchair_dist.cpu import shm, shm_segment

    shm.reset()
    made = []
    create = shm_segment._create_segment

    def spy(size):
        path, mm = create(size)
        made.append(path)
        return path, mm
    shm_segment._create_segment = spy
    if rank == 1:
        def die(*args):
            os._exit(7)
        shm_segment._open_segment = die
    compiled = _compiled_all_reduce("npugraph_ex")
    result = _outcome(lambda: compiled(torch.ones(8)))
    shm_segment._create_segment = create
    return result, (made, [p for p in made if os.path.exists(p)])


def test_a_peer_dying_during_setup_leaks_no_segment(rank_pool):
    pool = rank_pool(2, pg_timeout_s=10)
    with pytest.raises(RankFailure) as info:
        pool.run(_peer_dies_during_setup, timeout=90, failure_grace=40)
    assert info.value.per_rank[1].startswith("died"), info.value.per_rank
    (kind, msg), (made, left) = info.value.results[0]
    assert kind != "ok", msg  # rank 0 failed instead of waiting forever
    assert made, "rank 0 made no segment: the test no longer reaches the setup it means to"
    assert left == [], f"left in /dev/shm: {left}"


def _umask_000(rank, world, mode):
    import stat

    import torch

    from torchair_dist.cpu import shm, shm_segment

    shm.reset()
    old = os.umask(0)
    seen = []
    create = shm_segment._create_segment

    def spy(size):
        path, mm = create(size)
        seen.append(stat.S_IMODE(os.stat(path).st_mode))
        return path, mm
    shm_segment._create_segment = spy
    try:
        compiled = _compiled_all_reduce(mode)
        outs = [compiled(torch.full((64,), float(rank + i))).tolist() for i in range(5)]
    finally:
        shm_segment._create_segment = create
        os.umask(old)
        shm.reset()
    return seen, outs


@pytest.mark.parametrize("mode", MODES)
def test_umask_000_still_makes_a_private_segment(ranks2, mode):
    results = ranks2.run(_umask_000, mode, timeout=180)
    assert results[0][0] == [0o600] and results[1][0] == []
    for rank, (_, outs) in enumerate(results):
        assert outs == [[float(1 + 2 * i)] * 64 for i in range(5)], rank
