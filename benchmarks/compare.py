"""Side by side on the collective workloads, in one run per workload: eager, ``aot_eager``,
``inductor``, each torchair_dist mode, ours with overlap off (npugraph_ex and max-autotune) and
ours with inductor kernels, ours with ``cpu_shm_collectives=False`` (",gloo": CPU only; every other
variant of ours uses the shared-memory transport there; plus torch's ``cudagraphs`` and inductor
``reduce-overhead`` on an NVIDIA machine).

  python benchmarks/compare.py [--workloads moe,llama,decode] [--steps 200] [--world 2]

Workloads (``workloads.py``): ``moe`` (expert-parallel MoE block, fixed-capacity dispatch over
``all_to_all_single`` and back, beside a tensor-parallel shared expert), ``llama`` (the model
suite's 2-rank TP Llama, prefill logits), ``decode`` (a tiny HF Llama loaded with transformers'
``tp_plan="auto"``, ``StaticCache``, one one-token decode step).

Per workload and variant: compile time = the first call in the timing processes, variants one
after another (``--fresh-compile``: each in its own fresh set of rank processes, a real cold
start, slow); inductor's own on-disk caches are off; for our variants also through
``torchair_dist.cache_compile``: the cold compile that saves an entry ("cache cold") and the
warm start that loads it in new processes ("warm"); median step latency over ``--steps`` calls,
all variants timed in interleaved blocks in one set of processes; ratios to eager and to
inductor; the largest difference from eager. Columns: ``x eager`` is the speed relative to eager
(eager's median / the variant's: > 1 is faster), ``t/induct`` the step time relative to
inductor's (< 1 is faster). A variant that fails prints its error instead.
Every rank's table is printed (``--rank0`` prints rank 0's only).
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
WORKLOADS = ("moe", "llama", "decode")
NO_OVERLAP = "ours:npugraph_ex,overlap-off"
GE_NO_OVERLAP = "ours:max-autotune,overlap-off"
WITH_INDUCTOR = "ours:npugraph_ex+inductor-kernels"
# distributed_config.cpu_shm_collectives=False: collectives on gloo like eager's (CPU only;
# the other variants use the shared-memory transport, the default on CPU)
GLOO = "ours:npugraph_ex,gloo"
GE_GLOO = "ours:max-autotune,gloo"
OPTION_VARIANTS = (NO_OVERLAP, GE_NO_OVERLAP, GLOO, GE_GLOO)  # not timed through the cache


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


def our_config(name):
    """The CompilerConfig of one of our variants (``ours:<mode>[...]``)."""
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = name.split(":", 1)[1].split(",")[0].split("+")[0]
    if name in (NO_OVERLAP, GE_NO_OVERLAP):
        cfg.distributed_config.overlap_collectives = False
    if name == WITH_INDUCTOR:
        cfg.experimental_config.inductor_kernels = True
    if name in (GLOO, GE_GLOO):
        cfg.distributed_config.cpu_shm_collectives = False
    return cfg


def variant_names(modes, device_type):
    names = ["eager", "aot_eager", "inductor"]
    if device_type == "cuda":
        names += ["cudagraphs", "inductor:reduce-overhead"]
    names += [f"ours:{m}" for m in modes]
    if "npugraph_ex" in modes:
        names += [NO_OVERLAP, WITH_INDUCTOR]
    if "max-autotune" in modes:
        names.append(GE_NO_OVERLAP)
    if device_type == "cpu":
        names += [n for n, m in ((GLOO, "npugraph_ex"), (GE_GLOO, "max-autotune")) if m in modes]
    return names


def _compiled(name, fn):
    """``fn`` compiled as variant ``name`` (``fn`` itself for eager)."""
    import warnings

    import torchair_dist

    if name == "eager":
        return fn
    if not name.startswith("ours:"):
        backend, _, mode = name.partition(":")
        return torch.compile(fn, backend=backend, mode=mode or None, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        backend = torchair_dist.get_npu_backend(compiler_config=our_config(name))
    return torch.compile(fn, backend=backend, fullgraph=True)


def _first_call(fn, inputs, plat):
    dist.barrier()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fn(*inputs)
    plat.synchronize()
    return out, time.perf_counter() - t0


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = next((t for t in text if "Error" in t), text[0] if text else type(exc).__name__)
    if line.rstrip().endswith(":"):  # a list follows (e.g. the ops GE cannot convert)
        items = sorted({t.split()[0] for t in text[text.index(line) + 1:] if t.startswith("  ")})
        line = f"{line.rstrip()} {', '.join(items)}"
    return f"{type(exc).__name__}: {line[:300]}"


def _cached(module, name, cache_dir):
    import warnings

    import torchair_dist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torchair_dist.cache_compile(module.forward, config=our_config(name),
                                           cache_dir=os.path.join(cache_dir, name.replace(
                                               ":", "_").replace(",", "_").replace("+", "_")))


def _timing(module, inputs, expected, names, args, plat):
    """Every variant compiled (first call = compile time unless --fresh-compile measured it),
    then medians timed in interleaved blocks."""
    calls, rows = {}, {}
    # every variant compiles the same forward: room for all of them in Dynamo's cache
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit,
                                                4 * len(names))
    for vname in names:
        if vname in args.failed:
            continue
        try:
            fn = _compiled(vname, module)
            out, seconds = _first_call(fn, inputs, plat)
        except Exception as exc:  # noqa: BLE001 - this variant's cell shows the error
            traceback.print_exc()
            rows[vname] = {"error": _short(exc)}
            continue
        rows[vname] = {} if args.fresh_compile or vname == "eager" else {
            "compile_s": seconds, "diff": (out - expected).abs().max().item()}
        calls[vname] = (lambda f=fn: f(*inputs))
    dist.barrier()
    with torch.no_grad():
        medians = interleaved_medians(calls, args.steps, barrier=dist.barrier)
    for k, v in medians.items():
        rows[k]["median_s"] = v
    return rows


def cached_variants(names):
    return [n for n in names if n.startswith("ours:") and n not in OPTION_VARIANTS]


def _cache_phase(module, inputs, expected, phase, names, args, plat):
    """cache_cold: each of our variants through cache_compile (first call = compile + save);
    warm (new processes): the same, first call = load from the saved entry."""
    rows = {}
    for name in cached_variants(names):
        if name in args.failed:
            continue
        torch._dynamo.reset()
        row = rows[name] = {}
        try:
            fast = _cached(module, name, args.cache_dir)
            out, seconds = _first_call(fast, inputs, plat)
        except Exception as exc:  # noqa: BLE001 - this variant's cell shows the error
            traceback.print_exc()
            row[f"{phase}_error"] = _short(exc)
            continue
        ok = fast.last_source == ("compiled" if phase == "cache_cold" else "cache")
        row["cache_save_s" if phase == "cache_cold" else "warm_s"] = \
            seconds if ok and not fast.rejections else None
        if not ok or fast.rejections:
            row[f"{phase}_error"] = (f"source {fast.last_source}, rejections "
                                     f"{fast.rejections}")[:300]
        if phase == "warm":
            row["warm_diff"] = (out - expected).abs().max().item()
    return rows


def _phase_rank(rank, world, port, args, out_dir, phase, name):
    """One phase in fresh rank processes.

    compile:    (--fresh-compile) torch.compile(variant ``name``) and its first call;
    cache_cold: every one of our variants through cache_compile, first call = compile + save;
    warm:       the same in new processes, first call = load from the cache;
    timing:     every variant compiled, medians timed in interleaved blocks.
    """
    import workloads

    plat, device = _setup(rank, world, port, args.device_type)
    module, inputs = workloads.build(args.workload, rank, world, device, plat.device_type, args)
    with torch.no_grad():
        expected = module(*inputs)
    names = variant_names(args.modes, plat.device_type)
    result = {}
    try:
        if phase == "compile":
            out, result["compile_s"] = _first_call(_compiled(name, module), inputs, plat)
            result["diff"] = (out - expected).abs().max().item()
        elif phase in ("cache_cold", "warm"):
            result = _cache_phase(module, inputs, expected, phase, names, args, plat)
        else:
            result = _timing(module, inputs, expected, names, args, plat)
    except Exception as exc:  # noqa: BLE001 - report the variant, keep benchmarking
        traceback.print_exc()
        result["error" if phase == "compile" else f"{phase}_error"] = _short(exc)
    with open(os.path.join(out_dir, f"{phase}-{name}-{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def _fmt(v, spec, width):
    return f"{v:>{width}{spec}}" if isinstance(v, (int, float)) else f"{'-':>{width}}"


TITLES = {
    "moe": "MoE EP block (top-1 of 4 experts, 2 per rank, capacity 80, 256 tokens x 512, "
           "a2a dispatch + combine, TP shared expert 1024)",
    "llama": "TP Llama ({layers} layers, hidden 64, vocab 128, batch {batch} x seq {seq}, "
             "prefill logits)",
    "decode": "HF Llama decode step (tp_plan='auto', StaticCache 32, 2 layers, hidden 64, "
              "batch 2, one token)",
}


def print_table(workload, rows, args, rank=0) -> None:
    eager = rows["eager"].get("median_s")
    ind = rows.get("inductor", {}).get("median_s")
    title = TITLES[workload].format(layers=args.layers, batch=args.batch, seq=args.seq)
    print(f"\n{title}; torch {torch.__version__}, {os.cpu_count()} cpus; rank {rank}; "
          f"median of >= {args.steps} steps")
    head = (f"{'variant':<34} {'compile s':>9} {'cache cold s':>12} {'warm s':>7} "
            f"{'median us':>10} {'x eager':>7} {'t/induct':>9} {'max |diff|':>10}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<34} FAILED: {r['error']}")
            continue
        m = r.get("median_s")
        print(f"{name:<34} {_fmt(r.get('compile_s'), '.2f', 9)} "
              f"{_fmt(r.get('cache_save_s'), '.2f', 12)} {_fmt(r.get('warm_s'), '.2f', 7)} "
              f"{_fmt(m * 1e6 if m else None, '.0f', 10)} "
              f"{_fmt(eager / m if m and eager else None, '.2f', 7)} "
              f"{_fmt(m / ind if m and ind else None, '.2f', 9)} "
              f"{_fmt(r.get('diff'), '.1e', 10)}")
        for key in ("cache_cold_error", "warm_error", "timing_error"):
            if key in r:
                print(f"{'':<34} {key}: {r[key]}")


def markdown(results, args) -> str:
    """One markdown table per workload, both ranks side by side (``r0 / r1``)."""
    def pair(tables, name, fn):
        vals = [fn(t[name], t) for t in tables]
        return " / ".join("-" if v is None else v for v in vals)

    def ms(r, t):
        return f"{r['median_s'] * 1e3:.2f}" if r.get("median_s") else None

    def speed(r, t):
        e = t["eager"].get("median_s")
        return f"{e / r['median_s']:.2f}" if r.get("median_s") and e else None

    def vs_ind(r, t):
        i = t.get("inductor", {}).get("median_s")
        return f"{r['median_s'] / i:.2f}" if r.get("median_s") and i else None

    def sec(key, err=None):
        def cell(r, t):
            if isinstance(r.get(key), (int, float)):
                return f"{r[key]:.2f}"
            return "err" if err and err in r else None
        return cell

    out = []
    for workload, tables in results.items():
        title = TITLES[workload].format(layers=args.layers, batch=args.batch, seq=args.seq)
        out += [f"**{title}** (median of >= {args.steps} steps, rank 0 / rank 1)", "",
                "| variant | step ms | x eager (speed) | time / inductor | compile s | "
                "cache cold s | warm s | max abs diff |", "|---|---|---|---|---|---|---|---|"]
        for name, r in tables[0].items():
            if "error" in r:
                out.append(f"| {name} | FAILED: {r['error'][:160].replace('|', '/')} "
                           f"| | | | | | |")
                continue
            diff = r.get("diff")
            out.append(f"| {name} | {pair(tables, name, ms)} | {pair(tables, name, speed)} | "
                       f"{pair(tables, name, vs_ind)} | {pair(tables, name, sec('compile_s'))}"
                       f" | {pair(tables, name, sec('cache_save_s', 'cache_cold_error'))} | "
                       f"{pair(tables, name, sec('warm_s', 'warm_error'))} | "
                       f"{'-' if diff is None else f'{diff:.1e}'} |")
        out.append("")
        errors = {f"{name}, {key.replace('_error', '')}: {r[key][:200]}"
                  for t in tables for name, r in t.items()
                  for key in ("cache_cold_error", "warm_error", "timing_error") if key in r}
        out += [f"- {e}" for e in sorted(errors)] + ([""] if errors else [])
    return "\n".join(out)


def run_workload(args, workload, tmp):
    from torch.distributed.elastic.utils.distributed import get_free_port

    args.workload = workload
    names = variant_names(args.modes, args.device_type)
    tables = [{n: {} for n in names} for _ in range(args.world)]
    args.failed = []

    def run(phase, name):
        print(f"[compare] {workload}: {phase} {name} ...", flush=True)
        mp.spawn(_phase_rank, args=(args.world, get_free_port(), args, tmp, phase, name),
                 nprocs=args.world)
        for rank in range(args.world):
            with open(os.path.join(tmp, f"{phase}-{name}-{rank}.json")) as f:
                got = json.load(f)
            if phase == "compile":
                got = {name: got}
            elif any(k.endswith("_error") for k in got):
                got = {"eager": got}
            for vname, extra in got.items():
                tables[rank][vname].update(extra)

    args.cache_dir = os.path.join(tmp, workload, "cache")
    os.makedirs(args.cache_dir, exist_ok=True)
    if args.fresh_compile:
        for name in names[1:]:
            run("compile", name)
        args.failed = [n for n in names if "error" in tables[0][n]]
    if not args.no_cache:
        run("cache_cold", "all")
        run("warm", "all")
    run("timing", "all")
    for row in (t["eager"] for t in tables):
        row.setdefault("diff", 0.0)
    return tables


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--steps", type=int, default=200, help="timed steps per variant (>= 100)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--modes", default=",".join(OUR_MODES),
                   help="comma-separated torchair_dist modes")
    p.add_argument("--rank0", action="store_true", help="print rank 0's table only")
    p.add_argument("--fresh-compile", action="store_true",
                   help="time each variant's compile in its own fresh processes (slow) "
                        "instead of as the first call in the timing processes")
    p.add_argument("--no-cache", action="store_true",
                   help="skip the cache_compile cold/warm phases")
    p.add_argument("--json", help="also write every rank's rows to this file")
    p.add_argument("--markdown", help="also write the tables as markdown to this file")
    p.add_argument("--from-json", nargs="+", metavar="JSON",
                   help="print/convert the results saved by earlier --json runs; run nothing")
    args = p.parse_args()
    if args.steps < 100:
        p.error("--steps must be >= 100")
    args.modes = [m for m in args.modes.split(",") if m]
    args.device_type = "cuda" if torch.cuda.is_available() else "cpu"
    results = {}
    if args.from_json:
        for path in args.from_json:
            with open(path) as f:
                results.update(json.load(f))
    else:
        with tempfile.TemporaryDirectory(prefix="compare_") as tmp:
            for workload in [w for w in args.workloads.split(",") if w]:
                results[workload] = run_workload(args, workload, tmp)
    for workload, tables in results.items():
        for rank in [0] if args.rank0 else range(args.world):
            print_table(workload, tables[rank], args, rank)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results, args))


if __name__ == "__main__":
    main()
