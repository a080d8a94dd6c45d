"""``cache_compile`` names process groups by their ranks, never by c10d's creation order.

Two "jobs" (two sets of fresh rank processes, one cache directory): the first creates its groups
and saves an entry per mode; the second creates *other* groups first, so c10d's creation-order
names ("1", "2", ...) now belong to different groups. Every rank must load its entry (checked
per rank), rebind it to this job's group with the same ranks and return eager's result. Before
the fix one rank silently reduced over the wrong group and its peer timed out.

An entry whose group does not exist in the loading job is refused (``CacheRejectedError`` in
``fn.rejections``, a warning) and recompiled — on every rank, with the right result.
"""
import torch
import torch.distributed as dist
import torch.nn as nn

import torchair_dist
from harness import RankPool

MODES = ["max-autotune", "npugraph_ex", "reduce-overhead"]

_GLOBAL_GROUP = None  # the group _GlobalReduce reads (not an attribute: not in the model key)


class _Reduce(nn.Module):
    """An all_reduce over ``group`` (a module attribute) between two local ops."""

    def __init__(self, group):
        super().__init__()
        self.group = group
        self.register_buffer("w", torch.arange(1.0, 5.0))

    def forward(self, x):
        y = x * self.w
        dist.all_reduce(y, group=self.group)
        return y + 1


class _GlobalReduce(nn.Module):
    """The same, over a group read from a module global at trace time."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.arange(1.0, 5.0))

    def forward(self, x):
        y = x * self.w
        dist.all_reduce(y, group=_GLOBAL_GROUP)
        return y + 1


def _make_groups(layout):
    """Create ``layout``'s groups in order (every rank takes part in each ``new_group``);
    returns {tuple(ranks): group} of the ones this rank is in."""
    mine = {}
    for ranks in layout:
        g = dist.new_group(ranks)
        if dist.get_rank() in ranks:
            mine[tuple(ranks)] = g
    return mine


def _config(mode):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return cfg


def groups_job(rank, world, cache_dir, layout, use, global_use):
    """One job: create ``layout``'s groups, then per mode run ``_Reduce`` over this rank's
    group among ``use`` and ``_GlobalReduce`` over its group among ``global_use`` (None:
    WORLD), each through ``cache_compile``. Returns per mode: source, rejections, and the
    results with their eager references."""
    global _GLOBAL_GROUP
    torch._dynamo.reset()
    mine = _make_groups(layout)
    group = next(mine[tuple(r)] for r in use if rank in r)
    global_ranks = next((r for r in global_use if rank in r), None) if global_use else None
    _GLOBAL_GROUP = mine[tuple(global_ranks)] if global_ranks else None
    x = torch.full((4,), float(rank + 1))
    out = {}
    for mode in MODES:
        res = {}
        for name, module in (("attr", _Reduce(group)), ("global", _GlobalReduce())):
            expected = module(x.clone())  # eager
            fast = torchair_dist.cache_compile(module, config=_config(mode),
                                               cache_dir=f"{cache_dir}/{mode}/{name}")
            got = fast(x.clone())
            res[name] = {"source": fast.last_source, "got": got.tolist(),
                         "expected": expected.tolist(),
                         "rejections": [str(e) for e in fast.rejections]}
        out[mode] = res
    return out


def _run_jobs(world, cache_dir, jobs):
    results = []
    for layout, use, global_use in jobs:
        pool = RankPool(world)  # fresh processes: c10d names start again from "0"
        try:
            results.append(pool.run(groups_job, cache_dir, layout, use, global_use,
                                    timeout=300))
        finally:
            pool.shutdown()
    return results


def _check(cold, warm, world, *, global_rejected):
    for rank in range(world):
        for mode in MODES:
            for name in ("attr", "global"):
                c, w = cold[rank][mode][name], warm[rank][mode][name]
                where = f"rank {rank} {mode} {name}"
                assert c["source"] == "compiled", where
                assert c["got"] == c["expected"], where
                assert w["got"] == w["expected"], (where, w)
            w = warm[rank][mode]
            assert w["attr"]["source"] == "cache", (rank, mode, w["attr"])
            assert w["attr"]["rejections"] == [], (rank, mode, w["attr"])
            if global_rejected:
                # the cache key covers the groups the forward reads from globals, by ranks:
                # another group is another key, so job 2 compiles instead of loading
                assert w["global"]["source"] == "compiled", (rank, mode, w["global"])
                assert w["global"]["rejections"] == [], (rank, mode, w["global"])
            else:
                assert w["global"]["source"] == "cache", (rank, mode, w["global"])


def test_two_jobs_other_group_order_2ranks(tmp_path):
    """Job 1 creates [0, 1]; job 2 creates [0] first (taking c10d's name "1"), then [0, 1]."""
    cold, warm = _run_jobs(2, str(tmp_path), [
        ([[0, 1]], [[0, 1]], [[0, 1]]),
        ([[0], [0, 1]], [[0, 1]], [[0, 1]]),
    ])
    _check(cold, warm, 2, global_rejected=False)
    for rank in range(2):  # the reduction really spans both ranks: (1 + 2) * w + 1
        for mode in MODES:
            assert warm[rank][mode]["attr"]["got"] == [4.0, 7.0, 10.0, 13.0], (rank, mode)


def test_two_jobs_subgroups_4ranks(tmp_path):
    """Job 1 creates [0, 1], [2, 3], [0, 2], [1, 3]; job 2 creates [0], [2] first (taking c10d's
    names "1" and "2"), then [2, 3], [0, 1], and no [0, 2] / [1, 3]. The attribute module
    (over [0, 1] / [2, 3]) loads and is rebound on every rank; the global module reads
    another group from its global in job 2 (WORLD instead of [0, 2] / [1, 3]): another cache
    key on every rank, so it compiles, reducing over WORLD as job 2's code says."""
    cold, warm = _run_jobs(4, str(tmp_path), [
        ([[0, 1], [2, 3], [0, 2], [1, 3]], [[0, 1], [2, 3]], [[0, 2], [1, 3]]),
        ([[0], [2], [2, 3], [0, 1]], [[0, 1], [2, 3]], None),
    ])
    _check(cold, warm, 4, global_rejected=True)
    for rank in range(4):
        pair = 3 if rank < 2 else 7  # (1 + 2) or (3 + 4)
        for mode in MODES:
            assert warm[rank][mode]["attr"]["got"] == [pair * k + 1.0 for k in range(1, 5)]
            assert warm[rank][mode]["global"]["got"] == [11.0, 21.0, 31.0, 41.0]  # WORLD
