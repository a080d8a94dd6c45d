"""Collectives on a group this rank is not in are no-ops like eager (issue 10, item 3).

On every rank of 2/4 gloo ranks, ``g = dist.new_group(<some ranks>)`` and the program calls
collectives on ``g`` whatever the rank: members run them, non-members skip them (warning once),
exactly as eager does — in every mode, static and dynamic. Outputs of every rank equal eager.
"""
import pytest

from collective_cases import compile_for

MODES = [("npugraph_ex", False), ("npugraph_ex", True), ("max-autotune", False),
         ("max-autotune", True), ("reduce-overhead", False)]
_GROUPS = {}


def _group(ws):
    import torch.distributed as dist

    ranks = [0, 1] if ws == 4 else [1]
    if ws not in _GROUPS:
        _GROUPS[ws] = dist.new_group(ranks)
    return ranks, _GROUPS[ws]


def _nonmember_program(rank, ws, mode, dynamic):
    import warnings

    import torch
    import torch.distributed as dist

    from torchair_dist.collectives import remap

    ranks, g = _group(ws)
    remap._warned_outside.clear()  # warned once per process; each case checks its warning

    def fn(x):
        t = x * (rank + 1)
        dist.broadcast(t, src=ranks[0], group=g)
        dist.all_reduce(t, group=g)
        out = t.new_zeros((len(ranks) * t.shape[0], t.shape[1])) - 1.0  # kept by non-members
        dist.all_gather_into_tensor(out, t, group=g)
        dist.all_reduce(t)  # the world still reduces on every rank
        return t + 1, out

    results = []
    torch._dynamo.reset()
    compiled = compile_for(fn, mode, dynamic, [], [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in ((4, 6) if dynamic else (4,)):
            x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
            got = compiled(x.clone())
            want = fn(x.clone())
            results.append(all(torch.equal(a, b) for a, b in zip(got, want)))
    warned = [str(w.message) for w in caught if "not a member" in str(w.message)
              or "not in the group" in str(w.message)]
    return rank in ranks, results, warned


CASES = [(4, m, d) for m, d in MODES] + [(2, "npugraph_ex", True), (2, "max-autotune", False)]


@pytest.mark.parametrize("ws,mode,dynamic", CASES,
                         ids=[f"ws{w}-{m}-{'dynamic' if d else 'static'}" for w, m, d in CASES])
def test_nonmember_collectives_are_noops(request, ws, mode, dynamic):
    pool = request.getfixturevalue(f"ranks{ws}")
    per_rank = pool.run(_nonmember_program, mode, dynamic, timeout=180)
    for rank, (member, equal, warned) in enumerate(per_rank):
        assert all(equal) and equal, f"rank {rank} (member={member}): compiled != eager {equal}"
        if not member:
            assert warned, f"rank {rank}: no warning about skipping collectives"
