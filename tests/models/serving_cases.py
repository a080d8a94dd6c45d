"""Rank functions of the serving-loop tests (``RankPool.run`` calls them on every rank).

The model is a tiny Hugging Face Llama saved by the test process and loaded on every rank with
transformers' own TP (``tp_plan="auto"``, gloo); the loop is ``launch/serving.py``'s: a seeded
request stream, per-slot KV cache, prefill and decode steps compiled per mode, prompts padded to
the declared prefill sizes where the mode captures per shape, decode steps padded to the declared
batch sizes.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402

_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

import hf_decode as hf  # noqa: E402
import serving  # noqa: E402

SIZES = [1, 2, 4]
PREFILL_SIZES = [4, 8]   # prompts are 3..8 tokens: both sizes pad some of them
_models = {}  # path -> loaded TP model (one load per rank process)


def _setup(path, requests=6, seed=3):
    torch.set_num_threads(1)
    if path not in _models:
        _models[path] = hf.load_tp(path)
    model = _models[path]
    stream = serving.request_stream(requests, 0.6, (3, 8), (3, 8), model.config.vocab_size, seed)
    return model, stream


def _eager(model, stream, prefill=None):
    cache = serving.SlotKVCache(model, max(SIZES), serving.max_len_for(stream))
    return serving.serve(serving.make_variant("eager", model, SIZES), model, cache, stream, SIZES,
                         prefill)


def _max_prompt(stream):
    return max(len(r.prompt) for r in stream)


def eager_case(rank, world, path):
    """The eager loop's tokens beside each request generated alone (``model.generate``, no
    batching, no slots): the per-slot cache, masks and padding change nothing. The eager loop
    runs twice: prompts at their own length, and padded to the declared prefill sizes (the
    padding the capturing modes get, without compiling)."""
    model, stream = _setup(path)
    res = _eager(model, stream)
    padded = _eager(model, stream, serving.Prefill("eager", model, PREFILL_SIZES,
                                                   _max_prompt(stream), pad=True))
    alone = {}
    for req in stream:
        ids = torch.tensor([req.prompt])
        alone[req.rid] = hf.generate_tokens(model, ids, req.out_len)[0].tolist()
    return dict(loop=res.tokens, padded=padded.tokens, alone=alone,
                padded_steps=res.padded_steps, steps_per_size=dict(res.steps_per_size),
                padded_prefills=padded.padded_prefills,
                prefills_per_size=dict(padded.prefills_per_size))


def mode_case(rank, world, path, mode, rounds=2):
    """Eager, then ``mode`` (warm-up of every declared decode and prefill size, ``rounds``
    passes over the stream), prefill and decode both compiled in ``mode``: tokens per request
    of each, and what capture_report says about the decode graphs and the prefill graphs."""
    import torchair_dist

    model, stream = _setup(path)
    eager = _eager(model, stream)
    torch._dynamo.reset()  # clears capture_report too
    step = serving.make_variant(mode, model, SIZES)
    cache = serving.SlotKVCache(model, max(SIZES), serving.max_len_for(stream))
    serving.warm_up(step, cache, SIZES, model.device)
    decode_report = torchair_dist.capture_report()
    prefill = serving.Prefill(mode, model, PREFILL_SIZES, _max_prompt(stream))
    prefill.warm_up()
    prefill_report = {g: k for g, k in torchair_dist.capture_report().items()
                      if g not in decode_report}
    runs = [serving.serve(step, model, cache, stream, SIZES, prefill) for _ in range(rounds)]
    report = torchair_dist.capture_report()
    copies = sum(row.get("output_copies", 0)
                 for row in torchair_dist.capture_summary().values())
    torch._dynamo.reset()
    return dict(eager=eager.tokens, ours=[r.tokens for r in runs],
                report={g: k for g, k in report.items() if g not in prefill_report},
                prefill_report={g: report[g] for g in prefill_report},
                copies=copies,
                per_size=serving.captures_per_size(
                    {g: k for g, k in report.items() if g not in prefill_report}),
                prefill_per_size=serving.captures_per_size(
                    {g: report[g] for g in prefill_report}),
                compiled_while_serving=[r.compiled_while_serving for r in runs],
                prefills_per_size=dict(runs[0].prefills_per_size),
                steps_per_size=dict(runs[0].steps_per_size))
