"""What the cross-rank consistency check costs, side by side in one run (gloo ranks).

  python benchmarks/check_cost.py [--world 2] [--rounds 20]

Every rank, in interleaved rounds: compile + first call of a graph with an all_reduce and an
all_gather, once with ``distributed_config.consistency_check`` on and once off; then the
check's exchange alone (``consistency.exchange_and_check`` of a two-collective fingerprint,
the ranks started together by a barrier). Prints medians per rank. (This was an assertion in
the test suite; speed is measured here, never asserted in tests.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _bench  # noqa: E402,F401  (sets TORCH_DEVICE_BACKEND_AUTOLOAD)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torchair_dist  # noqa: E402
from torchair_dist.collectives import consistency  # noqa: E402


def _rank(rank: int, world: int, port: int, rounds: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    def fn(x):
        y = x * 2
        dist.all_reduce(y)
        out = y.new_empty((world * 4, 8))
        dist.all_gather_into_tensor(out, y)
        return out

    first = {True: [], False: []}
    for _ in range(max(2, rounds // 5)):
        for check in (True, False):
            torch._dynamo.reset()
            cfg = torchair_dist.CompilerConfig()
            cfg.mode = "npugraph_ex"
            cfg.distributed_config.consistency_check = check
            compiled = torch.compile(fn, fullgraph=True,
                                     backend=torchair_dist.get_npu_backend(compiler_config=cfg))
            dist.barrier()
            t0 = time.perf_counter()
            compiled(torch.ones(4, 8))
            first[check].append(time.perf_counter() - t0)
    fp = [{"op": "all_reduce", "group": list(range(world)), "dtype": "float32",
           "shape": ["4", "8"], "reduce": "sum", "where": "x"},
          {"op": "all_gather", "group": list(range(world)), "dtype": "float32",
           "shape": ["4", "8"], "where": "y"}]
    exchange = []
    for _ in range(rounds):
        dist.barrier()
        exchange.append(consistency.exchange_and_check(fp, "bench", 30))
    rows = [None] * world
    dist.all_gather_object(rows, (first, exchange))
    if rank == 0:
        print(f"consistency check, {world} gloo ranks (medians; compile+first call of "
              f"{len(first[True])} rounds, exchange of {rounds})")
        for r, (f, ex) in enumerate(rows):
            on, off = statistics.median(f[True]), statistics.median(f[False])
            print(f"  rank {r}: exchange alone {statistics.median(ex) * 1e3:7.2f} ms   "
                  f"compile+first call: check on {on:.3f} s, off {off:.3f} s "
                  f"(ratio {on / off:.2f})")
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    from torch.distributed.elastic.utils.distributed import get_free_port

    mp.spawn(_rank, args=(args.world, get_free_port(), args.rounds), nprocs=args.world)


if __name__ == "__main__":
    main()
