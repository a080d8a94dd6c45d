"""Dynamic receives (issue 10, item 4): with ``dynamic=True`` a receive compiles in every mode.

* a module that ``recv``s into a buffer *argument* (the symbolic-shape case): max-autotune
  specialises the received shape (GE's HcomReceive needs a static one) — a guard, one graph per
  received shape — while the ACL modes keep one symbolic graph;
* the list ``all_to_all`` over ``chunk``ed pieces (used to fail in max-autotune dynamic with
  ``TypeError: new(): invalid data type 'str'``).
Every rank's outputs equal eager at two sizes.
"""
import pytest

from collective_cases import compile_for

MODES = ["max-autotune", "npugraph_ex", "reduce-overhead"]


def _program(rank, ws, mode):
    import torch
    import torch.distributed as dist

    def recv_into(x, buf):
        if rank == 0:
            dist.send(x * 3, dst=1)
        elif rank == 1:
            dist.recv(buf, src=0)
        return buf + 1

    def a2a(x):
        ins = [t.contiguous() for t in x.chunk(ws)]
        outs = [torch.empty_like(t) for t in ins]
        dist.all_to_all(outs, ins)
        return torch.cat(outs) * 2

    out = {}
    for name, fn, make in (
            ("recv_into", recv_into, lambda n: (torch.arange(n * 5.0).reshape(n, 5) + rank,
                                                torch.zeros(n, 5))),
            ("a2a", a2a, lambda n: (torch.arange(n * ws * 3.0).reshape(n * ws, 3) + 7 * rank,))):
        torch._dynamo.reset()
        graphs = []
        compiled = compile_for(fn, mode, True, graphs, [])
        ok = []
        for n in (2, 4):
            args = make(n)
            want = fn(*[a.clone() for a in args])
            got = compiled(*[a.clone() for a in args])
            ok.append(torch.equal(got, want))
        out[name] = (ok, len(graphs))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_receives_compile(ranks2, mode):
    for rank, out in enumerate(ranks2.run(_program, mode, timeout=180)):
        for name, (ok, graphs) in out.items():
            assert ok == [True, True], f"rank {rank} {name}: compiled != eager {ok}"
        if mode == "max-autotune":  # sender and receiver specialise: in step, one per shape
            assert out["recv_into"][1] == 2, f"rank {rank}: one graph per shape expected"
        else:
            assert out["recv_into"][1] == 1, f"rank {rank}: {out}"
