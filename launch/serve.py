"""A serving loop on 2 ranks: continuous batching of a synthetic request stream over a tiny
Hugging Face Llama sharded by transformers' TP, every variant side by side in one run.

  make serve                      # or:
  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 launch/serve.py \\
      --plot serve.png --json serve.json

Rank 0 saves a random-config Llama (``--preset``; no download), every rank loads it with
``tp_plan="auto"``. A seeded stream of ``--requests`` requests (Poisson arrivals at
``--rate`` per decode step, prompt and output lengths drawn from ``--prompt``/``--output``)
is served by a scheduler (launch/serving.py): arrived requests take free KV slots and are
prefilled one by one, then one batched decode step runs over the active slots padded up to the
next of ``--capture-sizes`` (padding rows masked, sliced off). Each variant compiles both
steps with the same backend and mode: eager; ours npugraph_ex (``capture_sizes`` and
``pad_to_capture_size`` set for the decode batch); ours npugraph_ex with inductor's kernels;
ours max-autotune (GE); ours piecewise (npugraph_ex split at attention, which runs eagerly
between the captured pieces); inductor (torch.compile's default backend); on CUDA torch's CUDA
graph trees (``mode="reduce-overhead"``). The prefill step's prompt length is dynamic: a
variant that captures per shape (ours npugraph_ex, with inductor's kernels, piecewise; CUDA
graph trees) has each prompt padded up to the next of ``--prefill-sizes`` (default: multiples
of 8 covering the longest prompt; padding tokens after the prompt, hidden by the causal mask),
so it captures each declared prefill size once, never a graph per prompt length; max-autotune
and inductor run each prompt at its own length through one dynamic graph. Variants are warmed
up (every declared decode size, then every declared prefill size, largest first), then serve
the whole stream in turn, ``--rounds`` times, all in this one process.

Printed per variant (rank 0's timings, every rank's token check): tokens/s over the stream
(prefills included; median over rounds), per-token latency p50/p99 (time between a request's
consecutive tokens), decode step p50, prefill p50, warm-up time (compile + capture of every
decode and prefill size), graph memory and capture time as ``torchair_dist.capture_summary()``
gives them, captures of the decode graphs and of the prefill graphs (per size), prefills per
length, graphs compiled while serving, and whether every request's tokens equal eager's on
every rank. Exit 1 when some request's tokens differ from eager's, or a declared decode size or
prefill size was captured twice or recaptured (each failure named).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PRESETS = {  # tiny_config overrides (launch/tiny_config.py: vocab 128, 4 heads, 2 KV heads)
    "tiny": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, head_dim=16),
    "small": dict(num_hidden_layers=4, hidden_size=256, intermediate_size=512, head_dim=64),
}
DEFAULT_VARIANTS = ["eager", "npugraph_ex", "npugraph_ex+inductor_kernels", "max-autotune",
                    "piecewise", "inductor", "cuda-graph-trees"]


def parse_args(argv=None):
    from serving import VARIANTS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model size")
    p.add_argument("--requests", type=int, default=24, help="requests in the stream")
    p.add_argument("--rate", type=float, default=0.5, help="arrivals per decode step (Poisson)")
    p.add_argument("--prompt", type=int, nargs=2, default=[4, 24], metavar=("MIN", "MAX"),
                   help="prompt length range")
    p.add_argument("--output", type=int, nargs=2, default=[8, 32], metavar=("MIN", "MAX"),
                   help="output length range (tokens generated per request)")
    p.add_argument("--capture-sizes", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="declared decode batch sizes; the largest is the number of KV slots")
    p.add_argument("--prefill-sizes", type=int, nargs="+", default=None,
                   help="declared prefill lengths: a capturing variant pads each prompt up to "
                   "the next (default: multiples of 8 covering the longest prompt)")
    p.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=VARIANTS)
    p.add_argument("--rounds", type=int, default=3, help="passes over the stream per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="write the plot (PNG) here (rank 0)")
    p.add_argument("--json", default=None, help="write every row as JSON here (rank 0)")
    p.add_argument("--timeout", type=int, default=300, help="process-group timeout (s)")
    args = p.parse_args(argv)
    if min(args.capture_sizes) < 1 or args.prompt[0] < 1 or args.prompt[0] > args.prompt[1] \
            or args.output[0] > args.output[1] or args.rate <= 0 or args.requests < 1:
        p.error("sizes and lengths must be positive, ranges MIN <= MAX, rate > 0")
    if args.prefill_sizes is None:
        from serving import default_prefill_sizes

        args.prefill_sizes = default_prefill_sizes(args.prompt[1])
    args.prefill_sizes = sorted(set(args.prefill_sizes))
    if args.prefill_sizes[0] < 1 or args.prefill_sizes[-1] < args.prompt[1]:
        p.error(f"--prefill-sizes {args.prefill_sizes} must be positive and cover the longest "
                f"prompt ({args.prompt[1]} tokens)")
    return args


def _model(preset: str, rank: int):
    """Rank 0 writes the model; every rank loads it with transformers' TP."""
    import shutil
    import tempfile

    import torch.distributed as dist

    import hf_decode

    box = [None]
    if rank == 0:
        box[0] = hf_decode.save_tiny("llama", tempfile.mkdtemp(prefix="torchair_dist_serve_"),
                                     **PRESETS[preset])
    dist.broadcast_object_list(box, src=0)
    model = hf_decode.load_tp(box[0])
    dist.barrier()
    if rank == 0:
        shutil.rmtree(box[0], ignore_errors=True)
    return model


def _percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


class Variant:
    """One variant's compiled decode and prefill steps, cache, graphs (names in
    capture_report, per step) and results."""

    def __init__(self, name, model, sizes, max_len, device, prefill_sizes, max_prompt):
        import serving

        self.name, self.sizes, self.device = name, sizes, device
        self.status, self.memory_points = "ok", []
        self.graphs = {"decode": [], "prefill": []}
        self.results, self.mismatched = [], set()
        self.warm_s, self.prefill_warm_s = {}, {}
        self.cache = serving.SlotKVCache(model, max(sizes), max_len)
        self.step = serving.make_variant(name, model, sizes)
        self.prefill = serving.Prefill(name, model, prefill_sizes, max_prompt)

    def claim_graphs(self, known: set, step: str) -> None:
        """Graphs in capture_report that appeared while ``step`` ("decode" or "prefill") of
        this variant ran are its own."""
        import torchair_dist

        new = [g for g in torchair_dist.capture_report() if g not in known]
        self.graphs[step] += new
        known.update(new)

    def all_graphs(self):
        return self.graphs["decode"] + self.graphs["prefill"]

    def report(self, step=None):
        import torchair_dist

        rep = torchair_dist.capture_report()
        return {g: rep.get(g, {}) for g in (self.graphs[step] if step else self.all_graphs())}


def _bytes_and_seconds(graphs):
    """Graph memory (pool + input buffers) and capture time of ``graphs``, summed, as
    ``torchair_dist.capture_summary()`` gives them (None where it gives nothing)."""
    import torchair_dist

    summary = torchair_dist.capture_summary()
    rows = [summary[g] for g in graphs if g in summary]
    nbytes = [r["pool_bytes"] + r.get("input_bytes", 0) for r in rows if "pool_bytes" in r]
    secs = [r["capture_time_s"] for r in rows if "capture_time_s" in r]
    return (sum(nbytes) if nbytes else None), (sum(secs) if secs else None)


def warm_up(v: Variant, known: set) -> None:
    """Every declared decode size once, then every declared prefill size, largest first;
    graph memory after each (for the plot)."""
    import serving

    def point():
        entries = [e for keys in v.report().values() for k, e in keys.items() if k != "*"]
        captured = sum(1 for e in entries if e.get("captures"))
        v.memory_points.append((captured, _bytes_and_seconds(v.all_graphs())[0]))

    for size in sorted(v.sizes, reverse=True):
        v.warm_s[size] = serving.warm_up(v.step, v.cache, [size], v.device)[size]
        v.claim_graphs(known, "decode")
        point()
    for size, seconds in v.prefill.warm_up().items():
        v.prefill_warm_s[size] = seconds
    v.claim_graphs(known, "prefill")
    point()


def _graph_fields(v: Variant, step: str, prefix: str) -> dict:
    """Captures of ``step``'s graphs, keys prefixed with ``prefix``."""
    import serving

    report = v.report(step)
    entries = [e for keys in report.values() for k, e in keys.items() if k != "*"]
    fields = dict(graphs=len(report), keys=sum(len(k) for k in report.values()),
                  captures=sum(e.get("captures", 0) for e in entries),
                  max_captures_per_key=max((e.get("captures", 0) for e in entries), default=0),
                  recaptures=sum(e.get("recaptures", 0) for e in entries),
                  captures_per_size=serving.captures_per_size(report),
                  uncaptured=[k.get("*", {}).get("uncaptured_reason") for k in report.values()
                              if "*" in k],
                  capture_report=report)
    return {prefix + k: val for k, val in fields.items()}


def row_of(v: Variant, rank: int) -> dict:
    if v.status != "ok":
        return dict(variant=v.name, rank=rank, status=v.status)
    tokens = sum(sum(len(t) for t in r.tokens.values()) for r in v.results)
    per_round = [sum(len(t) for t in r.tokens.values()) / r.wall_s for r in v.results]
    gaps = [g for r in v.results for g in r.token_gaps_s]
    steps = [s for r in v.results for s in r.step_s]
    prefills = [s for r in v.results for s in r.prefill_s]
    nbytes, cap_s = _bytes_and_seconds(v.all_graphs())
    prefill_bytes, prefill_cap_s = _bytes_and_seconds(v.graphs["prefill"])
    compiled = {k: sum(r.compiled_while_serving[k] for r in v.results)
                for k in ("prefill", "decode")}
    return dict(variant=v.name, rank=rank, status="ok", tokens=tokens,
                tokens_per_s=statistics.median(per_round), tokens_per_s_per_round=per_round,
                p50_ms=_percentile(gaps, 50) * 1e3, p99_ms=_percentile(gaps, 99) * 1e3,
                step_p50_ms=statistics.median(steps) * 1e3,
                prefill_p50_ms=statistics.median(prefills) * 1e3,
                prefill_total_s=statistics.median(sum(r.prefill_s) for r in v.results),
                warm_up_s=sum(v.warm_s.values()) + sum(v.prefill_warm_s.values()),
                warm_up_per_size_s=v.warm_s, prefill_warm_up_per_size_s=v.prefill_warm_s,
                graph_bytes=nbytes, capture_s=cap_s, prefill_graph_bytes=prefill_bytes,
                prefill_capture_s=prefill_cap_s, prefill_padded=v.prefill.pad,
                **_graph_fields(v, "decode", ""), **_graph_fields(v, "prefill", "prefill_"),
                memory_points=v.memory_points,
                steps_per_size=dict(v.results[0].steps_per_size),
                prefills_per_size=dict(v.results[0].prefills_per_size),
                padded_prefills=v.results[0].padded_prefills,
                compiled_while_serving=compiled,
                same_as_eager=not v.mismatched, mismatched_requests=sorted(v.mismatched))


def run(args, rank, world, plat, device) -> list:
    import torch

    import serving

    def say(msg):
        if rank == 0:
            print(msg, flush=True)

    model = _model(args.preset, rank)
    requests = serving.request_stream(args.requests, args.rate, args.prompt, args.output,
                                      model.config.vocab_size, args.seed)
    sizes = sorted(set(args.capture_sizes))
    max_len = serving.max_len_for(requests)
    max_prompt = max(len(r.prompt) for r in requests)
    say(f"torchair_dist serve: Llama preset {args.preset} ({model.config.num_hidden_layers} "
        f"layers, hidden {model.config.hidden_size}), TP over {world} ranks "
        f"({plat.name}/{plat.dist_backend}), torch {torch.__version__}; {len(requests)} "
        f"requests, rate {args.rate}/step, prompts {args.prompt}, outputs {args.output}, "
        f"capture sizes {sizes} ({max(sizes)} KV slots of {max_len} positions), "
        f"prefill sizes {args.prefill_sizes}, {args.rounds} rounds")
    names = ["eager"] + [n for n in args.variants if n != "eager"]
    variants, known = [], set()
    for name in names:
        if name in serving.NOT_YET:
            variants.append(_skipped(name, serving.NOT_YET[name]))
        elif name == "cuda-graph-trees" and device.type != "cuda":
            variants.append(_skipped(name, "CUDA only"))
        else:
            v = Variant(name, model, sizes, max_len, device, args.prefill_sizes, max_prompt)
            t0 = time.perf_counter()
            try:
                warm_up(v, known)
            except Exception as exc:  # the same on every rank: the row says why
                import hf_decode

                v.status = "error: " + hf_decode.one_line(exc)
            say(f"  {name}: warm-up {time.perf_counter() - t0:.1f} s ({v.status})")
            variants.append(v)
    live = [v for v in variants if v.status == "ok"]
    for r in range(args.rounds):
        eager = None
        for v in [v for v in live if v.status == "ok"]:
            try:
                res = serving.serve(v.step, model, v.cache, requests, sizes, v.prefill)
            except Exception as exc:  # the same on every rank: the row says why
                import hf_decode

                v.status = "error while serving: " + hf_decode.one_line(exc)
                continue
            # a graph compiled while serving belongs to the step that compiled it (decode
            # where both did: the row's compiled_while_serving says so)
            late = res.compiled_while_serving
            v.claim_graphs(known, "prefill" if late["prefill"] and not late["decode"]
                           else "decode")
            v.results.append(res)
            eager = res.tokens if v.name == "eager" else eager
            v.mismatched |= {rid for rid, t in res.tokens.items() if t != eager[rid]}
        say(f"  round {r + 1}/{args.rounds}: " + ", ".join(
            f"{v.name} {v.results[-1].wall_s:.2f} s" for v in live if v.status == "ok"))
    return [row_of(v, rank) for v in variants], live[0].results[0].tokens


def _skipped(name, why):
    v = Variant.__new__(Variant)
    v.name, v.status = name, why
    return v


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch/transformers deprecations
    from cli import import_runtime

    ns = {}
    import_runtime(ns)
    ns["require_torchrun"]("launch/serve.py")
    plat, rank, world, device = ns["init_distributed"](args.timeout)
    dist = ns["dist"]
    try:
        rows, eager_tokens = run(args, rank, world, plat, device)
        everything = ns["gather_rows"](dict(rows=rows, eager=eager_tokens))
    finally:
        dist.destroy_process_group()
    failures = _check(everything)
    ok = not failures
    if rank == 0:
        import serve_report

        serve_report.print_table(everything, args, ok)
        for failure in failures:
            print(f"FAILED: {failure}")
        if args.json:
            serve_report.write_json(args.json, everything, args)
        if args.plot:
            serve_report.plot(args.plot, everything[0]["rows"], args)
            print(f"plot: {args.plot}")
    return 0 if ok else 1


def _check(everything) -> list:
    """What fails (an empty list: nothing): every variant's tokens equal eager's on every rank,
    eager's agree across ranks, and no declared decode size nor prefill size was captured twice
    (over a variant's decode graphs, its prefill graphs) nor recaptured."""
    failures = []
    if any(e["eager"] != everything[0]["eager"] for e in everything):
        failures.append("eager's tokens differ between ranks")
    for rank, e in enumerate(everything):
        for r in e["rows"]:
            if r["status"] != "ok":
                continue
            if not r["same_as_eager"]:
                failures.append(f"rank {rank} {r['variant']}: requests "
                                f"{r['mismatched_requests']} differ from eager's tokens")
            for step, p in (("decode", ""), ("prefill", "prefill_")):
                twice = {k: n for k, n in r[p + "captures_per_size"].items() if n > 1}
                if twice or r[p + "recaptures"]:
                    failures.append(f"rank {rank} {r['variant']} {step}: sizes captured more "
                                    f"than once {twice}, recaptures {r[p + 'recaptures']}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
