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
counted in steps; here a step is ``--step-ms`` of wall time). The default stream (16 requests,
one per 2 ms step) arrives faster than any variant serves it: the engine is saturated, and
tokens/s measures the variant's throughput. Arrival-bound (a slow stream: ``--step-ms 20``),
every variant finishes about when the last request arrives and tokens/s measures the stream;
the table names a variant that was.

Each variant runs in a child process of its own ("spawn": Dynamo caches of its own, the model
built from the same seed, its weights' checksum compared with eager's). Per variant, in turn,
eager's first: a first pass with every request queued before the engine starts (the same
batches for every variant, so every request's tokens must equal eager's: the check), which is
also the warm-up (compiles and captures). Then ``--rounds`` timed rounds with requests
submitted at their arrival times, interleaved: round by round, each variant's timed round in
turn, the starting variant rotated every round, one child working at a time. Every variant's
rounds spread over the same wall-clock period, so a slow spell of a shared machine falls on
every variant alike rather than on whichever ran then. A child that fails gets its error in
its row; one silent for ``--child-timeout`` seconds is killed and named. ``--sequential`` runs
every variant in this process instead, one after the other (``torch._dynamo.reset()`` between
them), each its warm-up then its rounds: for debugging, its timings drift between variants.
One intra-op thread by default (``--threads``): on a shared 2-core machine, rounds run with 2
threads were bimodal, some 25x slower than the rest, whenever other load met them.
Printed: tokens/s (median over rounds), p50/p99 time between a request's consecutive tokens,
warm-up time, captures and graph memory (``torchair_dist.capture_summary()``), frames compiled
after the warm-up (0 expected: the engine deep-copies its configs, our backend survives
that), and whether every request's tokens equal eager's. Exit 1 when they do not, or when a
variant failed.

One rank: transformers' engine also runs a tensor-parallel model (``tp_plan="auto"``, one
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
    p.add_argument("--step-ms", type=float, default=2.0,
                   help="wall time of one arrival step; the default makes requests arrive "
                        "faster than any variant serves them (saturated): tok/s measures a "
                        "variant's throughput only then, arrival-bound it measures the stream")
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
    p.add_argument("--rounds", type=int, default=50,
                   help="timed passes per variant (tok/s: their median)")
    p.add_argument("--sequential", action="store_true",
                   help="every variant in this process, one after the other, each its warm-up "
                        "then its rounds back to back (debugging; timings drift between "
                        "variants); default: one child process per variant, rounds interleaved")
    p.add_argument("--child-timeout", type=float, default=900.0,
                   help="seconds a variant's child may take to answer (start, warm-up, one "
                        "round) before it is killed as hung")
    p.add_argument("--layer-ints", choices=("static", "dynamic"), default="static",
                   help="Dynamo's treatment of integer module attributes (the attention's "
                        "layer_idx), in every variant: static (torch's default: one attention "
                        "graph per layer, and past Dynamo's recompile limit the attention runs "
                        "eagerly) or dynamic (allow_unspec_int_on_nn_module: one for all layers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads in each variant's process (0: torch's default). "
                        "1 keeps timings stable on a shared machine: with every core's worth of "
                        "threads, a round that meets other load ran up to 25x slower")
    p.add_argument("--plot", default=None, help="write the plot (PNG) here")
    p.add_argument("--json", default=None, help="write every row as JSON here")
    args = p.parse_args(argv)
    if args.requests < 1 or args.rate <= 0 or args.max_batch_tokens < args.q_interval \
            or args.q_interval < 1 or args.prompt[0] < 1 or args.prompt[0] > args.prompt[1] \
            or args.output[0] > args.output[1] or args.rounds < 1 or args.child_timeout <= 0:
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


class VariantRunner:
    """One variant's engine over one model: :meth:`warm_up` (the queued pass: compiles,
    captures, tokens for the check), then :meth:`timed_round` any number of times, then
    :meth:`finish` (the numbers read after the rounds) and :meth:`close`. Interleaved, each
    child process holds one (:func:`_child_main`); ``--sequential`` makes them in turn in this
    process, on one model."""

    def __init__(self, name, args, requests, model=None):
        import torch

        import torchair_dist

        self.name, self.args, self.requests = name, args, requests
        self.model = build_model(args.preset, args.seed) if model is None else model
        self.checksum = weights_checksum(self.model)
        torch.set_grad_enabled(False)  # this thread's; the engine's thread runs in no_grad too
        torch._dynamo.config.allow_unspec_int_on_nn_module = args.layer_ints == "dynamic"
        torch._dynamo.reset()
        torchair_dist.reset_capture_report()
        self.manager, self._frames = None, 0

    def warm_up(self, _=None):
        """The queued pass, every request queued before the engine starts: the same batches
        for every variant, so its tokens are compared with eager's."""
        from transformers import GenerationConfig

        requests = self.requests
        gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                               max_new_tokens=max(r.out_len for r in requests))
        self.manager = self.model.init_continuous_batching(
            generation_config=gen, continuous_batching_config=engine_config(self.name, self.args))
        t0 = time.perf_counter()
        ids = [self.manager.add_request(r.prompt, request_id=f"q{r.rid}",
                                        max_new_tokens=r.out_len) for r in requests]
        self.manager.start()
        queued = _wait_all(self.manager, ids)
        warm_up_s = time.perf_counter() - t0
        self._frames = _frames_compiled()
        return dict(warm_up_s=warm_up_s,
                    tokens={r.rid: list(queued[f"q{r.rid}"].generated_tokens) for r in requests})

    def timed_round(self, rnd):
        """Requests submitted at their arrival times (``--step-ms`` per step): tokens/s of the
        round, the gaps between each request's consecutive tokens, and the share of the
        round's wall time that passed before the last arrival (near 1: arrival-bound)."""
        manager, step_s = self.manager, self.args.step_ms / 1e3
        start = time.perf_counter()
        ids = []
        for r in self.requests:
            delay = start + r.arrival * step_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ids.append(manager.add_request(r.prompt, request_id=f"r{rnd}_{r.rid}",
                                           max_new_tokens=r.out_len, record_timestamps=True))
        last_arrival = time.perf_counter() - start
        outs = _wait_all(manager, ids)
        wall = max(o.timestamps[-1] for o in outs.values()) - start
        return dict(rate=sum(len(o.generated_tokens) for o in outs.values()) / wall,
                    gaps=[b - a for o in outs.values()
                          for a, b in zip(o.timestamps, o.timestamps[1:])],
                    arrival_share=last_arrival / wall)

    def finish(self, _=None):
        return dict(frames_after_warm_up=_frames_compiled() - self._frames, **_graph_stats())

    def close(self, _=None):
        if self.manager is not None:
            manager, self.manager = self.manager, None
            manager.stop(block=True, timeout=30)
            self.model.destroy_cached_continuous_batching_manager()


def _frames_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def weights_checksum(model) -> str:
    """sha256 over every parameter and buffer, by name (equal in every child built from one
    seed)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        h.update(name.encode())
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _why(exc) -> str:
    if not isinstance(exc, BaseException):
        return str(exc)
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, ChildFailed) else text


def check_tokens(row, tokens, eager_tokens) -> None:
    row["same_as_eager"] = eager_tokens is None or tokens == eager_tokens
    row["mismatched"] = [] if eager_tokens is None else sorted(
        rid for rid in tokens if tokens[rid] != eager_tokens.get(rid))


def close_row(row, rounds, final) -> None:
    """The row's numbers from its timed rounds (``timed_round``'s dicts) and ``finish``'s."""
    rates = [r["rate"] for r in rounds]
    gaps = [g for r in rounds for g in r["gaps"]]
    row.update(tokens_per_s=statistics.median(rates), tokens_per_s_per_round=rates,
               p50_ms=_percentile(gaps, 50) * 1e3, p99_ms=_percentile(gaps, 99) * 1e3,
               arrival_share=statistics.median(r["arrival_share"] for r in rounds), **final)


def run_sequential(names, args, requests, model, log=print, runner_cls=None):
    """``--sequential``: each variant in turn in this process on one model
    (``torch._dynamo.reset()`` between them), its warm-up then its rounds back to back."""
    rows, eager = [], None
    for name in names:
        row, runner = dict(variant=name, status="ok"), None
        try:
            runner = (runner_cls or VariantRunner)(name, args, requests, model)
            row["weights"] = runner.checksum
            got = runner.warm_up()
            row["warm_up_s"] = got["warm_up_s"]
            check_tokens(row, got["tokens"], eager)
            eager = got["tokens"] if name == "eager" else eager
            close_row(row, [runner.timed_round(rnd) for rnd in range(args.rounds)],
                      runner.finish())
        except Exception as exc:  # the row says why; the other variants still run
            row["status"] = f"error: {_why(exc)}"
        finally:
            if runner is not None:
                runner.close()
        rows.append(row)
        log(f"  {name}: {row['status']}")
    return rows, [[n] * args.rounds for n in names]


# --- interleaved: one child process per variant ----------------------------------------------

def _child_main(name, args, requests, conn, runner_cls):
    """A variant's child: makes its runner (the model built from the seed), sends the weights'
    checksum, then answers the parent's commands one at a time (``(method, argument)`` ->
    ``("ok", result)`` or ``("error", why)``) until ``("stop", None)``."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    runner = None
    try:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        runner = runner_cls(name, args, requests)
        conn.send(("ok", runner.checksum))
        while True:
            cmd, arg = conn.recv()
            if cmd == "stop":
                break
            try:
                conn.send(("ok", getattr(runner, cmd)(arg)))
            except Exception as exc:
                conn.send(("error", _why(exc)))
    except Exception as exc:
        conn.send(("error", _why(exc)))
    finally:
        if runner is not None:
            runner.close()
        conn.close()


class ChildFailed(Exception):
    """A child that gave no answer: it exited, or it hung (``hung``) and was killed."""

    def __init__(self, msg, hung=False):
        super().__init__(msg)
        self.hung = hung


class Child:
    """The parent's end of one variant's child process."""

    def __init__(self, ctx, name, args, requests, runner_cls):
        self.name, self.timeout = name, args.child_timeout
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=_child_main, name=f"serve-engine {name}", daemon=True,
                                args=(name, args, requests, child_conn, runner_cls))
        self.proc.start()
        child_conn.close()

    def _exited(self):
        self.proc.join(5)
        return ChildFailed(f"child exited (code {self.proc.exitcode})")

    def answer(self):
        """The child's next answer, ``("ok", result)`` or ``("error", why)``; ChildFailed when
        the child exits, or stays silent for ``--child-timeout`` seconds (it is killed)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self.conn.poll(0.2):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise self._exited() from None
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise self._exited()
            if time.monotonic() > deadline:
                self.kill()
                raise ChildFailed(f"hung: no answer in {self.timeout:g} s (killed)", hung=True)

    def ask(self, cmd, arg=None):
        try:
            self.conn.send((cmd, arg))
        except OSError:
            raise self._exited() from None
        return self.answer()

    def stop(self, timeout=60.0) -> bool:
        """Ends the child: asks it to stop, joins it, kills it after ``timeout`` s. True when
        it ended by itself."""
        if self.proc.is_alive():
            try:
                self.conn.send(("stop", None))
            except OSError:
                pass
            self.proc.join(timeout)
        clean = not self.proc.is_alive()
        self.kill()
        self.conn.close()
        return clean

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)


def round_order(names, rnd):
    """Round ``rnd``'s order: the variants (those still running) rotated by ``rnd``, each
    starting a round in turn."""
    k = rnd % len(names)
    return names[k:] + names[:k]


def run_interleaved(names, args, requests, log=print, runner_cls=VariantRunner):
    """One child process per variant ("spawn": Dynamo caches of its own, its model built from
    the seed, its weights' checksum compared with the first variant's). The warm-up (queued
    pass) in each child in turn, eager's first (its tokens are the reference); then, round by
    round, each variant's timed round in turn, the order rotated every round. One child works at
    a time, the others wait on their pipe, so every variant's rounds spread over the same
    wall-clock period. A child that fails gets its error in its row, the others go on; a child
    that hangs is killed. Returns the rows and the order the rounds ran in."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    rows = {n: dict(variant=n, status="ok") for n in names}
    rounds = {n: [] for n in names}
    children, schedule, hung = {}, [], []

    def ask(name, cmd, arg=None, first=False):
        """The child's result; None when it failed (its row says why, the child is ended)."""
        try:
            child = children[name]
            status, got = child.answer() if first else child.ask(cmd, arg)
        except ChildFailed as exc:
            status, got = "error", exc
            if exc.hung:
                hung.append(name)
        if status == "ok":
            return got
        rows[name]["status"] = f"error: {_why(got)}"
        children.pop(name).stop(timeout=10)
        log(f"  {name}: {rows[name]['status']}")
        return None

    try:
        for name in names:  # all started at once: imports and model builds are not timed
            children[name] = Child(ctx, name, args, requests, runner_cls)
        for name in names:
            rows[name]["weights"] = ask(name, "ready", first=True)
        ref = rows[names[0]]["weights"]
        for name in list(children):
            if ref is not None and rows[name]["weights"] != ref:
                rows[name]["status"] = (f"error: weights differ from {names[0]}'s (checksum "
                                        f"{rows[name]['weights']}, not {ref})")
                children.pop(name).stop(timeout=10)
        eager = None
        for name in [n for n in names if n in children]:
            got = ask(name, "warm_up")
            if got is not None:
                rows[name]["warm_up_s"] = got["warm_up_s"]
                check_tokens(rows[name], got["tokens"], eager)
                eager = got["tokens"] if name == "eager" else eager
                log(f"  {name}: warm-up {got['warm_up_s']:.1f} s")
        for rnd in range(args.rounds):
            schedule.append(round_order([n for n in names if n in children], rnd))
            for name in schedule[-1]:
                got = ask(name, "timed_round", rnd)
                if got is not None:
                    rounds[name].append(got)
        for name in [n for n in names if n in children]:
            got = ask(name, "finish")
            if got is not None:
                close_row(rows[name], rounds[name], got)
                log(f"  {name}: {rows[name]['status']}")
    finally:
        for name, child in list(children.items()):
            if not child.stop():
                hung.append(name)
                if rows[name]["status"] == "ok":
                    rows[name]["status"] = "error: hung: did not stop (killed)"
    if hung:
        log(f"hung, killed: {', '.join(hung)}")
    return [rows[n] for n in names], schedule


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
    # the last request's own tokens take a while after it arrives, so even a stream that
    # sets the pace alone leaves a tail: half the round already says the stream set it
    bound = [r["variant"] for r in ok.values() if r.get("arrival_share", 0) > 0.5]
    if bound:
        print(f"arrival-bound (the last request arrived after half of a round's wall time, "
              f"median over rounds): {', '.join(bound)}; tok/s measures the stream more than "
              f"the variant: raise --rate or lower --step-ms")
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


def stream(args):
    """The serving loop's request stream (``launch/serving.py``) for the preset's vocabulary."""
    import serving
    from serve import PRESETS
    from tiny_config import tiny_config

    vocab = tiny_config("llama", **PRESETS[args.preset]).vocab_size
    return serving.request_stream(args.requests, args.rate, args.prompt, args.output, vocab,
                                  args.seed)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import json
    import warnings

    import torch

    from serve import PRESETS

    warnings.filterwarnings("ignore", category=FutureWarning)
    requests = stream(args)
    names = ["eager"] + [n for n in args.variants if n != "eager"]
    p = PRESETS[args.preset]
    print(f"torchair_dist serve-engine: Llama preset {args.preset} "
          f"({p['num_hidden_layers']} layers, hidden {p['hidden_size']}), "
          f"torch {torch.__version__}; {len(requests)} requests, rate {args.rate}/step of "
          f"{args.step_ms} ms (last arrival at {requests[-1].arrival * args.step_ms:.0f} ms), "
          f"token sizes {token_sizes(args)}, {args.rounds} rounds, "
          f"{args.threads or 'torch default'} intra-op thread(s), "
          f"{'sequential' if args.sequential else 'interleaved, one process per variant'}",
          flush=True)
    if args.sequential:
        if args.threads:
            torch.set_num_threads(args.threads)
        with torch.no_grad():
            rows, schedule = run_sequential(names, args, requests,
                                            build_model(args.preset, args.seed),
                                            log=lambda m: print(m, flush=True))
    else:
        rows, schedule = run_interleaved(names, args, requests,
                                         log=lambda m: print(m, flush=True))
    print_table(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, args=vars(args), rows=rows,
                           round_order=schedule), f, indent=1)
    if args.plot:
        plot(args.plot, rows, args)
        print(f"plot: {args.plot}")
    ok = all(r["status"] != "ok" or r["same_as_eager"] for r in rows)
    return 0 if ok and all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
