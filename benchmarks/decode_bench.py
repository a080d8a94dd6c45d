"""Interleaved greedy-decode benchmark: every variant in ONE process, timed round-robin.

  python benchmarks/decode_bench.py --device cuda                 # both models
  python benchmarks/decode_bench.py --device cuda --model small   # the 4-layer Llama only
  python benchmarks/decode_bench.py --device cpu --small          # a tiny Llama on CPU

Variants: ``eager``; ours ``npugraph_ex``; ours ``npugraph_ex`` with inductor's kernels
(``experimental_config.inductor_kernels``); torch's ``cudagraphs`` backend (CUDA only);
``inductor``; inductor ``mode="reduce-overhead"`` (CUDA only). Each variant has its own
``StaticCache`` and its own compiled step; all live in this process at once.

Models: ``small`` = 4-layer Llama, hidden 256, fp32 (the device check's); ``large`` = Llama
shape, hidden 2048, 8 layers, 32/4 heads, intermediate 5632, vocab 32000, bf16 (~967 MB of
weights). ``--small`` on CPU: a 2-layer Llama of hidden 64 (a dry run of the procedure).

Procedure: a warm-up round (compile and capture; its wall time per variant is reported as
"first round"), then ``--rounds`` rounds; in each round every variant in turn prefills its
cache (untimed) and decodes ``--tokens`` tokens greedily, each token timed with device events
(CPU: ``time.perf_counter``). Per variant: the median over rounds of each round's median
ms/token. Every round's tokens of every variant are compared with eager's (a mismatch is
reported; ``--strict`` makes it an error, exit 1). The weight-read limit is weight bytes /
the measured device copy bandwidth (bytes copied per second, each read once and written once):
no decode step can be faster than reading every weight once.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
import warnings
from typing import Callable, Dict, List, Optional

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

VARIANTS = ("eager", "ours npugraph_ex", "ours npugraph_ex + inductor kernels",
            "torch cudagraphs backend", "inductor", "inductor reduce-overhead")
CUDA_ONLY = ("torch cudagraphs backend", "inductor reduce-overhead")
# inductor's kernels need its CUDA (Triton) or CPU (C++) code generation: not run on NPU
# (experimental_config.inductor_kernels is ignored there with a warning)
CUDA_OR_CPU = ("ours npugraph_ex + inductor kernels", "inductor")
# variants whose graphs live in torch's CUDA graph trees (a step must be marked per call)
_TREES = ("torch cudagraphs backend", "inductor reduce-overhead")

MODELS = {
    "small": dict(num_hidden_layers=4, hidden_size=256, intermediate_size=512,
                  num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                  max_position_embeddings=512, dtype=torch.float32),
    "large": dict(num_hidden_layers=8, hidden_size=2048, intermediate_size=5632,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=512, dtype=torch.bfloat16),
    "tiny": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                 num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                 max_position_embeddings=256, dtype=torch.float32),
}
MODEL_TITLES = {"small": "4-layer Llama, dim 256, fp32",
                "large": "Llama 2048 x 8 layers, 32/4 heads, vocab 32000, bf16",
                "tiny": "2-layer Llama, dim 64, fp32 (CPU dry run)"}


def make_model(name: str, device: torch.device, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = dict(MODELS[name])
    dtype = spec.pop("dtype")
    torch.manual_seed(seed)
    cfg = LlamaConfig(**spec, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval().to(device=device, dtype=dtype)


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


class Timer:
    """Times one call: device events on a device, ``perf_counter`` on CPU; ms."""

    def __init__(self, device: torch.device):
        self.device = device
        self.module = None if device.type == "cpu" else getattr(torch, device.type)

    def time(self, fn: Callable[[], object]) -> float:
        if self.module is None:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        start = self.module.Event(enable_timing=True)
        end = self.module.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes copied per second (median of 5 copies of ``nbytes``)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    timer = Timer(device)
    dst.copy_(src)
    times = [timer.time(lambda: dst.copy_(src)) for _ in range(5)]
    return nbytes / (statistics.median(times) / 1e3)


def _compile_ours(step, inductor_kernels: bool):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    if inductor_kernels:
        cfg.experimental_config.inductor_kernels = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        backend = torchair_dist.get_npu_backend(compiler_config=cfg)
    return torch.compile(step, backend=backend, fullgraph=True)


def make_variant(name: str, step: Callable) -> Callable:
    if name == "eager":
        return step
    if name == "ours npugraph_ex":
        return _compile_ours(step, False)
    if name == "ours npugraph_ex + inductor kernels":
        return _compile_ours(step, True)
    if name == "torch cudagraphs backend":
        return torch.compile(step, backend="cudagraphs", fullgraph=True)
    if name == "inductor":
        return torch.compile(step, fullgraph=True)
    if name == "inductor reduce-overhead":
        return torch.compile(step, mode="reduce-overhead", fullgraph=True)
    raise ValueError(f"unknown variant {name!r}; known: {VARIANTS}")


def _own_step(model, tag: str) -> Callable:
    """A decode step with a code object of its own: each variant's Dynamo cache entries sit on
    their own code, so no variant counts against another's recompile limit."""
    def step(tok, pos, cache):
        return model(input_ids=tok, cache_position=pos, past_key_values=cache,
                     use_cache=True).logits[:, -1]

    code = step.__code__.replace(co_name=f"decode_step_{tag}")
    return types.FunctionType(code, step.__globals__, code.co_name, None, step.__closure__)


class Variant:
    """One variant's compiled step, cache and results."""

    def __init__(self, name: str, model, prompt: torch.Tensor, tokens: int):
        from transformers import StaticCache

        self.name = name
        self.model = model
        self.prompt = prompt
        self.tokens = tokens
        self.cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + tokens + 1)
        self.step = make_variant(name, _own_step(model, name.replace(" ", "_").replace(
            "+", "").replace("-", "_")))
        self.trees = name in _TREES
        self.round_ms: List[float] = []
        self.first_round_s: Optional[float] = None
        self.error: Optional[str] = None
        self.mismatches = 0

    def decode(self, timer: Timer) -> tuple:
        """Prefill (untimed) and decode; (greedy tokens, per-token ms)."""
        dev = self.prompt.device
        self.cache.reset()
        n = self.prompt.shape[1]
        with torch.no_grad():
            logits = self.model(input_ids=self.prompt, cache_position=torch.arange(n, device=dev),
                                past_key_values=self.cache, use_cache=True).logits[:, -1]
            tok = logits.argmax(-1, keepdim=True)
            out, times = [tok], []
            positions = [torch.tensor([n + i], device=dev) for i in range(self.tokens - 1)]
            for pos in positions:
                holder = []

                def one(t=tok, p=pos):
                    if self.trees:
                        torch.compiler.cudagraph_mark_step_begin()
                    holder.append(self.step(t, p, self.cache).argmax(-1, keepdim=True))

                times.append(timer.time(one))
                tok = holder[0].clone()  # a replay overwrites its output buffer
                out.append(tok)
        return torch.cat(out, dim=1), times


def run_model(model_name: str, device: torch.device, variants, rounds: int, tokens: int,
              log=print) -> Dict:
    model = make_model(model_name, device)
    prompt = torch.randint(0, model.config.vocab_size, (1, 8),
                           generator=torch.Generator().manual_seed(0)).to(device)
    skipped = {v: "CUDA only" for v in variants if v in CUDA_ONLY and device.type != "cuda"}
    skipped.update({v: "CUDA or CPU only" for v in variants
                    if v in CUDA_OR_CPU and device.type not in ("cuda", "cpu")})
    chosen = [v for v in variants if v not in skipped]
    timer = Timer(device)
    made: List[Variant] = []
    for name in chosen:
        try:
            made.append(Variant(name, model, prompt, tokens))
        except Exception as exc:  # noqa: BLE001 - reported in the table
            skipped[name] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    reference = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(rounds + 1):  # round 0: compile, capture (untimed)
            for v in made:
                if v.error:
                    continue
                t0 = time.perf_counter()
                try:
                    toks, times = v.decode(timer)
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    v.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"
                    log(f"  {v.name}: round {r}: {v.error}")
                    continue
                if r == 0:
                    v.first_round_s = time.perf_counter() - t0
                else:
                    v.round_ms.append(statistics.median(times))
                if v.name == "eager":
                    reference.setdefault(r, toks)
                elif r in reference and not torch.equal(toks, reference[r]):
                    v.mismatches += 1
            log(f"  round {r}/{rounds} done")
    bandwidth = copy_bandwidth(device, 1 << (28 if device.type != "cpu" else 24))
    wbytes = weight_bytes(model)
    return {"model": model_name, "title": MODEL_TITLES[model_name], "variants": made,
            "skipped": skipped, "weight_bytes": wbytes, "bandwidth": bandwidth,
            "limit_ms": wbytes / bandwidth * 1e3, "rounds": rounds, "tokens": tokens}


def format_result(res: Dict) -> List[str]:
    lines = [f"decode {res['title']}: {res['rounds']} rounds x {res['tokens']} tokens, "
             f"median ms/token (interleaved, one process)",
             f"{'variant':<38} {'ms/token':>9} {'x eager':>8} {'first round s':>14}  tokens"]
    eager = next((v for v in res["variants"] if v.name == "eager" and v.round_ms), None)
    base = statistics.median(eager.round_ms) if eager else None
    for v in res["variants"]:
        if v.error:
            lines.append(f"{v.name:<38} {'-':>9} {'-':>8} {'-':>14}  ERROR {v.error}")
            continue
        ms = statistics.median(v.round_ms)
        ratio = f"{base / ms:.2f}" if base else "-"
        same = ("(reference)" if v.name == "eager" else
                "== eager" if v.mismatches == 0 else
                f"DIFFER from eager in {v.mismatches}/{res['rounds']} rounds")
        lines.append(f"{v.name:<38} {ms:>9.3f} {ratio:>8} {v.first_round_s:>14.1f}  {same}")
    for name, why in res["skipped"].items():
        lines.append(f"{name:<38} {'n/a':>9} ({why})")
    lines.append(f"weight-read limit: {res['limit_ms']:.3f} ms/token "
                 f"({res['weight_bytes'] / 1e6:.1f} MB of weights / "
                 f"{res['bandwidth'] / 1e9:.1f} GB/s measured copy bandwidth)")
    return lines


def failures(res: Dict, strict: bool) -> List[str]:
    """What makes the benchmark fail: a variant that errored; with ``strict``, tokens that
    differ from eager's."""
    bad = [f"{v.name}: {v.error}" for v in res["variants"] if v.error]
    bad += [f"{name}: {why}" for name, why in res["skipped"].items() if why.startswith("error")]
    if strict:
        bad += [f"{v.name}: tokens differ from eager's" for v in res["variants"]
                if v.mismatches]
    return bad


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None,
                        help="cuda | npu | cpu (default: cuda if available, else cpu)")
    parser.add_argument("--model", choices=("small", "large", "both", "tiny"), default=None,
                        help="default: both on a device, tiny on CPU")
    parser.add_argument("--small", action="store_true",
                        help="only the small model (on CPU: the tiny one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        metavar="VARIANT", help=f"default: all of {VARIANTS}")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when any variant's tokens differ from eager's")
    return parser.parse_args(argv)


def models_for(args, device: torch.device) -> List[str]:
    if args.model == "both":
        return ["small", "large"]
    if args.model:
        return [args.model]
    if device.type == "cpu":
        return ["tiny"]
    return ["small"] if args.small else ["small", "large"]


def main(argv=None) -> int:
    args = parse_args(argv)
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name == "npu":
        import torch_npu  # noqa: F401
    device = torch.device(name, 0) if name != "cpu" else torch.device("cpu")
    if name == "cpu":
        os.environ.setdefault("TORCHAIR_DIST_CPU_CAPTURE", "record")
    bad = []
    for model_name in models_for(args, device):
        res = run_model(model_name, device, args.variants, args.rounds, args.tokens)
        print("\n".join(format_result(res)), flush=True)
        bad += failures(res, args.strict)
    for line in bad:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
