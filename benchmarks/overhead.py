"""Per-call overhead, side by side in one run: eager, aot_eager, inductor, torchair_dist.

  python benchmarks/overhead.py [--steps 400] [--world 2]

1. a trivial graph (``x + 1`` on 16 floats) in this process: pure wrapper overhead;
2. a tensor-parallel MLP on ``--world`` gloo ranks (column- then row-parallel linear with
   ``dist.all_reduce``), every rank timing every variant in interleaved blocks.
Prints median per-call latency, the ratio to eager and to inductor, and compile time.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import backends, compile_variants, interleaved_medians, print_table  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def trivial(steps: int) -> None:
    torch.set_num_threads(1)
    x = torch.randn(16)
    compiled = compile_variants(lambda t: t + 1, (x,), backends())
    med = interleaved_medians({k: (lambda f=f: f(x)) for k, (f, _) in compiled.items()}, steps)
    print_table("trivial graph (x + 1), single process", med,
                {k: c for k, (_, c) in compiled.items()})


def _tp_rank(rank: int, world: int, port: int, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    hidden, ffn = 256, 1024
    w1 = torch.randn(ffn, hidden, generator=g).chunk(world, 0)[rank].contiguous()
    w2 = torch.randn(hidden, ffn, generator=g).chunk(world, 1)[rank].contiguous()
    x = torch.randn(4, hidden, generator=g)

    def mlp(t):
        h = F.linear(F.gelu(F.linear(t, w1)), w2)
        dist.all_reduce(h)
        return h

    compiled = compile_variants(mlp, (x,), backends(), barrier=dist.barrier)
    med = interleaved_medians({k: (lambda f=f: f(x)) for k, (f, _) in compiled.items()}, steps,
                              barrier=dist.barrier)
    comp = {k: c for k, (_, c) in compiled.items()}
    rows = [None] * world
    dist.all_gather_object(rows, (med, comp))
    if rank == 0:
        for r, (m, c) in enumerate(rows):
            print_table(f"TP MLP 256x1024, {world} gloo ranks: rank {r}", m, c)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400, help="timed calls per variant (>= 200)")
    p.add_argument("--world", type=int, default=2)
    args = p.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} cpus; medians of {args.steps} calls")
    trivial(args.steps)
    from torch.distributed.elastic.utils.distributed import get_free_port

    mp.spawn(_tp_rank, args=(args.world, get_free_port(), args.steps), nprocs=args.world)


if __name__ == "__main__":
    main()
