"""Shared helpers of the benchmarks: variants, interleaved timing, table printing."""
from __future__ import annotations

import os
import statistics
import time
import types
from typing import Callable, Dict, List

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402

import torchair_dist  # noqa: E402


def backends(modes=("npugraph_ex",), gloo: bool = False) -> Dict[str, object]:
    """name -> torch.compile backend (None = eager) for the side-by-side variants; ``gloo``:
    also each mode with ``distributed_config.cpu_shm_collectives=False`` ("ours:<mode>,gloo":
    the collectives on gloo, like eager's)."""
    out: Dict[str, object] = {"eager": None, "aot_eager": "aot_eager", "inductor": "inductor"}
    for mode in modes:
        for shm in (True, False) if gloo else (True,):
            cfg = torchair_dist.CompilerConfig()
            cfg.mode = mode
            cfg.distributed_config.cpu_shm_collectives = shm
            out[f"ours:{mode}{'' if shm else ',gloo'}"] = \
                torchair_dist.get_npu_backend(compiler_config=cfg)
    return out


def _own_code(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` with a code object of its own (same behaviour)."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def compile_variants(fn: Callable, example_args, variants: Dict[str, object],
                     barrier: Callable[[], None] = lambda: None):
    """name -> (callable, compile seconds): the first call's wall time.

    A plain function is compiled as a copy with its own code object per variant: Dynamo keeps
    its compiled entries on the code object, and variants sharing one would each walk past
    the others' entries on every call (or, after a reset, recompile)."""
    compiled = {}
    for name, backend in variants.items():
        if isinstance(fn, types.FunctionType):
            f = _own_code(fn)
        else:
            torch._dynamo.reset()
            f = fn
        f = f if backend is None else torch.compile(f, backend=backend, fullgraph=True)
        barrier()
        t0 = time.perf_counter()
        f(*example_args)
        compiled[name] = (f, time.perf_counter() - t0 if backend is not None else 0.0)
    return compiled


def interleaved_medians(calls: Dict[str, Callable[[], object]], steps: int, block: int = 20,
                        barrier: Callable[[], None] = lambda: None) -> Dict[str, float]:
    """Median per-call seconds of each callable, timed in interleaved blocks so machine noise
    hits every variant alike."""
    samples: Dict[str, List[float]] = {k: [] for k in calls}
    for name, call in calls.items():  # warm-up
        for _ in range(5):
            call()
    while min(len(v) for v in samples.values()) < steps:
        for name, call in calls.items():
            barrier()
            for _ in range(block):
                t0 = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def print_table(title: str, medians: Dict[str, float], compile_s: Dict[str, float]) -> None:
    eager = medians["eager"]
    inductor = medians.get("inductor")
    print(f"\n{title}")
    print(f"{'variant':<22} {'median us':>10} {'vs eager':>9} {'vs inductor':>12} "
          f"{'compile s':>10}")
    for name, m in medians.items():
        vs_ind = f"{m / inductor:>12.2f}" if inductor else f"{'-':>12}"
        print(f"{name:<22} {m * 1e6:>10.1f} {m / eager:>9.2f} {vs_ind} "
              f"{compile_s.get(name, 0.0):>10.2f}")
