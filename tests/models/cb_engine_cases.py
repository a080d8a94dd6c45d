"""Rank functions of the tests of transformers' continuous-batching engine (``RankPool.run``
calls them on every rank; one process runs them directly).

transformers' engine (``model.generate_batch``) flattens the tokens of mixed prefill and decode
requests into one batch, pads the token count to a multiple of ``q_padding_interval_size``
when its forward is compiled, keeps a paged KV cache whose update runs outside the compiled
graph, and deep-copies the compile configuration it is given. The tiny Llama is loaded with
transformers' TP on 2 ranks (``tp_plan="auto"``), or built in the process for one.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402

_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

_models = {}


def prompts(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 100, (int(k),), generator=g).tolist()
            for k in torch.randint(3, 14, (n,), generator=g)]


def engine_config(backend=None, piecewise_mode=None):
    """The engine's configuration: small pages, token count padded to multiples of 8, KV reads
    to multiples of 32; with ``backend``, both of its paths compiled with it."""
    from transformers import CompileConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    kw = dict(page_size=16, num_blocks=16, max_batch_tokens=32, q_padding_interval_size=8,
              kv_padding_interval_size=32)
    if backend is not None:
        cc = CompileConfig(backend=backend, fullgraph=False, mode=None)
        kw.update(varlen_compile_config=cc, decode_compile_config=cc)
    return ContinuousBatchingConfig(**kw)


def ours(mode: str):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    if mode != "max-autotune":
        cfg.npugraphex_config.piecewise = True  # attention eager between captured pieces
        # the engine's padded token counts (multiples of 8 up to 32): captured up front per
        # graph, on the token dim of its [1, tokens] inputs
        cfg.npugraphex_config.capture_sizes = [8, 16, 24, 32]
    return torchair_dist.get_npu_backend(compiler_config=cfg)


def generate(model, backend, new_tokens=5):
    """Every request's generated tokens, by prompt index (greedy, no EOS)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1,
                           pad_token_id=0)
    batch = prompts()
    with torch.no_grad():
        out = model.generate_batch(batch, generation_config=gen,
                                   continuous_batching_config=engine_config(backend))
    by_id = {rid: list(o.generated_tokens) for rid, o in out.items()}
    return [by_id[rid] for rid in sorted(by_id, key=lambda r: int(r.rsplit("_", 1)[-1]))]


def _load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def tokens_case(rank, world, path, mode):
    """Eager's tokens, then ours in ``mode`` twice (the second call must compile nothing),
    and what the captures report (``rank``/``world``: the rank pool's; one process passes
    0, 1)."""
    import hf_decode
    from torch._dynamo.utils import counters

    import torchair_dist

    torch.set_num_threads(1)
    if path not in _models:
        _models[path] = hf_decode.load_tp(path) if torch.distributed.is_initialized() else \
            _load(path)
    model = _models[path]
    torch._dynamo.reset()
    torchair_dist.reset_capture_report()
    eager = generate(model, None)
    backend = ours(mode)
    first = generate(model, backend)
    counters.clear()
    second = generate(model, backend)
    report = torchair_dist.capture_report()
    summary = torchair_dist.capture_summary()
    entries = [e for keys in report.values() for k, e in keys.items() if k != "*"]
    return dict(eager=eager, first=first, second=second,
                frames_second=counters["stats"]["unique_graphs"],
                recapture_reasons=sorted({r for e in entries for r in e.get("capture_reasons", {})
                                          if r.startswith(("moved", "force"))}),
                captures=sum(e.get("captures", 0) for e in entries),
                declared={g: (row["batch_dim"], row["declared_sizes"]) for g, row in summary.items()
                          if "batch_dim" in row},
                eager_calls={g: row["eager"] for g, row in summary.items() if row.get("eager")})
