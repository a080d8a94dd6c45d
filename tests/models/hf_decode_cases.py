"""Rank functions of the static-KV-cache decode tests (run by ``RankPool.run`` on every rank).

The model is a tiny Hugging Face causal LM saved by the test process and loaded on every rank
with transformers' own TP (``tp_plan="auto"``, gloo). Each case decodes greedily eagerly and
with our backend, and returns plain data (tokens, stats) for the test to check on every rank.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Dict

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402

_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

import hf_decode as hf  # noqa: E402

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]
CAPTURE_ENV = "TORCHAIR_DIST_CPU_CAPTURE"
_models: Dict[str, object] = {}  # path -> loaded TP model (one load per rank process)


def _model(path: str):
    if path not in _models:
        _models[path] = hf.load_tp(path)
    return _models[path]


@contextlib.contextmanager
def emulated_capture():
    """Run the ACL runner's capture/replay bookkeeping on CPU (the CPU stand-in graph)."""
    old = os.environ.get(CAPTURE_ENV)
    os.environ[CAPTURE_ENV] = "emulate"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CAPTURE_ENV)
        else:
            os.environ[CAPTURE_ENV] = old


def decode_case(rank, world, path, mode, driver, batch=2, prompt=6, new_tokens=6):
    """Eager vs compiled greedy decode with ``driver`` ("generate" or "loop"); returns both
    token lists, the compile stats and the largest logit difference (loop only)."""
    torch.set_num_threads(1)
    torch._dynamo.reset()
    model = _model(path)
    ids = hf.prompt_ids(batch, prompt, model.config.vocab_size)
    backend = hf.npu_backend(mode)
    diff = None
    with emulated_capture():
        if driver == "generate":
            eager = hf.generate_tokens(model, ids, new_tokens)
            with hf.CompileStats() as stats:
                ours = hf.generate_tokens(model, ids, new_tokens, backend)
        else:
            eager, _, eager_logits = hf.static_cache_loop(model, ids, new_tokens)
            with hf.CompileStats() as stats:
                ours, _, logits = hf.static_cache_loop(model, ids, new_tokens,
                                                       hf.compiled_forward(model, backend))
            diff = max((a - b).abs().max().item() for a, b in zip(logits, eager_logits))
    return dict(eager=eager.tolist(), ours=ours.tolist(), diff=diff, **stats.as_row())


def capture_case(rank, world, path, mode, prompt=6, new_tokens=5):
    """Item 4: how often the ACL runner captures a static-cache decode step.

    Returns the runner's capture count after each phase: (a) one loop on a fresh cache,
    (b) two more loops reusing that cache (``reset()``: same buffers), (c) a loop on a new
    cache of the same shape (new buffers), (d) a loop with another batch size, (e) two
    ``generate`` calls (transformers makes a new StaticCache per call) and (f) two more
    passing one ``StaticCache``; plus whether all tokens equal eager."""
    torch.set_num_threads(1)
    torch._dynamo.reset()
    model = _model(path)
    ids = hf.prompt_ids(2, prompt, model.config.vocab_size)
    ids3 = hf.prompt_ids(3, prompt, model.config.vocab_size, seed=2)
    backend = hf.npu_backend(mode)
    expected = hf.static_cache_loop(model, ids, new_tokens)[0]
    expected3 = hf.static_cache_loop(model, ids3, new_tokens)[0]
    same, counts = [], {}
    with emulated_capture():
        with hf.CompileStats() as loop_stats:
            step = hf.compiled_forward(model, backend)
            cache = hf.new_static_cache(model, ids, new_tokens)
            same.append(torch.equal(hf.static_cache_loop(model, ids, new_tokens, step,
                                                          cache=cache)[0], expected))
            counts["first_loop"] = loop_stats.captures
            for _ in range(2):
                same.append(torch.equal(hf.static_cache_loop(model, ids, new_tokens, step,
                                                              cache=cache)[0], expected))
            counts["same_cache_reused"] = loop_stats.captures
            same.append(torch.equal(hf.static_cache_loop(model, ids, new_tokens, step)[0],
                                    expected))
            counts["new_cache_same_shape"] = loop_stats.captures
            same.append(torch.equal(hf.static_cache_loop(model, ids3, new_tokens, step)[0],
                                    expected3))
            counts["other_batch"] = loop_stats.captures
        steps_per_loop = new_tokens - 1
        torch._dynamo.reset()
        eager_gen = hf.generate_tokens(model, ids, new_tokens)
        with hf.CompileStats() as gen_stats:
            for _ in range(2):
                same.append(torch.equal(hf.generate_tokens(model, ids, new_tokens, backend),
                                        eager_gen))
            counts["generate_twice"] = gen_stats.captures
            cache = hf.new_static_cache(model, ids, new_tokens)
            for _ in range(2):
                same.append(torch.equal(hf.generate_tokens(model, ids, new_tokens, backend,
                                                           cache=cache), eager_gen))
            counts["generate_twice_one_cache"] = gen_stats.captures
    return dict(counts=counts, same=same, steps_per_loop=steps_per_loop,
                loop_frames=loop_stats.frames, gen_frames=gen_stats.frames)
