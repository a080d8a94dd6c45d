"""One memory pool per device shared by every graph against one per graph
(``aclgraph_config.pool_scope`` "device" / "graph"), side by side in one run.

  python benchmarks/pool_scope.py [--layers 8] [--steps 300] [--engine-reps 3]

Two workloads, each compiled in npugraph_ex with either scope:

* the many-pieces model of ``benchmarks/pieces.py`` (``--layers`` layers, about two graphs per
  layer: a graph break on each side of the cache write): both scopes compiled, then their steps
  timed interleaved (median);
* transformers' continuous-batching engine (``launch/serve_engine.py``, preset tiny, a few
  requests, its npugraph_ex variant: piecewise, declared token counts), eager once for the
  tokens, then the two scopes alternately ``--engine-reps`` times (medians of the engine's
  tokens/s and p50 time between tokens, which is one engine step).

Printed per workload and scope: graph memory (the sum over the variant's graphs of
``capture_summary()``'s ``pool_bytes`` + ``input_bytes``; on CPU the record stand-in's pool
model, deterministic), the preserving output copies, and the per-step time. The times on a
shared CPU host are noisy; they include the record stand-in's model of a shared pool (a replay
overwrites the outputs of the captures made after it in its pool), which a device does not pay.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "launch"))

import _bench  # noqa: E402

import torch  # noqa: E402

SCOPES = ("graph", "device")


def _memory(graphs):
    """(graph bytes, preserving copies) of the capture summary's rows ``graphs``."""
    import torchair_dist

    summary = torchair_dist.capture_summary()
    rows = [summary[g] for g in graphs if g in summary]
    nbytes = sum((r.get("pool_bytes") or 0) + r.get("input_bytes", 0) for r in rows)
    copies = (sum(r.get("output_copies", 0) for r in rows),
              sum(r.get("output_copy_bytes", 0) for r in rows))
    return nbytes, copies


def _backend(scope):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.aclgraph_config.pool_scope = scope
    return torchair_dist.get_npu_backend(compiler_config=cfg)


def pieces(layers: int, tokens: int, steps: int):
    """{scope: (graph bytes, copies, median step seconds)} of the many-pieces model."""
    import pieces as model_mod
    import torchair_dist

    torch.manual_seed(0)
    model = model_mod.Model(layers).eval()
    x = torch.randn(tokens, model_mod.WIDTH)
    caches = [torch.zeros(256, model_mod.WIDTH) for _ in range(layers)]
    torch._dynamo.reset()
    torchair_dist.reset_capture_report()
    calls, graphs = {}, {}
    with torch.no_grad():
        expected = model(x, caches)
        for scope in SCOPES:
            before = set(torchair_dist.capture_summary())
            step = torch.compile(model_mod._own_classes(model), backend=_backend(scope))
            for _ in range(3):  # capture, then replays
                torch.testing.assert_close(step(x, caches), expected, rtol=1e-5, atol=1e-5)
            graphs[scope] = set(torchair_dist.capture_summary()) - before
            calls[scope] = (lambda s=step: s(x, caches))
        medians = _bench.interleaved_medians(calls, steps)
    return {s: _memory(graphs[s]) + (medians[s],) for s in SCOPES}


def _fresh_device_pool() -> None:
    """Each run starts a device pool of its own: a graph Dynamo compiled from a resume
    function (after a graph break) can outlive ``torch._dynamo.reset()`` (its compiled function
    stays in the globals of the module holding the code), and would keep the previous run's
    device pool, which the next run would then join."""
    from torchair_dist.backends.aclgraph import compile as acl_compile

    acl_compile._SHARED_POOLS.clear()


def engine(requests: int, reps: int):
    """{scope: (graph bytes after the queued pass, (min, max) after the timed rounds, copies,
    median p50 step ms, median tokens/s, same tokens)} of transformers' continuous-batching
    engine."""
    import warnings

    import serve_engine
    import serving
    import torchair_dist

    warnings.filterwarnings("ignore", category=FutureWarning)
    args = serve_engine.parse_args(["--preset", "tiny", "--requests", str(requests),
                                    "--variants", "eager", "npugraph_ex", "--rounds", "3"])
    model = serve_engine.build_model(args.preset, args.seed)
    stream = serving.request_stream(args.requests, args.rate, args.prompt, args.output,
                                    model.config.vocab_size, args.seed)
    made = torchair_dist.CompilerConfig
    runs = {s: [] for s in SCOPES}
    warm = []  # graph bytes after each run's queued pass (the same batches every time)
    waited = serve_engine._wait_all

    def wait_all(manager, ids, timeout_s=600.0):
        done = waited(manager, ids, timeout_s)
        if warm and warm[-1] is None:
            warm[-1] = serve_engine._graph_stats()["graph_bytes"]
        return done

    serve_engine._wait_all = wait_all
    try:
        with torch.no_grad():
            _, eager = serve_engine.run_variant("eager", model, stream, args, None)
            for _ in range(reps):
                for scope in SCOPES:
                    def scoped(scope=scope):
                        cfg = made()
                        cfg.aclgraph_config.pool_scope = scope
                        return cfg

                    torchair_dist.CompilerConfig = scoped  # serve_engine.compile_config's
                    _fresh_device_pool()
                    warm.append(None)
                    try:
                        row, _ = serve_engine.run_variant("npugraph_ex", model, stream, args,
                                                          eager)
                    finally:
                        torchair_dist.CompilerConfig = made
                    if row["status"] != "ok":
                        raise RuntimeError(f"pool_scope={scope}: {row['status']}")
                    copies = _memory(torchair_dist.capture_summary())[1]
                    runs[scope].append((warm[-1], row["graph_bytes"], copies, row["p50_ms"],
                                        row["tokens_per_s"], row["same_as_eager"]))
    finally:
        serve_engine._wait_all = waited
    out = {}
    for scope, rs in runs.items():
        assert len({r[0] for r in rs}) == 1, f"warm-up graph memory differs between runs: {rs}"
        out[scope] = (rs[0][0], (min(r[1] for r in rs), max(r[1] for r in rs)),
                      max(rs, key=lambda r: r[2][0])[2], statistics.median(r[3] for r in rs),
                      statistics.median(r[4] for r in rs), all(r[5] for r in rs))
    return out


def _copies(copies) -> str:
    return f"{copies[0]} ({copies[1]:,})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--engine-reps", type=int, default=3)
    p.add_argument("--skip-engine", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; one thread; times are medians on a shared host (noisy), "
          f"memory is the record stand-in's pool model (deterministic)")
    res = pieces(args.layers, args.tokens, args.steps)
    print(f"\npieces ({args.layers} layers, {args.tokens} x 64; median of {args.steps} steps)")
    print(f"{'pool_scope':<12} {'graph bytes':>12} {'copies (bytes)':>16} {'step us':>9} "
          f"{'vs graph':>9}")
    for s, (nbytes, copies, t) in res.items():
        print(f"{s:<12} {nbytes:>12,} {_copies(copies):>16} {t * 1e6:>9.1f} "
              f"{t / res['graph'][2]:>9.2f}")
    if not args.skip_engine:
        res = engine(args.requests, args.engine_reps)
        print(f"\ntransformers continuous batching (preset tiny, {args.requests} requests, "
              f"npugraph_ex; medians of {args.engine_reps} runs per scope, interleaved)")
        print("graph bytes: after the queued pass (the same batches every run), and the range "
              "after the timed rounds (their batches follow the arrival times); copies: the "
              "most of one run")
        print(f"{'pool_scope':<12} {'graph bytes':>12} {'after rounds':>20} "
              f"{'copies (bytes)':>18} {'p50 step ms':>12} {'tokens/s':>9} {'= eager':>8}")
        for s, (nbytes, after, copies, p50, tps, same) in res.items():
            span = f"{after[0]:,}-{after[1]:,}"
            print(f"{s:<12} {nbytes:>12,} {span:>20} {_copies(copies):>18} "
                  f"{p50:>12.2f} {tps:>9.1f} {str(same):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
