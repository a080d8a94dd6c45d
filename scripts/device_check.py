"""The device check: ``make gpu-check`` (CUDA) / ``make npu-check`` (Ascend, torch_npu).

  python scripts/device_check.py --device cuda|npu [--tokens 16] [--bench-models small]
  python scripts/device_check.py --dry-run          # the same checks on CPU (record stand-in)
  make gpu-check PY=python3                         # the same, with an interpreter that has torch

Needs only an interpreter with torch (and transformers for the decode checks): the script puts
the checkout's root on ``sys.path`` itself, so the project runs from the source tree with no
install step. Runs, on one device, the checks CPU CI cannot make, then the interleaved decode
benchmark (``benchmarks/decode_bench.py``), and prints one table. Every compiled call is
compared with eager, replays included (each check also asserts how many calls replayed).
Checks (each PASS / FAIL / SKIP with a reason):

* ACL capture/replay (mode ``npugraph_ex``): static inputs (parameters used in place, new data
  every call), input mutation (and recapture when the mutated input moves), outputs kept across
  another shape's replay raises (shared pool), recapture past the capture limit, 32 declared
  capture sizes within 1.25x the memory of the largest alone, streams and events
  (a user event recorded inside the compiled region and waited on outside);
* the stream programs of the streams issue (``tests/stream_programs.py``, the ones the unit tests
  run) on the device's real streams, three calls each;
* collectives inside a capture on a world-size-1 process group (NCCL / HCCL): all_reduce,
  all_gather_into_tensor and barrier, captured (not skipped) and replayed; then the same on one
  rank per device (up to 4) when the machine has two or more (the dry run: 2 gloo ranks);
* HF Llama (tiny random config) greedy decode with a ``StaticCache`` in every mode
  (npugraph_ex, reduce-overhead, max-autotune) == eager.

Benchmark: ``benchmarks/decode_bench.py`` in this process, every variant interleaved (eager,
ours npugraph_ex, ours with inductor kernels, torch's ``cudagraphs`` backend, inductor,
inductor reduce-overhead) on the 4-layer Llama and the 2048-hidden bf16 Llama (the dry run: a
tiny Llama, CPU variants only). A benchmark row fails when a variant errors or one of ours
decodes other tokens than eager.

Exit status: 0 all checks passed (SKIPs allowed), 1 a check failed, 2 no such device.
Sized to finish in 8 minutes on one GPU (``--bench-models small`` for less).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, "launch"), os.path.join(ROOT, "benchmarks"), ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)  # the project from this checkout: no install needed

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MODES = ("npugraph_ex", "reduce-overhead", "max-autotune")


class Skip(Exception):
    """A check that does not apply here (the message says why)."""


# -- device selection ------------------------------------------------------------------------
def resolve_device(name: str, dry_run: bool) -> torch.device:
    """The device to check, or exit 2 with a message that says what is missing."""
    if dry_run:
        os.environ["TORCHAIR_DIST_PLATFORM"] = "cpu"
        os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = "record"
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            _no_device(f"no CUDA device: torch.cuda.is_available() is False (torch "
                       f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'})")
        return torch.device("cuda", 0)
    from torchair_dist import platform

    if platform.current().name != "npu":
        _no_device(f"no Ascend NPU: {platform.npu_status()}")
    return torch.device("npu", 0)


def _no_device(why: str) -> None:
    print(f"device check: {why}.\nRun it on a machine with that device (and a torch build for "
          f"it), or add --dry-run to run the same checks on CPU with the recording stand-in.",
          file=sys.stderr)
    sys.exit(2)


def sync(device: torch.device) -> None:
    if device.type != "cpu":
        getattr(torch, device.type).synchronize()


# -- helpers -----------------------------------------------------------------------------------
def compile_ours(fn, mode="npugraph_ex", dynamic=False, **options):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    for path, value in options.items():
        cfg.option(path).set(value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        backend = torchair_dist.get_npu_backend(compiler_config=cfg)
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)


def short(exc: BaseException, width: int = 100) -> str:
    """The telling line of an error (Dynamo wraps backend errors in a long first line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line and not line.startswith("backend="):
            return line[:width]
    return (lines[0] if lines else type(exc).__name__)[:width]


def close(a, b, tol=1e-4) -> None:
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def one_key() -> Dict:
    import torchair_dist

    report = torchair_dist.capture_report()
    assert len(report) == 1, f"expected one graph, report: {report}"
    (keys,) = report.values()
    return keys


def replayed(calls: int) -> Dict[str, int]:
    """Assert every call after a graph key's capture replayed it: per graph, captures +
    replays == ``calls`` (each of those calls was compared with eager by the check)."""
    import torchair_dist

    seen = {}
    for graph, keys in torchair_dist.capture_report().items():
        made = sum(c.get("captures", 0) for c in keys.values())
        again = sum(c.get("replays", 0) for c in keys.values())
        assert made + again == calls and again > 0, \
            f"graph {graph}: {made} captures + {again} replays for {calls} calls: {keys}"
        seen[graph] = again
    assert seen, "no graph was captured"
    return seen


def not_skipped(caught) -> None:
    skips = [str(w.message) for w in caught if "not captured" in str(w.message)]
    assert not skips, skips[0]


# -- checks ------------------------------------------------------------------------------------
def check_static_inputs(dev):
    lin = torch.nn.Linear(32, 16).to(dev)
    f = compile_ours(lin)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(4, 32, device=dev)
            close(f(x), lin(x))
    not_skipped(caught)
    (counts,) = one_key().values()
    assert (counts["captures"], counts["replays"]) == (1, 2), counts
    return "parameters in place, 1 capture + 2 replays, each == eager"


def check_mutation(dev):
    def g(x, acc):
        acc.add_(x)
        return acc * 2

    f = compile_ours(g)
    acc, ref = torch.zeros(8, device=dev), torch.zeros(8, device=dev)
    for _ in range(3):
        x = torch.randn(8, device=dev)
        close(f(x, acc), g(x, ref))
        close(acc, ref)
    other, other_ref = torch.ones(8, device=dev), torch.ones(8, device=dev)
    x = torch.randn(8, device=dev)
    close(f(x, other), g(x, other_ref))
    close(other, other_ref)
    close(acc, ref)
    (counts,) = one_key().values()
    assert counts["recaptures"] == 1, counts
    return f"mutation written back; moved input recaptured ({counts['capture_reasons']})"


def check_pool(dev):
    """Captures of one graph share a pool: outputs are handed out without copies; one kept
    (with a view of it) across another shape's replay, which may reuse its memory, is moved
    onto a copy first and keeps its values (one copy, counted); dropped ones cost no copy."""
    import torchair_dist

    f = compile_ours(lambda x: x * 2 + 1, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, v in ((3, 1.0), (4, 1.0), (3, 5.0)):
            close(f(torch.full((n,), v, device=dev)), torch.full((n,), 2 * v + 1, device=dev))
        kept = f(torch.full((4,), 2.0, device=dev))
        view = kept[1:3]
        ptr = kept.data_ptr()
        close(f(torch.full((3,), 7.0, device=dev)), torch.full((3,), 15.0, device=dev))
    sync(dev)
    close(kept, torch.full((4,), 5.0, device=dev))
    close(view, torch.full((2,), 5.0, device=dev))
    from torchair_dist.backends.aclgraph.outputs import CAN_PRESERVE

    if CAN_PRESERVE or dev.type == "cpu":  # torch 2.11 on a device: every output copied
        if CAN_PRESERVE:  # torch 2.11's CPU stand-in moves its graph, the caller keeps memory
            assert kept.data_ptr() != ptr, "the kept output was not moved onto a copy"
        (summary,) = torchair_dist.capture_summary().values()
        assert summary["output_copies"] == 1, summary
    replayed(5)
    return "every replay == eager; an output (and its view) kept across another replay " \
           "keeps its values, 1 copy"


def check_capture_sizes(dev):
    """32 declared batch sizes captured largest first into one pool: graph memory at most
    1.25x that of the largest size alone; the input buffers of the largest alone."""
    def memory(sizes):
        import torchair_dist

        torch._dynamo.reset()
        torchair_dist.reset_capture_report()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).to(dev).eval()
        f = compile_ours(m, dynamic=True, **{"npugraphex_config.capture_sizes": sizes,
                                             "npugraphex_config.pad_to_capture_size": True})
        with torch.no_grad():
            for n in (max(sizes), 5, 17):
                x = torch.randn(n, 256, device=dev)
                close(f(x), m(x))
        (summary,) = torchair_dist.capture_summary().values()
        return summary

    alone, many = memory([33]), memory(list(range(2, 34)))  # 32 sizes (1: a graph of its own)
    ratio = many["pool_bytes"] / max(alone["pool_bytes"], 1)
    assert ratio <= 1.25, (many, alone)
    assert many["input_bytes"] == alone["input_bytes"], (many, alone)
    return (f"32 sizes: pool {many['pool_bytes']} B vs {alone['pool_bytes']} B alone "
            f"(x{ratio:.2f}), capture {many.get('capture_time_s', 0):.2f} s")


def check_recapture(dev):
    f = compile_ours(lambda x: x * 3, dynamic=True,
                     **{"debug.aclgraph.static_capture_size_limit": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (2, 3, 2, 4, 5, 3):
            x = torch.randn(n, device=dev)
            close(f(x), x * 3)
    hits = [w for w in caught if "static_capture_size_limit reached" in str(w.message)]
    assert len(hits) == 1, [str(w.message) for w in caught]
    return "2 shapes captured, limit reached once; new shapes eager, captured ones replay"


def check_streams_events(dev):
    from torchair_dist import npu_stream_switch, npu_wait_tensor

    def tagged(x, w):
        h = x @ w
        with npu_stream_switch("side", 0):
            npu_wait_tensor(x, h)
            y = torch.relu(h) * 2
        return h + y

    f = compile_ours(tagged)
    for _ in range(3):
        x, w = torch.randn(16, 16, device=dev), torch.randn(16, 16, device=dev)
        close(f(x, w), tagged(x, w))
    replayed(3)
    if dev.type == "cpu":
        return "tagged streams == eager (torch.Event: no CPU events, device only)"
    stream, event = torch.Stream(device=dev), torch.Event(device=dev)

    def user_objects(x):
        with stream:
            y = x * 2 + 1
            event.record(stream)
        return y

    torch._dynamo.reset()
    g = compile_ours(user_objects)
    for _ in range(3):
        x = torch.randn(1 << 16, device=dev)
        y = g(x)
        event.synchronize()  # recorded inside the compiled region, waited on outside
        assert event.query(), "the user's event was never recorded"
        close(y, x * 2 + 1)
    return "tagged streams and a user torch.Event recorded inside, waited outside"


def check_collectives(dev):
    backend = {"cuda": "nccl", "npu": "hccl"}.get(dev.type, "gloo")
    store = dist.HashStore()
    dist.init_process_group(backend, rank=0, world_size=1, store=store,
                            device_id=dev if dev.type != "cpu" else None)
    try:
        def step(x):
            y = x * 2
            dist.all_reduce(y)
            out = torch.empty(dist.get_world_size() * y.shape[0], *y.shape[1:], device=y.device)
            dist.all_gather_into_tensor(out, y)
            dist.barrier()
            return out + 1

        f = compile_ours(step)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                x = torch.randn(8, 4, device=dev)
                close(f(x), x * 2 + 1)
        not_skipped(caught)
        (counts,) = one_key().values()
        assert counts["replays"] == 2, counts
        return f"{backend} world 1: all_reduce, all_gather, barrier captured + 2 replays"
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_collectives(rank: int, world: int, port: int, device_type: str) -> None:
    """One rank of the multi-rank check (spawned); raises on a wrong result."""
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if device_type == "cpu":
        os.environ["TORCHAIR_DIST_PLATFORM"] = "cpu"
        os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = "record"
        dev = torch.device("cpu")
    else:
        if device_type == "npu":
            import torch_npu  # noqa: F401
        getattr(torch, device_type).set_device(rank)
        dev = torch.device(device_type, rank)
    backend = {"cuda": "nccl", "npu": "hccl"}.get(device_type, "gloo")
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=_timedelta(120))
    dist.init_process_group(backend, rank=rank, world_size=world, store=store)
    try:
        def step(x):
            y = x * (dist.get_rank() + 1)
            dist.all_reduce(y)
            out = torch.empty(world * y.shape[0], *y.shape[1:], device=y.device)
            dist.all_gather_into_tensor(out, y)
            dist.barrier()
            return out

        f = compile_ours(step)
        total = sum(r + 1 for r in range(world))
        for i in range(3):
            x = torch.full((4, 2), float(i + 1), device=dev)
            close(f(x), (x * total).repeat(world, 1))
    finally:
        dist.destroy_process_group()


def _timedelta(seconds: int):
    import datetime

    return datetime.timedelta(seconds=seconds)


def check_collectives_multirank(dev):
    count = 2 if dev.type == "cpu" else getattr(torch, dev.type).device_count()
    world = min(count, 4)
    if world < 2:
        raise Skip(f"one {dev.type} device: the multi-rank check needs two or more")
    import torch.multiprocessing as mp

    ctx = mp.start_processes(_rank_collectives, args=(world, _free_port(), dev.type),
                             nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + 240
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            raise TimeoutError(f"{world}-rank collective check did not finish in 240 s")
    return f"{world} ranks: all_reduce, all_gather, barrier in capture == expected"


def _decode(step: Callable, model, ids, tokens: int, dev) -> torch.Tensor:
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + tokens + 1)
    outs = []
    with torch.no_grad():
        pos = torch.arange(ids.shape[1], device=dev)
        logits = model(input_ids=ids, cache_position=pos, past_key_values=cache,
                       use_cache=True).logits
        for i in range(tokens):
            tok = logits[:, -1:].argmax(-1)
            outs.append(logits[:, -1].clone())  # replays overwrite the output buffer
            pos = torch.tensor([ids.shape[1] + i], device=dev)
            logits = step(tok, pos, cache)
    return torch.stack(outs)


def _llama(dev, **overrides):
    from models import tiny_llama

    return tiny_llama(0, **overrides).to(dev)


def _step_of(model):
    def step(tok, pos, cache):
        return model(input_ids=tok, cache_position=pos, past_key_values=cache,
                     use_cache=True).logits
    return step


def make_decode_check(mode: str, tokens: int):
    def check(dev):
        model = _llama(dev)
        ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(0)).to(dev)
        ref = _decode(_step_of(model), model, ids, tokens, dev)
        try:
            got = _decode(compile_ours(_step_of(model), mode), model, ids, tokens, dev)
        except Exception as exc:  # GE needs CANN: on CPU/CUDA max-autotune may not convert
            if mode == "max-autotune" and dev.type != "npu":
                raise Skip(f"max-autotune (GE) off NPU: {short(exc)}")
            raise
        close(got, ref, 2e-3)
        return f"{tokens} greedy tokens == eager (max diff {(got - ref).abs().max():.2e})"
    return check


# -- stream programs ---------------------------------------------------------------------------
def stream_programs():
    """(source, {name: program}): the streams issue's programs from this checkout's
    ``tests/stream_programs.py`` (the check runs from a source checkout, as ``make gpu-check``
    and the device tool run it)."""
    path = os.path.join(ROOT, "tests", "stream_programs.py")
    if not os.path.exists(path):
        raise SystemExit(f"device_check: {path} is missing: run the check from a source checkout "
                         "of torchair_dist (tests/ included)")
    import importlib.util

    spec = importlib.util.spec_from_file_location("torchair_dist_stream_programs", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while defined
        spec.loader.exec_module(module)
    return "tests/stream_programs.py", module.PROGRAMS


def make_stream_program_check(program):
    def check(dev):
        if program.races:
            raise Skip("a racy program (its result is undefined on real streams)")
        size = 16 if dev.type == "cpu" else 1024  # device: big enough for a race to show
        device = str(dev)
        try:
            parts = program.build(device)
        except RuntimeError as exc:  # user torch.Stream on a device without streams
            if dev.type == "cpu":
                raise Skip(f"needs device streams: {short(exc, 80)}")
            raise
        compiled = [compile_ours(part) for part in parts]
        worst = 0.0
        for seed in range(3):  # capture, then two replays: every result compared
            args = program.inputs(size, device, seed)
            got = program.call(compiled, *args)
            sync(dev)
            ref = program.reference(device, *args)
            close(got, ref, 2e-3 if dev.type != "cpu" else 1e-4)
            flat = got if isinstance(got, (tuple, list)) else (got,)
            refs = ref if isinstance(ref, (tuple, list)) else (ref,)
            worst = max([worst] + [float((a - b).abs().max()) for a, b in zip(flat, refs)])
        graphs = replayed(3)
        return (f"{size}x{size}, {len(graphs)} graph(s), 3 calls (2 replays) == program "
                f"order (max diff {worst:.1e})")
    return check


# -- benchmark ---------------------------------------------------------------------------------
def bench_decode(dev, models: List[str], rounds: int, tokens: int) -> Tuple[List[str],
                                                                            List[Tuple]]:
    """The interleaved decode benchmark (benchmarks/decode_bench.py) in this process: its
    table lines and one result row per model (FAIL: a variant errored, or one of ours decoded
    other tokens than eager)."""
    import decode_bench

    lines, rows = [], []
    for model in models:
        t0 = time.perf_counter()
        name = f"decode bench {model}"
        try:
            res = decode_bench.run_model(model, dev, decode_bench.VARIANTS, rounds, tokens,
                                         log=lambda msg: None)
        except Exception as exc:  # noqa: BLE001 - a row of the table
            traceback.print_exc()
            rows.append((name, "FAIL", f"{type(exc).__name__}: {short(exc)}"))
            continue
        lines += decode_bench.format_result(res) + [""]
        bad = decode_bench.failures(res, strict=False)
        bad += [f"{v.name}: tokens differ from eager's" for v in res["variants"]
                if v.name.startswith("ours") and v.mismatches]
        detail = "; ".join(bad) if bad else (f"{len(res['variants'])} variants in one process, "
                                             f"ours == eager's tokens")
        rows.append((name, "FAIL" if bad else "PASS",
                     f"{detail} [{time.perf_counter() - t0:.1f}s]"))
        print(f"  {rows[-1][1]:<4} {name}: {detail}", flush=True)
    return lines, rows


# -- main --------------------------------------------------------------------------------------
def run_checks(dev, tokens: int, only: str = "",
               skip: Optional[str] = None) -> List[Tuple[str, str, str]]:
    import torchair_dist

    checks = [("capture: static inputs", check_static_inputs),
              ("capture: mutation", check_mutation),
              ("capture: shared pool", check_pool),
              ("capture: recapture/limit", check_recapture),
              ("capture: declared sizes", check_capture_sizes),
              ("capture: streams/events", check_streams_events),
              ("collectives in capture", check_collectives),
              ("collectives, all devices", check_collectives_multirank)]
    source, programs = stream_programs()
    print(f"stream programs: {source} ({len(programs)})", flush=True)
    checks += [(f"streams: {name}", make_stream_program_check(program))
               for name, program in programs.items()]
    checks += [(f"HF decode {mode}", make_decode_check(mode, tokens)) for mode in MODES]
    checks = [(name, check) for name, check in checks
              if only in name and (skip is None or skip not in name)]
    results = []
    for name, check in checks:
        torch._dynamo.reset()
        torchair_dist.reset_capture_report()
        t0 = time.perf_counter()
        try:
            status, detail = "PASS", check(dev)
        except Skip as skip:
            status, detail = "SKIP", str(skip)
        except Exception as exc:
            status = "FAIL"
            detail = f"{type(exc).__name__}: {short(exc)}"
            traceback.print_exc()
        results.append((name, status, f"{detail} [{time.perf_counter() - t0:.1f}s]"))
        print(f"  {status:<4} {name}: {detail}", flush=True)
    return results


def print_table(dev, results, bench_lines) -> None:
    print(f"\n== torchair_dist device check on {dev} (torch {torch.__version__}) ==")
    print(f"{'check':<34} {'result':<6} detail")
    for name, status, detail in results:
        print(f"{name:<34} {status:<6} {detail}")
    if bench_lines:
        print()
        print("\n".join(bench_lines))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="torchair_dist device check (gpu/npu-check)")
    parser.add_argument("--device", choices=("cuda", "npu"), default="cuda")
    parser.add_argument("--dry-run", action="store_true",
                        help="run the checks on CPU with the recording stand-in")
    parser.add_argument("--tokens", type=int, default=16, help="decode tokens per check")
    parser.add_argument("--bench-models", nargs="+", choices=("small", "large"), default=None,
                        help="benchmark models (device default: small large; the dry run "
                             "always uses a tiny Llama)")
    parser.add_argument("--bench-rounds", type=int, default=None,
                        help="timed rounds (default 5; the dry run 2)")
    parser.add_argument("--bench-tokens", type=int, default=None,
                        help="tokens per round (default 32; the dry run 8)")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--only", default="", help="run only the checks whose name contains it")
    parser.add_argument("--skip", default=None,
                        help="leave out the checks whose name contains it (e.g. 'all devices': "
                             "the multi-rank check)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    dev = resolve_device(args.device, args.dry_run)
    import torchair_dist

    print(f"device check on {dev}{' (dry run: CPU, record stand-in)' if args.dry_run else ''}"
          f": torch {torch.__version__}, torchair_dist from "
          f"{os.path.dirname(os.path.dirname(torchair_dist.__file__))}", flush=True)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=FutureWarning)  # HF's past_key_values notice
    results = run_checks(dev, args.tokens, args.only, args.skip)
    bench_lines = []
    if not args.skip_bench and not args.only:
        dry = dev.type == "cpu"
        models = ["tiny"] if dry else (args.bench_models or ["small", "large"])
        rounds = args.bench_rounds or (2 if dry else 5)
        tokens = args.bench_tokens or (8 if dry else 32)
        bench_lines, rows = bench_decode(dev, models, rounds, tokens)
        results += rows
    print_table(dev, results, bench_lines)
    print(f"\ntotal {time.perf_counter() - t0:.0f}s")
    return 1 if any(status == "FAIL" for _, status, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
