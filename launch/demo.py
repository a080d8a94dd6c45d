"""The main job: a small tensor-parallel transformer compiled per rank with torchair_dist.

  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 launch/demo.py

Every rank builds its shard of the model, runs it eagerly and compiled
(``torch.compile(backend=torchair_dist.get_npu_backend(...), fullgraph=True)``), and rank 0
prints one row per rank: mode, compile time, median step latency beside eager's, and the
largest difference from eager.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (gather_rows, init_distributed, median_us, require_torchrun,  # noqa: E402
                    time_steps)
from models import TPTransformer  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torchair_dist  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--mode", default="npugraph_ex",
                   choices=["npugraph_ex", "reduce-overhead", "max-autotune"],
                   help="CompilerConfig.mode")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--steps", type=int, default=50, help="timed steps per variant")
    p.add_argument("--timeout", type=int, default=120, help="process-group timeout (s)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    require_torchrun("launch/demo.py")
    plat, rank, world, device = init_distributed(args.timeout)
    model = TPTransformer(args.layers, args.hidden, args.heads, args.ffn, rank, world).to(device)
    model.eval()
    x = torch.randn(args.batch, args.seq, args.hidden,
                    generator=torch.Generator().manual_seed(1)).to(device)

    config = torchair_dist.CompilerConfig()
    config.mode = args.mode
    compiled = torch.compile(model, backend=torchair_dist.get_npu_backend(compiler_config=config),
                             fullgraph=True)
    with torch.no_grad():
        expected = model(x)
        dist.barrier()
        t0 = time.perf_counter()
        actual = compiled(x)
        plat.synchronize()
        compile_s = time.perf_counter() - t0
        max_diff = (actual - expected).abs().max().item()
        eager_us = median_us(time_steps(lambda: model(x), plat, args.steps))
        ours_us = median_us(time_steps(lambda: compiled(x), plat, args.steps))

    rows = gather_rows(dict(rank=rank, mode=args.mode, platform=plat.name,
                            compile_s=compile_s, eager_us=eager_us, ours_us=ours_us,
                            max_diff=max_diff))
    if rank == 0:
        print(f"torchair_dist demo: {args.layers}-layer TP transformer, hidden {args.hidden}, "
              f"world size {world}, {plat.name}/{plat.dist_backend}, {args.steps} steps")
        print(f"{'rank':>4} {'mode':>12} {'compile s':>10} {'eager us':>10} {'ours us':>10} "
              f"{'ours/eager':>10} {'max |diff|':>11}")
        for r in rows:
            print(f"{r['rank']:>4} {r['mode']:>12} {r['compile_s']:>10.2f} {r['eager_us']:>10.0f} "
                  f"{r['ours_us']:>10.0f} {r['ours_us'] / r['eager_us']:>10.2f} "
                  f"{r['max_diff']:>11.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
