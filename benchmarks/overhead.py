"""Per-call overhead, side by side in one run: eager, aot_eager, inductor, torchair_dist.

  python benchmarks/overhead.py [--steps 400] [--world 2]

1. a trivial graph (``x + 1`` on 16 floats) in this process: pure wrapper overhead, and its
   breakdown (per variant, the whole call and the part below Dynamo's guards and bytecode);
2. a tensor-parallel MLP on ``--world`` gloo ranks (column- then row-parallel linear with
   ``dist.all_reduce``), every rank timing every variant in interleaved blocks; our modes
   with the shared-memory transport (the default on CPU) and without it (",gloo":
   ``distributed_config.cpu_shm_collectives=False``, the all_reduce on gloo like eager's).
Prints median per-call latency, the ratio to eager and to inductor, and compile time.

Both also time ``ours:cache warm``: the module through ``torchair_dist.cache_compile``, compiled
and saved once, then loaded from its entry by a second ``cache_compile`` (what a later process
does): calls run the loaded graph without Dynamo's guards or AOT's wrapper (TorchAir's
``cache_compile`` skips them the same way). Its compile column is the load.
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


class _AddOne(torch.nn.Module):
    def forward(self, t):
        return t + 1


def cache_warm(module: torch.nn.Module, args, mode: str = "npugraph_ex"):
    """(callable, load seconds): ``module`` through cache_compile, saved by a first
    ``cache_compile`` and loaded from that entry by a second one."""
    import tempfile
    import time

    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with tempfile.TemporaryDirectory(prefix="torchair_dist_bench_") as cache_dir:
        cold = torchair_dist.cache_compile(module.forward, config=cfg, cache_dir=cache_dir)
        cold(*args)
        warm = torchair_dist.cache_compile(module.forward, config=cfg, cache_dir=cache_dir)
        t0 = time.perf_counter()
        warm(*args)  # loads the entry: later calls need nothing from the directory
        seconds = time.perf_counter() - t0
    if warm.last_source != "cache" or warm.rejections:
        raise RuntimeError(f"cache warm: the entry did not load ({warm.last_source}, "
                           f"{warm.rejections})")
    return warm, seconds


def trivial(steps: int) -> None:
    torch.set_num_threads(1)
    x = torch.randn(16)
    compiled = compile_variants(lambda t: t + 1, (x,), backends())
    compiled["ours:cache warm"] = cache_warm(_AddOne(), (x,))
    med = interleaved_medians({k: (lambda f=f: f(x)) for k, (f, _) in compiled.items()}, steps)
    print_table("trivial graph (x + 1), single process", med,
                {k: c for k, (_, c) in compiled.items()})


def breakdown(rounds: int = 15, number: int = 5000) -> None:
    """Where one call of the trivial graph goes, per variant: the whole compiled call, and the
    part below Dynamo (what the backend handed Dynamo: for ours the runner, called directly or
    through AOT's runtime wrapper; for inductor AOT's wrapper and its kernel). Each variant is
    compiled from its own code object; interleaved rounds, min per call."""
    import torchair_dist
    from torch._inductor.compile_fx import compile_fx

    from _bench import _own_code

    torch.set_num_threads(1)
    x = torch.randn(16)
    calls = {"eager": lambda: x + 1}
    below = {}

    def spy(name, backend):
        def compile_(gm, example_inputs, **kwargs):
            below[name] = backend(gm, example_inputs, **kwargs)
            return below[name]
        return compile_

    variants = {"inductor": compile_fx}
    for name, mode, kernels in (("ours:npugraph_ex", "npugraph_ex", False),
                                ("ours:max-autotune", "max-autotune", False),
                                ("ours+inductor-kernels", "npugraph_ex", True)):
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        cfg.experimental_config.inductor_kernels = kernels
        variants[name] = torchair_dist.get_npu_backend(compiler_config=cfg)
    for name, backend in variants.items():
        fn = torch.compile(_own_code(lambda t: t + 1), fullgraph=True, backend=spy(name, backend))
        fn(x), fn(x), fn(x)
        calls[name] = (lambda f=fn: f(x))
    for name, fn in list(below.items()):
        calls[f"{name} below Dynamo"] = (lambda f=fn: f(x))
    calls["ours:cache warm"] = (lambda f=cache_warm(_AddOne(), (x,))[0]: f(x))
    best = _interleaved_min(calls, rounds, number)
    print("\nper-call breakdown, trivial graph (x + 1), min over interleaved rounds, us")
    print(f"  {'variant':<26} {'full':>8} {'below Dynamo':>13} {'Dynamo':>8}")
    for name in calls:
        if name.endswith(" below Dynamo"):
            continue
        low = best.get(f"{name} below Dynamo")
        cells = f"{low:13.2f} {best[name] - low:8.2f}" if low is not None else ""
        print(f"  {name:<26} {best[name]:8.2f} {cells}")


def _interleaved_min(calls, rounds, number):
    import timeit

    out = {k: float("inf") for k in calls}
    for _ in range(rounds):
        for k, c in calls.items():
            out[k] = min(out[k], timeit.timeit(c, number=number) / number * 1e6)
    return out


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

    class MLP(torch.nn.Module):  # the same MLP, its weights as buffers, for cache_compile
        def __init__(self):
            super().__init__()
            self.register_buffer("w1", w1)
            self.register_buffer("w2", w2)

        def forward(self, t):
            h = F.linear(F.gelu(F.linear(t, self.w1)), self.w2)
            dist.all_reduce(h)
            return h

    compiled = compile_variants(mlp, (x,), backends(("npugraph_ex", "max-autotune"), gloo=True),
                                barrier=dist.barrier)
    compiled["ours:cache warm"] = cache_warm(MLP(), (x,))
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
    breakdown()
    from torch.distributed.elastic.utils.distributed import get_free_port

    mp.spawn(_tp_rank, args=(args.world, get_free_port(), args.steps), nprocs=args.world)


if __name__ == "__main__":
    main()
