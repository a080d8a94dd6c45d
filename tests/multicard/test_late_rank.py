"""A rank that resumes after its peers gave up fails; it never finishes a collective alone
(issue 33).

Two ranks run graphs A and B (each an all_reduce on their 2-rank group) for one step; in the
next, the higher rank sleeps past the group's timeout between A and B. The lower one gives up in
B with ``CollectiveFaultError`` naming the late rank; the late rank, on waking, must fail in B
too — with the shared-memory transport (the CPU default in every mode) naming the rank that gave
up, although that rank's sequence number and data are already in the segment; with gloo
because the timed-out op closed the connection. A faulted group is broken for good, so each
case (mode x transport) runs on its own pair of a 4-rank pool: six pairs, six distinct groups
(a pair is not the world group, which a group of the same ranks would resolve to).
"""

from collective_cases import compile_for

PG_TIMEOUT_S = 4  # the groups' timeout: what rank 0 waits in B before it gives up
MODES = ("npugraph_ex", "reduce-overhead", "max-autotune")
PAIRS = [(0, 1), (2, 3), (0, 2), (1, 3), (0, 3), (1, 2)]
CASES = [(mode, shm, pair) for (mode, shm), pair in
         zip([(mode, shm) for mode in MODES for shm in (True, False)], PAIRS)]


def _late_rank(rank, ws, cases):
    import datetime
    import time

    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import consistency
    from torchair_dist.errors import TorchairDistError

    results = []
    for i, (mode, shm, pair) in enumerate(cases):
        group = dist.new_group(list(pair), timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
        dist.barrier()
        if rank not in pair:
            results.append(None)
            dist.barrier()
            continue
        torch._dynamo.reset()
        consistency.reset_check_sequence(epoch=3300 + i)

        def graph_a(x):
            dist.all_reduce(x, group=group)
            return x + 1

        def graph_b(x):
            dist.all_reduce(x, group=group)
            return x * 2

        option = {"distributed_config.cpu_shm_collectives": shm}
        a, b = (compile_for(fn, mode, False, [], [], **option) for fn in (graph_a, graph_b))
        start = torch.full((4,), float(pair.index(rank) + 1))
        warm = b(a(start.clone()))   # ((1 + 2) + 1 on both) summed, doubled: 16
        result = {"warm": warm.tolist()}
        x = a(start.clone())
        if rank == pair[1]:
            time.sleep(PG_TIMEOUT_S + 2)   # past the other rank's wait in B
        t0 = time.monotonic()
        try:
            result["value"] = b(x).tolist()
        except TorchairDistError as exc:
            result["error"] = (type(exc).__name__, str(exc))
        result["seconds"] = time.monotonic() - t0
        results.append(result)
        dist.barrier()   # the world group is whole: every rank goes on to the next case
    return results


def test_a_rank_resuming_after_its_peer_gave_up_fails_naming_it(rank_pool):
    pool = rank_pool(4)
    per_rank = pool.run(_late_rank, CASES, timeout=180 + 30 * len(CASES))
    problems = []
    for i, (mode, shm, (lo, hi)) in enumerate(CASES):
        case = f"{mode}, {'shared memory' if shm else 'gloo'}, ranks {lo} and {hi}"
        gave_up, late = per_rank[lo][i], per_rank[hi][i]
        for rank, res in ((lo, gave_up), (hi, late)):
            if res["warm"] != [16.0] * 4:
                problems.append(f"{case}: rank {rank}'s step before the fault: {res['warm']}")
            if "error" not in res:
                problems.append(f"{case}: rank {rank} finished B alone: {res.get('value')} "
                                f"after {res['seconds']:.1f} s")
            elif res["error"][0] != "CollectiveFaultError":
                problems.append(f"{case}: rank {rank}: {res['error']}")
        if "error" in gave_up and shm and f"rank {hi} never reached it" not in gave_up["error"][1]:
            problems.append(f"{case}: rank {lo} does not name rank {hi}: {gave_up['error'][1]}")
        if "error" in late:
            if shm and f"rank {lo} gave up on exchange" not in late["error"][1]:
                problems.append(f"{case}: rank {hi} does not name rank {lo}: {late['error'][1]}")
            if late["seconds"] > 2:   # at once, not after its own timeout
                problems.append(f"{case}: rank {hi} failed after {late['seconds']:.1f} s")
        if gave_up["seconds"] > PG_TIMEOUT_S + 3:
            problems.append(f"{case}: rank {lo} failed after {gave_up['seconds']:.1f} s")
    assert not problems, "\n".join(problems)
