"""Bytes-compatible matching (issue 10, item 2): point-to-point and gather outputs match by dtype
and element count, not shape, in every mode, static and dynamic.

* rank 0 sends a (2, 2) tensor, rank 1 receives it into a (4, 1) buffer (and the reverse);
* ``all_gather_into_tensor`` where one rank's output is concatenated (ws*n, 3) and another's
  stacked (ws, n, 3);
* the list ``all_gather`` into outputs shaped differently per rank (same element counts).
Every rank's outputs equal eager (gloo moves the same bytes).
"""
import pytest

from collective_cases import compile_for

MODES = [("npugraph_ex", False), ("npugraph_ex", True), ("max-autotune", False),
         ("max-autotune", True), ("reduce-overhead", False)]


def _program(rank, ws, mode, dynamic):
    import torch
    import torch.distributed as dist

    def fn(x, eager=False):
        a = x * (rank + 1)
        if rank == 0:
            dist.send(a[:2, :2].contiguous(), dst=1)
            got = torch.zeros(2, 2)
            dist.recv(got, src=1)
        elif rank == 1:
            got = torch.zeros(4, 1)
            dist.recv(got, src=0)
            dist.send(a[:2, :2].reshape(4, 1) + 100, dst=0)
        else:
            got = torch.zeros(1)
        shape = (ws * x.shape[0], 3) if rank % 2 == 0 else (ws, x.shape[0], 3)
        out = x.new_zeros(shape)
        # gloo's eager all-gather refuses a stacked output; the reference gathers into a view
        dist.all_gather_into_tensor(out.view(-1, 3) if eager else out, a)
        pieces = [x.new_zeros((3, 2)) if (rank + i) % 2 else x.new_zeros((2, 3))
                  for i in range(ws)]
        dist.all_gather([p.view(2, 3) for p in pieces] if eager else pieces,
                        a[:2, :3].contiguous())
        return got + 1, out, *pieces

    torch._dynamo.reset()
    compiled = compile_for(fn, mode, dynamic, [], [])
    results = []
    for n in ((4, 6) if dynamic else (4,)):
        x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
        got = compiled(x.clone())
        want = fn(x.clone(), eager=True)
        results.append([tuple(g.shape) == tuple(w.shape) and torch.equal(g, w)
                        for g, w in zip(got, want)])
    return results


@pytest.mark.parametrize("mode,dynamic", MODES,
                         ids=[f"{m}-{'dynamic' if d else 'static'}" for m, d in MODES])
def test_same_bytes_other_shape(ranks2, mode, dynamic):
    for rank, results in enumerate(ranks2.run(_program, mode, dynamic, timeout=180)):
        assert results and all(all(r) for r in results), f"rank {rank}: {results}"


def test_same_bytes_other_shape_4_ranks(ranks4):
    for rank, results in enumerate(ranks4.run(_program, "max-autotune", False, timeout=180)):
        assert results and all(all(r) for r in results), f"rank {rank}: {results}"
