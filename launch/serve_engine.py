"""Serving with transformers' own engine: continuous batching of token batches
(``model.init_continuous_batching``), eager, inductor and ours side by side in one run.

  make serve-engine               # or:
  python launch/serve_engine.py --plot serve_engine.png --json serve_engine.json

transformers' engine flattens the tokens of mixed prefill and decode requests into one varlen
batch, pads the token count up to a multiple of ``q_padding_interval_size`` when the forward
is compiled, keeps a paged KV cache and runs the paged-cache update outside the compiled graph
(``@torch.compiler.disable``): the model is compiled in pieces, about two per layer. The
variants differ only in the ``CompileConfig`` given to the engine for its varlen and decode
paths: eager (none), inductor (torch.compile's default backend) and ours in each mode
(``torchair_dist.get_npu_backend``), with inductor's kernels inside our capture as one more.

The request stream is the serving loop's (``launch/serving.py``: seeded Poisson arrivals,
counted in steps; here a step is ``--step-ms`` of wall time). Per variant: a first pass with
every request queued before the engine starts (the same batches for every variant, so every
request's tokens must equal eager's: the check), which is also the warm-up (compiles and
captures); then ``--rounds`` timed passes with requests submitted at their arrival times.
Printed: tokens/s (median over rounds), p50/p99 time between a request's consecutive tokens,
warm-up time, captures and graph memory (``torchair_dist.capture_summary()``), frames compiled
after the warm-up (0 expected: the engine deep-copies its configs, our backend survives
that), and whether every request's tokens equal eager's. Exit 1 when they do not.

One process: transformers' engine also runs a tensor-parallel model (``tp_plan="auto"``, one
process per rank, rank 0 submitting), which ``tests/models/test_cb_engine.py`` checks on 2
ranks; the timings here are one rank's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS = ["eager", "inductor", "npugraph_ex", "npugraph_ex+inductor_kernels", "max-autotune"]


def parse_args(argv=None):
    from serve import PRESETS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="small", choices=sorted(PRESETS), help="model size")
    p.add_argument("--requests", type=int, default=16, help="requests in the stream")
    p.add_argument("--rate", type=float, default=1.0, help="arrivals per step (Poisson)")
    p.add_argument("--step-ms", type=float, default=20.0, help="wall time of one arrival step")
    p.add_argument("--prompt", type=int, nargs=2, default=[4, 24], metavar=("MIN", "MAX"))
    p.add_argument("--output", type=int, nargs=2, default=[8, 16], metavar=("MIN", "MAX"))
    p.add_argument("--max-batch-tokens", type=int, default=64,
                   help="the engine's token budget per batch")
    p.add_argument("--q-interval", type=int, default=16,
                   help="the engine pads the token count to a multiple of this")
    p.add_argument("--kv-interval", type=int, default=64,
                   help="the engine pads the KV length attention reads to a multiple of this")
    p.add_argument("--kv-tokens", type=int, default=1024,
                   help="KV cache size in tokens (pages of 16)")
    p.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    p.add_argument("--rounds", type=int, default=3, help="timed passes per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (1 keeps timings stable on a shared machine)")
    p.add_argument("--plot", default=None, help="write the plot (PNG) here")
    p.add_argument("--json", default=None, help="write every row as JSON here")
    args = p.parse_args(argv)
    if args.requests < 1 or args.rate <= 0 or args.max_batch_tokens < args.q_interval \
            or args.q_interval < 1 or args.prompt[0] < 1 or args.prompt[0] > args.prompt[1] \
            or args.output[0] > args.output[1]:
        p.error("counts positive, ranges MIN <= MAX, q interval <= max batch tokens")
    return args


def token_sizes(args):
    """The token counts the engine's padded batches can have: the multiples of the interval
    up to the token budget (vLLM's ``cudagraph_capture_sizes`` are token counts too)."""
    return list(range(args.q_interval, args.max_batch_tokens + 1, args.q_interval))


def compile_config(name: str, args):
    """The ``CompileConfig`` the engine gets for both paths (None: eager)."""
    from transformers import CompileConfig

    if name == "eager":
        return None
    if name == "inductor":
        return CompileConfig(backend="inductor", fullgraph=False, mode=None)
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "max-autotune" if name == "max-autotune" else "npugraph_ex"
    if name.endswith("+inductor_kernels"):
        cfg.experimental_config.inductor_kernels = True
    if name != "max-autotune":
        # attention (SDPA) runs eagerly between captured pieces: it is the only op whose
        # shapes follow the KV length; the pieces are captured per token count, once per
        # declared count (the engine's padded counts), at the first call, largest first; the
        # engine pads the token count itself, so a count not declared would run eagerly
        cfg.npugraphex_config.piecewise = True
        cfg.npugraphex_config.capture_sizes = token_sizes(args)
    # mode=None: transformers' default "reduce-overhead" would reach our backend as
    # torch.compile's mode, which names another mode than the configuration's
    return CompileConfig(backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=False, mode=None)


def engine_config(name: str, args):
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    cc = compile_config(name, args)
    kw = dict(page_size=16, num_blocks=-(-args.kv_tokens // 16),
              max_batch_tokens=args.max_batch_tokens, q_padding_interval_size=args.q_interval,
              kv_padding_interval_size=args.kv_interval, seed=args.seed)
    if cc is not None:
        kw.update(varlen_compile_config=cc, decode_compile_config=cc)
    return ContinuousBatchingConfig(**kw)


def _wait_all(manager, ids, timeout_s=600.0):
    """Every request's finished output, by id."""
    done, deadline = {}, time.monotonic() + timeout_s
    while len(done) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids) - len(done)} of {len(ids)} requests unfinished "
                               f"after {timeout_s:.0f} s")
        out = manager.get_result(timeout=0.5)
        if out is not None and out.is_finished():
            done[out.request_id] = out
        elif out is None and not manager.is_running():
            raise RuntimeError("the engine's generation thread stopped")
    return done


def _graphs_now():
    import torchair_dist

    return set(torchair_dist.capture_report())


def run_variant(name, model, requests, args, eager_tokens):
    """One variant: the queued pass (warm-up and token check), then the timed rounds."""
    import torch
    from torch._dynamo.utils import counters
    from transformers import GenerationConfig

    import torchair_dist

    torch._dynamo.reset()
    torchair_dist.reset_capture_report()
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                           max_new_tokens=max(r.out_len for r in requests))
    manager = model.init_continuous_batching(generation_config=gen,
                                             continuous_batching_config=engine_config(name, args))
    row = dict(variant=name, status="ok")
    try:
        t0 = time.perf_counter()
        ids = [manager.add_request(r.prompt, request_id=f"q{r.rid}", max_new_tokens=r.out_len)
               for r in requests]
        manager.start()
        queued = _wait_all(manager, ids)
        row["warm_up_s"] = time.perf_counter() - t0
        tokens = {r.rid: list(queued[f"q{r.rid}"].generated_tokens) for r in requests}
        row["same_as_eager"] = eager_tokens is None or tokens == eager_tokens
        row["mismatched"] = [] if eager_tokens is None else sorted(
            rid for rid in tokens if tokens[rid] != eager_tokens[rid])
        frames_after_warm_up = counters["stats"]["unique_graphs"]
        rates, gaps = [], []
        for rnd in range(args.rounds):
            start = time.perf_counter()
            ids = []
            for r in requests:
                delay = start + r.arrival * args.step_ms / 1e3 - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                ids.append(manager.add_request(r.prompt, request_id=f"r{rnd}_{r.rid}",
                                               max_new_tokens=r.out_len, record_timestamps=True))
            outs = _wait_all(manager, ids)
            wall = max(o.timestamps[-1] for o in outs.values()) - start
            rates.append(sum(len(o.generated_tokens) for o in outs.values()) / wall)
            gaps += [b - a for o in outs.values() for a, b in zip(o.timestamps, o.timestamps[1:])]
        row.update(tokens_per_s=statistics.median(rates), tokens_per_s_per_round=rates,
                   p50_ms=_percentile(gaps, 50) * 1e3, p99_ms=_percentile(gaps, 99) * 1e3,
                   frames_after_warm_up=counters["stats"]["unique_graphs"] - frames_after_warm_up)
        row.update(_graph_stats())
        return row, tokens
    except Exception as exc:  # the row says why; the other variants still run
        row["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return row, None
    finally:
        manager.stop(block=True, timeout=30)
        model.destroy_cached_continuous_batching_manager()


def _graph_stats():
    import torchair_dist

    summary = torchair_dist.capture_summary()
    report = torchair_dist.capture_report()
    keys = [e for graph in report.values() for k, e in graph.items() if k != "*"]
    nbytes = [r["pool_bytes"] + r.get("input_bytes", 0) for r in summary.values()
              if "pool_bytes" in r]
    return dict(graphs=len(report), captures=sum(e.get("captures", 0) for e in keys),
                max_captures_per_key=max((e.get("captures", 0) for e in keys), default=0),
                graph_bytes=sum(nbytes) if nbytes else None)


def _percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def build_model(preset: str, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    from serve import PRESETS
    from tiny_config import tiny_config

    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_config("llama", **PRESETS[preset])).eval()


def print_table(rows, args) -> None:
    print(f"\n{'variant':<29} {'tok/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'warm-up s':>9} "
          f"{'graph mem':>9} {'captures':>9} {'frames':>6} {'=eager':>6}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['variant']:<29} {r['status']}")
            continue
        mem = "-" if r.get("graph_bytes") is None else f"{r['graph_bytes'] / 2 ** 20:.1f} MiB"
        print(f"{r['variant']:<29} {r['tokens_per_s']:>7.0f} {r['p50_ms']:>7.2f} "
              f"{r['p99_ms']:>7.2f} {r['warm_up_s']:>9.1f} {mem:>9} {r['captures']:>9} "
              f"{r['frames_after_warm_up']:>6} {str(r['same_as_eager']):>6}")
    ok = {r["variant"]: r for r in rows if r["status"] == "ok"}
    if "inductor" in ok:
        base = ok["inductor"]["tokens_per_s"]
        print("tokens/s relative to inductor: " + ", ".join(
            f"{n} {r['tokens_per_s'] / base:.2f}x" for n, r in ok.items() if n != "inductor"))
    print("tok/s: generated tokens / wall time of a timed pass, median over rounds; p50/p99: "
          "time between a request's consecutive tokens; warm-up: the queued pass (compiles and "
          "captures included); captures / graph mem: torchair_dist.capture_summary(); frames: "
          "graphs compiled after the warm-up; =eager: every request's tokens in the queued "
          "pass equal eager's.")


def plot(path, rows, args) -> None:
    import datetime

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    import serve_report

    done = [r for r in rows if r["status"] == "ok"]
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(12, 4.5))
    serve_report.throughput_and_latency(ax_t, ax_l, done)
    fig.suptitle(f"transformers' continuous batching, Llama {args.preset}, {args.requests} "
                 f"requests, token sizes {token_sizes(args)}; torch {torch.__version__}, "
                 f"{datetime.date.today().isoformat()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import json
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.threads:
        torch.set_num_threads(args.threads)
    import serving

    model = build_model(args.preset, args.seed)
    requests = serving.request_stream(args.requests, args.rate, args.prompt, args.output,
                                      model.config.vocab_size, args.seed)
    print(f"torchair_dist serve-engine: Llama preset {args.preset} "
          f"({model.config.num_hidden_layers} layers, hidden {model.config.hidden_size}), "
          f"torch {torch.__version__}; {len(requests)} requests, rate {args.rate}/step of "
          f"{args.step_ms} ms, token sizes {token_sizes(args)}, {args.rounds} rounds",
          flush=True)
    rows, eager = [], None
    with torch.no_grad():
        for name in ["eager"] + [n for n in args.variants if n != "eager"]:
            row, tokens = run_variant(name, model, requests, args, eager)
            eager = tokens if name == "eager" else eager
            rows.append(row)
            print(f"  {name}: {row['status']}", flush=True)
    print_table(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, args=vars(args), rows=rows), f, indent=1)
    if args.plot:
        plot(args.plot, rows, args)
        print(f"plot: {args.plot}")
    ok = all(r["status"] != "ok" or r["same_as_eager"] for r in rows)
    return 0 if ok and all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
