"""Tiny random configs of any transformers ``model_type``: the TINY sizes, plus the fields a
config derives from them, so that the tiny model is what the full-size one is, only small.

:func:`tiny_config` applies, in order:

* the TINY sizes, to every field the config class has, also where the class stores the size
  under another name (its ``attribute_map``: e.g. ``num_experts_per_tok`` is
  ``num_experts_per_token`` in Kimi-Linear and Bailing-Hybrid, ``n_group`` is
  ``num_expert_group``);
* every other vocabulary size (``unpadded_vocab_size``, ``vocab_size_per_layer_input``) is
  the tiny vocabulary (a padding of ``vocab_size - unpadded_vocab_size`` rows must not be
  negative);
* :data:`TINY_OVERRIDES`, where transformers' default config of an architecture cannot build a
  model of 2 layers by itself (each entry says why);
* layer types: where the default pattern cut to 2 layers keeps no layer with a KV cache (hybrid
  linear-attention models whose pattern puts attention every 4th or 6th layer), the last layer
  becomes the attention type the full-size pattern uses, so the tiny model decodes with a KV
  cache as the real one does.
"""
from __future__ import annotations

from typing import Dict, List, Optional

# Every size a tiny decoder needs; a key is only set where the config class has that field.
TINY: Dict[str, object] = dict(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
    # MoE
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=32, shared_expert_intermediate_size=64, n_shared_experts=1,
    first_k_dense_replace=1, n_group=1, topk_group=1, norm_topk_prob=True,
    ffn_hidden_size=128, expert_ffn_hidden_size=32, intermediate_size_mlp=128, num_layers=2,
    zero_expert_num=2, moe_topk=2,
    # multi-head latent attention (DeepSeek family)
    q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
)

# Per architecture, where transformers' default config does not build a tiny model by itself.
TINY_OVERRIDES: Dict[str, Dict[str, object]] = {
    # the default has no RoPE parameters, but the rotary embedding reads them per layer type
    # (checkpoints carry them); the M-RoPE sections sum to head_dim / 2
    "cohere_compass_text": dict(rope_parameters={"full_attention": dict(
        rope_type="default", rope_theta=10000.0, mrope_section=[4, 2, 2])}),
    # KV sharing: the last 15 of 35 layers reuse the cache of earlier ones; with 4 layers
    # (sliding, full, sliding, full) the last 2 reuse the first 2, as the full model does
    "gemma3n_text": dict(num_hidden_layers=4, num_kv_shared_layers=2, laurel_rank=16,
                         hidden_size_per_layer_input=16,
                         layer_types=["sliding_attention", "full_attention"] * 2),
    # the default has no layer types at all (checkpoints list them: conv and attention layers)
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    # its attention layers are indexed (QSA), whose fields the default leaves unset
    "qwen4_exp_text": dict(indexer_n_heads=4, indexer_kv_heads=1, indexer_head_dim=16,
                           indexer_budget=8, indexer_compress_ratio=4),
    # rotary_dim counts head dimensions (64 of 256 by default): a quarter of the tiny head
    "gptj": dict(rotary_dim=4),
    "codegen": dict(rotary_dim=4),
    # layer types are read-only properties here, derived from these fields
    "bamba": dict(attn_layer_indices=[1]),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1),
}

# Layer types whose cache layer holds keys/values (the rest: recurrent or conv state only)
KV_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention",
                  "indexed_attention", "hybrid", "hybrid_sliding",
                  "compressed_sparse_attention", "heavily_compressed_attention")


def tiny_config(model_type: str, **overrides):
    """The config of ``model_type`` with the TINY sizes (only fields the class has)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    overrides = {**TINY_OVERRIDES.get(model_type, {}), **overrides}
    sizes = tiny_sizes(default.to_dict(), overrides, getattr(cls, "attribute_map", {}))
    # composite configs (e.g. llama4: text_config + vision_config): the sub-configs shrink too
    for name, sub in vars(default).items():
        if name.endswith("_config") and hasattr(sub, "to_dict") and name not in overrides:
            sizes[name] = tiny_sizes(sub.to_dict(), overrides,
                                     getattr(type(sub), "attribute_map", {}))
    cfg = AutoConfig.for_model(model_type, **sizes)
    types = with_attention_layer(getattr(default, "layer_types", None),
                                 getattr(cfg, "layer_types", None))
    if types is not None and "layer_types" not in overrides and "layer_types" in vars(cfg):
        cfg = AutoConfig.for_model(model_type, **sizes, layer_types=types)
    return cfg


def tiny_sizes(fields: Dict[str, object], overrides: Dict[str, object],
               attribute_map: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """The TINY sizes (and ``overrides``) that apply to a config with these ``fields``."""
    wanted = {**TINY, **overrides}
    sizes = {k: v for k, v in wanted.items() if k in fields}
    for alias, field in (attribute_map or {}).items():  # the class's own name for a size
        if alias in wanted and field in fields and field not in wanted:
            sizes[field] = wanted[alias]
    for field, value in fields.items():
        if field in wanted or not isinstance(value, int) or isinstance(value, bool):
            continue
        if field.endswith("vocab_size") or field.startswith("vocab_size_"):
            sizes[field] = TINY["vocab_size"]
    if "kv_lora_rank" in fields and "num_key_value_heads" not in overrides:
        sizes["num_key_value_heads"] = sizes.get("num_attention_heads")  # MLA: one per head
    return sizes


def with_attention_layer(default_types: Optional[List[str]],
                         tiny_types: Optional[List[str]]) -> Optional[List[str]]:
    """``tiny_types`` with its last layer made an attention layer (the first KV-cache type of
    the full-size ``default_types``) when none of them keeps a KV cache; None when fine."""
    if not tiny_types or any(t in KV_LAYER_TYPES for t in tiny_types):
        return None
    kv = next((t for t in default_types or () if t in KV_LAYER_TYPES), "full_attention")
    return list(tiny_types[:-1]) + [kv]
