"""Side by side on the model suite's 2-rank tensor-parallel Llama, in one run: eager,
``aot_eager``, ``inductor`` and each torchair_dist mode (plus torch's ``cudagraphs`` and inductor
``reduce-overhead`` on an NVIDIA machine).

  python benchmarks/compare.py [--steps 200] [--world 2] [--modes npugraph_ex,...]

Per variant: compile time of the first call, each in its own fresh set of rank processes
(a real cold start; inductor's own on-disk caches off); for our modes also through
``torchair_dist.cache_compile``: the cold compile that saves an entry ("cache cold") and the
warm start that loads it in new processes ("warm"); median step latency over ``--steps`` calls,
all variants timed in interleaved blocks in one set of processes; ratios to eager and to
inductor; the largest difference from eager. A variant that fails prints its error instead.
Rank 0's table is printed (``--all-ranks`` prints every rank's).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "launch"))

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")   # cold means cold for inductor too
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

from _bench import interleaved_medians  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

OUR_MODES = ("npugraph_ex", "reduce-overhead", "max-autotune")


def _setup(rank, world, port, device_type):
    import datetime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from torchair_dist import platform

    plat = platform.current()
    plat.set_device(rank)
    dist.init_process_group(plat.dist_backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    return plat, plat.device(rank)


def _model(world, plat, device, args):
    from models import tp_llama

    model = tp_llama(world, device, plat.device_type, num_hidden_layers=args.layers)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq),
                        generator=torch.Generator().manual_seed(1)).to(device)
    return model, ids


def _variants(modes, device_type):
    import warnings

    import torchair_dist

    out = {"eager": None, "aot_eager": ("aot_eager", None), "inductor": ("inductor", None)}
    if device_type == "cuda":
        out["cudagraphs"] = ("cudagraphs", None)
        out["inductor:reduce-overhead"] = ("inductor", "reduce-overhead")
    for mode in modes:
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            out[f"ours:{mode}"] = (torchair_dist.get_npu_backend(compiler_config=cfg), None)
    return out


def _first_call(fn, ids, plat):
    dist.barrier()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fn(ids)
    plat.synchronize()
    return out, time.perf_counter() - t0


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = next((t for t in text if "Error" in t), text[0] if text else type(exc).__name__)
    return f"{type(exc).__name__}: {line[:300]}"


def _logits_fn(model):
    def logits(ids_):
        return model(input_ids=ids_, use_cache=False).logits
    return logits


def _cached(model, mode, cache_dir):
    import warnings

    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torchair_dist.cache_compile(model.forward, config=cfg, cache_dir=cache_dir)


def _phase_rank(rank, world, port, args, out_dir, phase, name):
    """One measurement in fresh rank processes (so every first call is a real cold start).

    compile:    torch.compile(variant ``name``) and its first call;
    cache_cold: cache_compile(mode ``name``), first call = compile + save;
    warm:       cache_compile(mode ``name``), first call = load from the cache;
    timing:     every variant compiled, medians timed in interleaved blocks.
    """
    plat, device = _setup(rank, world, port, args.device_type)
    model, ids = _model(world, plat, device, args)
    logits = _logits_fn(model)
    with torch.no_grad():
        expected = logits(ids)
    result = {}
    try:
        if phase == "compile":
            backend, mode = _variants(args.modes, plat.device_type)[name]
            fn = torch.compile(logits, backend=backend, mode=mode, fullgraph=True)
            out, result["compile_s"] = _first_call(fn, ids, plat)
            result["diff"] = (out - expected).abs().max().item()
        elif phase in ("cache_cold", "warm"):
            fast = _cached(model, name, args.cache_dir)
            out, seconds = _first_call(lambda i: fast(input_ids=i, use_cache=False), ids, plat)
            ok = fast.last_source == ("compiled" if phase == "cache_cold" else "cache")
            key = "cache_save_s" if phase == "cache_cold" else "warm_s"
            result[key] = seconds if ok and not fast.rejections else None
            result[f"{phase}_source"] = fast.last_source
            if phase == "warm":
                result["warm_diff"] = (out.logits - expected).abs().max().item()
        else:
            calls = {}
            for vname, spec in _variants(args.modes, plat.device_type).items():
                if vname in args.failed:
                    continue
                if spec is None:
                    calls[vname] = lambda: logits(ids)
                    continue
                fn = torch.compile(logits, backend=spec[0], mode=spec[1], fullgraph=True)
                _first_call(fn, ids, plat)
                calls[vname] = (lambda f=fn: f(ids))
            dist.barrier()
            with torch.no_grad():
                result = {k: {"median_s": v} for k, v in
                          interleaved_medians(calls, args.steps, barrier=dist.barrier).items()}
    except Exception as exc:  # noqa: BLE001 - report the variant, keep benchmarking
        traceback.print_exc()
        result["error" if phase == "compile" else f"{phase}_error"] = _short(exc)
    with open(os.path.join(out_dir, f"{phase}-{name}-{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def _fmt(v, spec, width):
    return f"{v:>{width}{spec}}" if isinstance(v, (int, float)) else f"{'-':>{width}}"


def print_table(rows, args, rank=0) -> None:
    eager = rows["eager"].get("median_s")
    ind = rows.get("inductor", {}).get("median_s")
    print(f"\n2-rank TP Llama ({args.layers} layers, hidden 64, vocab 128, batch {args.batch} x "
          f"seq {args.seq}), torch {torch.__version__}, {os.cpu_count()} cpus; rank {rank}; "
          f"median of >= {args.steps} steps")
    head = (f"{'variant':<26} {'compile s':>9} {'cache cold s':>12} {'warm s':>7} "
            f"{'median us':>10} {'/eager':>7} {'/inductor':>9} {'max |diff|':>10}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<26} FAILED: {r['error']}")
            continue
        m = r.get("median_s")
        warm = r.get("warm_s")
        print(f"{name:<26} {_fmt(r.get('compile_s'), '.2f', 9)} "
              f"{_fmt(r.get('cache_save_s'), '.2f', 12)} {_fmt(warm, '.2f', 7)} "
              f"{_fmt(m * 1e6 if m else None, '.0f', 10)} "
              f"{_fmt(m / eager if m and eager else None, '.2f', 7)} "
              f"{_fmt(m / ind if m and ind else None, '.2f', 9)} "
              f"{_fmt(r.get('diff'), '.1e', 10)}")
        for key in ("cache_cold_error", "warm_error", "timing_error"):
            if key in r:
                print(f"{'':<26} {key}: {r[key]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="timed steps per variant (>= 100)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--modes", default=",".join(OUR_MODES),
                   help="comma-separated torchair_dist modes")
    p.add_argument("--all-ranks", action="store_true", help="print every rank's table")
    args = p.parse_args()
    if args.steps < 100:
        p.error("--steps must be >= 100")
    args.modes = [m for m in args.modes.split(",") if m]
    args.device_type = "cuda" if torch.cuda.is_available() else "cpu"
    from torch.distributed.elastic.utils.distributed import get_free_port

    names = list(_variants(args.modes, args.device_type))
    tables = [{n: {} for n in names} for _ in range(args.world)]
    args.failed = []

    def run(phase, name):
        print(f"[compare] {phase} {name} ...", flush=True)
        mp.spawn(_phase_rank, args=(args.world, get_free_port(), args, tmp, phase, name),
                 nprocs=args.world)
        for rank in range(args.world):
            with open(os.path.join(tmp, f"{phase}-{name}-{rank}.json")) as f:
                got = json.load(f)
            if phase == "timing":
                if "timing_error" in got:
                    got = {"eager": got}
                for vname, extra in got.items():
                    tables[rank][vname].update(extra)
            else:
                tables[rank][name if phase == "compile" else f"ours:{name}"].update(got)

    with tempfile.TemporaryDirectory(prefix="compare_") as tmp:
        args.cache_dir = os.path.join(tmp, "cache")
        for name in names[1:]:
            run("compile", name)
        args.failed = [n for n in names if "error" in tables[0][n]]
        for mode in args.modes:
            if f"ours:{mode}" not in args.failed:
                run("cache_cold", mode)
                run("warm", mode)
        run("timing", "all")
    for row in (t["eager"] for t in tables):
        row.setdefault("diff", 0.0)
    for rank in range(args.world) if args.all_ranks else [0]:
        print_table(tables[rank], args, rank)


if __name__ == "__main__":
    main()
