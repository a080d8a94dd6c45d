"""The tiny configs of the coverage run (``launch/tiny_config.py``) are the full-size
architecture made small, not a different model: sizes the class stores under another name
shrink too, derived sizes stay consistent, hybrid models keep an attention layer, and the
architectures whose default config cannot build a 2-layer model build and decode eagerly with
a static cache (single process, no TP: the 2-rank comparison is ``benchmarks/hf_coverage.py``).
"""
import os
import sys
import warnings

import pytest
import torch

_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

import hf_decode  # noqa: E402
import tiny_config as tc  # noqa: E402


def test_attribute_map_names_shrink():
    # Kimi-Linear stores num_experts_per_tok as num_experts_per_token: top-2 of 4 experts,
    # not the default top-8 (which cannot select from 4)
    cfg = tc.tiny_config("kimi_linear")
    assert cfg.num_experts_per_token == 2 and cfg.num_experts == 4
    cfg = tc.tiny_config("bailing_hybrid")  # n_group is num_expert_group: 1 group of 4 experts
    assert cfg.num_expert_group == 1 and cfg.num_experts_per_token == 2


def test_every_vocabulary_size_is_tiny():
    cfg = tc.tiny_config("inkling2_text")  # the padding rows are vocab_size - unpadded
    assert cfg.unpadded_vocab_size == cfg.vocab_size == tc.TINY["vocab_size"]
    assert tc.tiny_config("gemma3n_text").vocab_size_per_layer_input == tc.TINY["vocab_size"]


def test_hybrid_models_keep_an_attention_layer():
    # the default patterns put attention every 4th (Qwen3-Next) or 6th layer: cut to 2 layers
    # they would hold no KV cache at all
    assert tc.tiny_config("qwen3_next").layer_types == ["linear_attention", "full_attention"]
    assert tc.tiny_config("qwen4_exp_text").layer_types == ["linear_attention",
                                                           "indexed_attention"]
    assert tc.with_attention_layer(["sliding_attention"], ["conv", "conv"]) == [
        "conv", "sliding_attention"]
    assert tc.with_attention_layer(None, ["linear_attention"]) == ["full_attention"]
    assert tc.with_attention_layer(["full_attention"], ["conv", "full_attention"]) is None
    # dense models and explicit overrides are left alone
    assert tc.tiny_config("llama").to_dict().get("layer_types") is None
    assert tc.tiny_config("qwen3_next", layer_types=["linear_attention"] * 2).layer_types == [
        "linear_attention"] * 2


def test_sizes_of_plain_models_are_unchanged():
    cfg = tc.tiny_config("llama")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim"):
        assert getattr(cfg, key) == tc.TINY[key], key
    assert tc.tiny_config("llama", num_hidden_layers=1).num_hidden_layers == 1


@pytest.mark.parametrize("arch", ["cohere_compass_text", "gemma3n_text", "lfm2_moe", "qwen3_next"])
def test_tiny_model_builds_and_decodes(arch):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(tc.tiny_config(arch), dtype=torch.float32)
    model.eval()
    ids = hf_decode.prompt_ids(2, 5, model.config.vocab_size)
    tokens, _, logits = hf_decode.static_cache_loop(model, ids, 3)
    assert tokens.shape == (2, 3)
    with torch.no_grad():  # the cached decode agrees with a full forward over the same tokens
        full = model(input_ids=torch.cat([ids, tokens[:, :2]], 1), use_cache=False).logits
    torch.testing.assert_close(logits[-1], full[:, -1], atol=1e-4, rtol=1e-4)


def test_one_line_names_where_an_empty_error_was_raised():
    def fails():
        raise AssertionError

    try:
        fails()
    except AssertionError as exc:
        text = hf_decode.one_line(exc)
    assert text.startswith("AssertionError (no message) in fails (")
    assert "test_tiny_config.py:" in text
    assert hf_decode.one_line(RuntimeError("shape is wrong\nmore")) == (
        "RuntimeError: shape is wrong")


def test_one_line_names_a_data_dependent_branch():
    # the message Dynamo gives when transformers' code branches on a tensor's value
    text = ("Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)).\n\n"
            "Caused by: if n_blocks > 0:  # transformers/models/x/modeling_x.py:752 in forward "
            "(_dynamo/variables/tensor.py:2606 in evaluate_expr)\nFor more information")
    assert hf_decode.one_line(RuntimeError(text)) == (
        "data-dependent branch `if n_blocks > 0:` (transformers/models/x/modeling_x.py:752)")
