"""Communication/compute overlap: overlap scheduling on vs off vs eager, on 2 gloo ranks.

Workloads (per rank, fp32, CPU, one intra-op thread per rank):

* ``moe``: an MoE-style block: ``all_to_all`` dispatch of the tokens beside a shared-expert
  MLP on the local tokens, the routed expert MLP on the received tokens, ``all_to_all``
  combine. As written (and as traced) the dispatch is waited on before the shared expert; with
  overlap the shared expert runs while the dispatch is in flight.
* ``tp2mb``: a tensor-parallel MLP stack run on two micro-batches written one after the
  other per layer; each layer ends in an ``all_reduce`` per micro-batch. With overlap the
  all_reduce of micro-batch 0 runs while micro-batch 1 computes, and vice versa.

Variants: ``eager``, ``overlap off`` and ``overlap on`` (mode ``npugraph_ex``, the only
difference being ``distributed_config.overlap_collectives``). Reported: median step latency over
``--steps`` timed steps (after warm-up; the three variants take turns step by step so that other
load on the machine hits them alike) on rank 0, ratios, and the first call (compile) time. gloo runs
collectives on its own
threads, so the overlap is real on CPU; the compiled variants keep their collectives on gloo
(``cpu_shm_collectives=False``), as the shared-memory transport is synchronous.

Usage::

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python benchmarks/overlap.py [--steps 100] [--native-a2a]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def moe_block(x, ws1, ws2, we1, we2):
    dispatched = torch.empty_like(x)
    dist.all_to_all_single(dispatched, x)
    shared = torch.relu(x @ ws1) @ ws2                 # shared expert: local tokens
    routed = torch.relu(dispatched @ we1) @ we2        # routed expert: received tokens
    combined = torch.empty_like(routed)
    dist.all_to_all_single(combined, routed)
    return combined + shared


def tp_two_microbatch(x0, x1, w1s, w2s):
    for w1, w2 in zip(w1s, w2s):
        h0 = torch.relu(x0 @ w1) @ w2
        dist.all_reduce(h0)
        x0 = x0 + h0
        h1 = torch.relu(x1 @ w1) @ w2
        dist.all_reduce(h1)
        x1 = x1 + h1
    return x0, x1


def _inputs(name, args, rank):
    g = torch.Generator().manual_seed(100 + rank)
    d, f, t = args.hidden, args.ffn, args.tokens

    def r(*shape):
        return torch.randn(*shape, generator=g) / shape[0] ** 0.5

    if name == "moe":
        return moe_block, (r(t, d), r(d, f), r(f, d), r(d, f), r(f, d))
    half = t // 2
    return tp_two_microbatch, (r(half, d), r(half, d), [r(d, f) for _ in range(args.layers)],
                               [r(f, d) for _ in range(args.layers)])


NATIVE_A2A = False


def _variant(fn, variant):
    if variant == "eager":
        return fn
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.distributed_config.overlap_collectives = variant == "overlap on"
    # gloo's asynchronous collectives are what overlap can hide; the shared-memory transport
    # (the CPU default) is synchronous and much faster, which would measure something else
    cfg.distributed_config.cpu_shm_collectives = False
    decomps = {}
    if NATIVE_A2A:
        # keep torch's asynchronous all_to_all_single instead of the default decomposition
        decomps[torch.ops._c10d_functional.all_to_all_single.default] = \
            lambda *a, **k: NotImplemented
    backend = torchair_dist.get_npu_backend(compiler_config=cfg, custom_decompositions=decomps)
    return torch.compile(fn, backend=backend, fullgraph=True)


VARIANTS = ("eager", "overlap off", "overlap on")


def _time_interleaved(fns, inputs, steps, warmup):
    """Median latency per variant; the variants take turns step by step, so load from other
    processes on the machine affects them alike."""
    times = {v: [] for v in fns}
    with torch.no_grad():
        for _ in range(warmup):
            for fn in fns.values():
                fn(*inputs)
        dist.barrier()
        for _ in range(steps):
            for variant, fn in fns.items():
                t0 = time.perf_counter()
                fn(*inputs)
                times[variant].append(time.perf_counter() - t0)
    return {v: statistics.median(t) for v, t in times.items()}


def _worker(rank, world_size, port, args, queue):
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    torch.set_num_threads(1)
    global NATIVE_A2A
    NATIVE_A2A = args.native_a2a
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    results = {}
    for name in args.workloads:
        fn, inputs = _inputs(name, args, rank)
        torch._dynamo.reset()
        fns, first_call, reference = {}, {}, None
        for variant in VARIANTS:
            # a fresh function object per variant: each gets its own compiled code
            variant_fn = _variant(_fresh(fn), variant)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = variant_fn(*inputs)
            first_call[variant] = time.perf_counter() - t0
            if reference is None:
                reference = out
            else:
                torch.testing.assert_close(out, reference)
            fns[variant] = variant_fn
        medians = _time_interleaved(fns, inputs, args.steps, args.warmup)
        for variant in VARIANTS:
            results[(name, variant)] = (medians[variant], first_call[variant])
        parts = _time_interleaved({"comm only": _comm_only(fn, inputs),
                                   "compute only": _compute_only(fn)},
                                  inputs, args.steps, args.warmup)
        for part, t in parts.items():
            results[(name, part)] = (t, float("nan"))
    dist.barrier()
    dist.destroy_process_group()
    queue.put((rank, results))


def _comm_only(fn, inputs):
    """The workload's collectives alone (eager, same shapes, same order)."""
    calls = []
    real = dist.all_reduce, dist.all_to_all_single

    def record_ar(t, *a, **k):
        calls.append(("ar", t.clone()))
        return real[0](t, *a, **k)

    def record_a2a(out, inp, *a, **k):
        calls.append(("a2a", out.clone(), inp.clone()))
        return real[1](out, inp, *a, **k)

    dist.all_reduce, dist.all_to_all_single = record_ar, record_a2a
    try:
        with torch.no_grad():
            fn(*inputs)
    finally:
        dist.all_reduce, dist.all_to_all_single = real

    def run(*_):
        for call in calls:
            if call[0] == "ar":
                real[0](call[1])
            else:
                real[1](call[1], call[2])
    return run


def _compute_only(fn):
    """The workload with its collectives skipped (eager)."""
    def run(*inputs):
        real = dist.all_reduce, dist.all_to_all_single
        dist.all_reduce = lambda t, *a, **k: None
        dist.all_to_all_single = lambda out, inp, *a, **k: out.copy_(inp)
        try:
            return fn(*inputs)
        finally:
            dist.all_reduce, dist.all_to_all_single = real
    return run


def _fresh(fn):
    import types

    # A new code object too: Dynamo caches compiled code per code object.
    code = fn.__code__.replace(co_name=fn.__code__.co_name)
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--workloads", nargs="+", default=["moe", "tp2mb"])
    p.add_argument("--native-a2a", action="store_true",
                   help="compile all_to_all_single as torch's asynchronous functional op "
                        "instead of the default decomposition to torchair_dist.all_to_all_v")
    args = p.parse_args()
    world_size = 2
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, args, queue))
             for r in range(world_size)]
    for proc in procs:
        proc.start()
    per_rank = dict(queue.get(timeout=1800) for _ in procs)
    for proc in procs:
        proc.join()
    res = per_rank[0]
    print(f"2 gloo ranks, 1 thread each; tokens={args.tokens} hidden={args.hidden} "
          f"ffn={args.ffn} layers(tp2mb)={args.layers}; median of {args.steps} steps, rank 0; "
          f"all_to_all: {'native async' if args.native_a2a else 'default decomposition'}")
    print(f"{'workload':<8} {'variant':<12} {'median ms':>10} {'vs eager':>9} "
          f"{'vs off':>8} {'1st call s':>10}")
    for name in args.workloads:
        eager = res[(name, "eager")][0]
        off = res[(name, "overlap off")][0]
        for variant in VARIANTS:
            t, tc = res[(name, variant)]
            print(f"{name:<8} {variant:<12} {t * 1e3:>10.2f} {eager / t:>8.2f}x "
                  f"{off / t:>7.2f}x {tc:>10.2f}")
        comm, compute = res[(name, "comm only")][0], res[(name, "compute only")][0]
        print(f"{name:<8} {'(comm only':<12} {comm * 1e3:>10.2f}   eager parts: the most "
              f"overlap could save is about min(comm, overlappable compute))")
        print(f"{name:<8} {'(compute':<12} {compute * 1e3:>10.2f}   only)")


if __name__ == "__main__":
    main()
