"""Single-process sweep: which Hugging Face decoder-only architectures run in ``max-autotune``.

For every architecture transformers ships with a base tensor-parallel plan (config classes with
a non-empty ``base_model_tp_plan`` that have a causal-LM head), a tiny random model (2 layers,
hidden 64, 4 heads, 2 kv heads, vocab 128, 4 experts) is built and compiled with
``torch.compile(..., backend=get_npu_backend(CompilerConfig()), fullgraph=True)`` (default mode
``max-autotune``: GE graph on the reference executor here):

  forward  the full forward on a 6-token prompt, logits vs eager (max abs diff <= 1e-4)
  decode   prefill eagerly into a transformers ``StaticCache``, then 3 compiled one-token decode
           steps vs the same steps eagerly on a twin cache: logits and cache contents, the
           cache buffers kept (same data_ptr) and, in the GE graph, every cache buffer a
           RefData input written in place by ScatterNdUpdate (no copy of the cache)

World size 1 (tensor parallelism only adds collectives, which have converters). Usage::

  python benchmarks/ge_model_sweep.py                 # every architecture
  python benchmarks/ge_model_sweep.py llama qwen3_moe # some
  python benchmarks/ge_model_sweep.py --list

An architecture whose eager run fails is reported as ``eager-fail``, one that also fails with
``torch.compile(backend="eager")`` (Dynamo alone) as ``dynamo-fail``: both are excluded.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

TOL = 1e-4
EXCLUDED = ("eager-fail", "dynamo-fail")  # the architecture's or torch.compile's, not ours
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64,
            num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=32,
            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, sliding_window=8,
            rotary_dim=8, num_kv_shared_layers=0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=False)


def architectures() -> List[str]:
    """model_type of every config class with a base TP plan and a causal-LM model."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except KeyError:
            continue
        if getattr(cls, "base_model_tp_plan", None) and not getattr(cls, "sub_configs", None):
            found.append(model_type)
    return found


def tiny_model(model_type: str, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM

    tiny = {**TINY, **overrides}
    try:
        cfg = AutoConfig.for_model(model_type, **tiny)
    except Exception:  # noqa: BLE001 - e.g. configs that require as many kv heads as heads
        cfg = AutoConfig.for_model(model_type, **{**tiny, "num_key_value_heads":
                                                  TINY["num_attention_heads"]})
    if hasattr(type(cfg), "qk_rope_head_dim"):  # MLA: rotary over the rope part of each head,
        cfg = AutoConfig.for_model(model_type, **{  # as many kv heads as query heads
            **tiny, "head_dim": cfg.qk_rope_head_dim, "num_key_value_heads": TINY["num_attention_heads"]})
    types = list(getattr(cfg, "layer_types", None) or [])
    if types and not any(t in ("full_attention", "sliding_attention", "attention") for t in types):
        try:  # hybrid (linear attention / SSM) models: make the 2nd layer an attention layer
            cfg = AutoConfig.for_model(model_type, **{
                **tiny, "layer_types": [types[0], "full_attention"], "attn_layer_indices": [1],
                "attn_layer_period": 2, "attn_layer_offset": 1,
                **{k: getattr(cfg, k) for k in ("head_dim", "num_key_value_heads")}})
        except Exception:  # noqa: BLE001 - keep the all-linear tiny config
            pass
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    except ValueError:  # no SDPA path for this architecture: its eager attention
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model.eval()
    for p in model.parameters():  # well-scaled random weights: differences stay visible
        torch.nn.init.normal_(p, std=0.05) if p.dim() > 1 else None
    return cfg, model


_DYNAMO_ONLY = []  # set while re-checking a failure with torch.compile(backend="eager")


def _backend():
    if _DYNAMO_ONLY:
        return "eager"
    import torchair_dist
    from torchair_dist import CompilerConfig

    return torchair_dist.get_npu_backend(compiler_config=CompilerConfig())


def _dynamo_fails(check, *args) -> Optional[str]:
    """The failure of ``check`` with Dynamo alone (backend "eager"), None if that works: a
    failure there is the model's or torch.compile's, not the GE backend's."""
    _DYNAMO_ONLY.append(True)
    torch._dynamo.reset()
    try:
        check(*args)
        return None
    except Exception as e:  # noqa: BLE001
        return _one_line(e)
    finally:
        _DYNAMO_ONLY.clear()


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def check_forward(model) -> str:
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
        compiled = torch.compile(model.forward, backend=_backend(), fullgraph=True)
        got = compiled(ids, use_cache=False).logits
    d = _diff(expected, got)
    return "ok" if d <= TOL else f"logits differ by {d:.2e}"


def _cache_tensors(cache) -> List[torch.Tensor]:
    """Every cache buffer (keys, values, indexer keys, ...): the layers' tensors of rank >= 2."""
    out = []
    for layer in cache.layers:
        for name, t in sorted(vars(layer).items()):
            if isinstance(t, torch.Tensor) and t.dim() >= 2:
                out.append(t)
    return out


class _Recorder:
    """Records every GE graph the backend converts (to check how the cache is updated)."""

    def __init__(self):
        self.graphs = []

    def __enter__(self):
        import torchair_dist.backends.ge as ge

        self._ge, self._orig = ge, ge.convert_graph

        def record(*args, **kwargs):
            converted = self._orig(*args, **kwargs)
            self.graphs.append(converted)
            return converted
        ge.convert_graph = record
        return self

    def __exit__(self, *exc):
        self._ge.convert_graph = self._orig


def _in_place_problem(graphs, n_cache: int) -> Optional[str]:
    """None when the decode graph updates every cache buffer in place (RefData written by
    ScatterNdUpdate, no copy-back), else what is wrong."""
    if not graphs:
        return "no GE graph was compiled"
    ops = list(graphs[-1].model.graph[0].op)
    ref = {op.name for op in ops if op.type == "RefData"}
    written = {op.input[0].rpartition(":")[0] for op in ops if op.type == "ScatterNdUpdate"}
    if len(ref) != n_cache or not ref <= written:
        return (f"cache not updated in place: {len(ref)} RefData inputs "
                f"({len(ref & written)} written by ScatterNdUpdate) for {n_cache} cache buffers")
    return None


def check_decode(cfg, model, steps: int = 3) -> str:
    with _Recorder() as rec:
        result, n_cache = _decode(cfg, model, steps)
    if result != "ok":
        return result
    return _in_place_problem(rec.graphs, n_cache) or "ok"


def _decode(cfg, model, steps: int) -> Tuple[str, int]:
    """(verdict, number of cache buffers)."""
    from transformers import StaticCache

    ids = torch.randint(3, 128, (1, 4), generator=torch.Generator().manual_seed(2))
    try:  # the static cache and an eager prefill must work for the architecture at all
        caches = [StaticCache(config=cfg, max_cache_len=16) for _ in range(2)]
        with torch.no_grad():
            for c in caches:
                out = model(ids, past_key_values=c, use_cache=True)
            model(out.logits[:, -1:].argmax(-1), past_key_values=StaticCache(
                config=cfg, max_cache_len=16), cache_position=torch.tensor([0]), use_cache=True)
    except Exception as e:  # noqa: BLE001 - reported as an exclusion
        return f"eager-fail: {_one_line(e)}", 0
    n_cache = len(_cache_tensors(caches[1]))
    with torch.no_grad():
        tok = out.logits[:, -1:].argmax(-1)
        compiled = torch.compile(model.forward, backend=_backend(), fullgraph=True)
        tok_e = tok_c = tok
        for i in range(steps):
            pos = torch.tensor([ids.shape[1] + i])
            ptrs = [t.data_ptr() for t in _cache_tensors(caches[1])]
            le = model(tok_e, past_key_values=caches[0], cache_position=pos, use_cache=True).logits
            lc = compiled(tok_c, past_key_values=caches[1], cache_position=pos,
                          use_cache=True).logits
            d = _diff(le, lc)
            if d > TOL:
                return f"step {i}: logits differ by {d:.2e}", n_cache
            if ptrs != [t.data_ptr() for t in _cache_tensors(caches[1])]:
                return f"step {i}: a cache buffer was replaced, not updated in place", n_cache
            for a, b in zip(_cache_tensors(caches[0]), _cache_tensors(caches[1])):
                if _diff(a, b) > TOL:
                    return f"step {i}: cache contents differ by {_diff(a, b):.2e}", n_cache
            tok_e, tok_c = le[:, -1:].argmax(-1), lc[:, -1:].argmax(-1)
    return "ok", n_cache


def _one_line(e: BaseException) -> str:
    while getattr(e, "inner_exception", None) is not None or (
            e.__cause__ is not None and "BackendCompilerFailed" in type(e).__name__):
        e = getattr(e, "inner_exception", None) or e.__cause__
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    marker = "no GE converter is registered for:"
    if marker in text:  # keep the op names, drop the FX node dumps
        import re

        ops = sorted(set(re.findall(r"(\S+) \(FX node", text)))
        text = "unsupported: " + ", ".join(ops)
    return text[:300]


def sweep_one(model_type: str, parts=("forward", "decode")) -> Dict[str, str]:
    result: Dict[str, str] = {}
    first = None
    for overrides in ({}, {"num_key_value_heads": TINY["num_attention_heads"]}):
        try:  # some architectures size norms for as many kv heads as heads
            cfg, model = tiny_model(model_type, **overrides)
            with torch.no_grad():
                model(torch.tensor([[3, 4, 5]]), use_cache=False)
            break
        except Exception as e:  # noqa: BLE001 - reported, the architecture is excluded
            first = first or e
    else:
        return {p: f"eager-fail: {_one_line(first)}" for p in parts}
    for part in parts:
        torch._dynamo.reset()
        check, args = (check_forward, (model,)) if part == "forward" else (_decode, (cfg, model, 1))
        try:
            result[part] = check_forward(model) if part == "forward" else check_decode(cfg, model)
        except Exception as e:  # noqa: BLE001 - every failure goes in the table
            if os.environ.get("SWEEP_TRACEBACK"):
                traceback.print_exc()
            result[part] = _one_line(e)
            dynamo = _dynamo_fails(check, *args)
            if dynamo is not None:
                result[part] = f"dynamo-fail: {dynamo}"
    return result


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arch", nargs="*", help="model_type values (default: all)")
    p.add_argument("--list", action="store_true", help="list the architectures and exit")
    args = p.parse_args(argv)
    archs = args.arch or architectures()
    if args.list:
        print("\n".join(archs))
        return 0
    rows: List[Tuple[str, Dict[str, str], float]] = []
    for arch in archs:
        t0 = time.perf_counter()
        res = sweep_one(arch)
        rows.append((arch, res, time.perf_counter() - t0))
        print(f"{arch:24s} forward: {res['forward']:40.40s} decode: {res['decode']}", flush=True)
    print("\n| architecture | forward | decode (StaticCache) |\n|---|---|---|")
    for arch, res, _ in rows:
        print(f"| {arch} | {res['forward']} | {res['decode']} |")
    bad = [a for a, r, _ in rows if any(v != "ok" and not v.startswith(EXCLUDED)
                                        for v in r.values())]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} architectures ok or excluded; failing: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
