"""A tiny transformers Llama and its static-KV-cache decode loop, compiled against eager, for
the single-process tests that run code we did not write."""
import torch


def tiny_llama():
    """(config, model): 2 layers, hidden 32, vocab 64, GQA 4/2 heads, seeded."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return cfg, LlamaForCausalLM(cfg).eval()


def decode_matches_eager(cfg, model, step, positions=range(4, 8)):
    """Prefill two ``StaticCache``\\ s eagerly with one prompt, then decode greedily: ``step``
    (the compiled ``model.forward``) on one cache, the model on the other; logits must agree
    within 1e-5 at every position."""
    from transformers import StaticCache

    caches = [StaticCache(config=cfg, max_cache_len=16) for _ in range(2)]
    prompt = torch.randint(0, 64, (1, 4))
    with torch.no_grad():
        for cache in caches:  # prefill eagerly
            model(prompt, past_key_values=cache, cache_position=torch.arange(4), use_cache=True)
        token = torch.tensor([[5]])
        for pos in positions:
            args = dict(input_ids=token, cache_position=torch.tensor([pos]), use_cache=True)
            ref = model(past_key_values=caches[0], **args).logits
            got = step(past_key_values=caches[1], **args).logits
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
            token = ref[:, -1:].argmax(-1)
