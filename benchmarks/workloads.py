"""The collective workloads of ``compare.py``, each an ``nn.Module`` built per rank.

* ``moe``: an expert-parallel MoE block as graph-mode decode runs it: top-1 gating, a
  fixed-capacity dispatch buffer (``index_add``), ``all_to_all_single`` to the ranks that own
  the experts, batched expert MLPs, ``all_to_all_single`` back, gather and gate; beside it a
  tensor-parallel shared expert (column- then row-parallel linear + ``all_reduce``).
* ``llama``: the model suite's tiny Llama sharded with ``parallelize_module`` (prefill logits).
* ``decode``: a tiny HF Llama loaded with transformers' own tensor parallelism
  (``from_pretrained(dir, tp_plan="auto")`` from a random config saved locally) and a
  ``StaticCache``; one one-token decode step (fixed cache position, so every call does the
  same work).

``build(name, rank, world, device, device_type, args) -> (module, inputs)``; ``module(*inputs)``
returns a tensor.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class MoEBlock(nn.Module):
    """Top-1 MoE with ``experts_per_rank`` experts on each rank, capacity ``capacity`` tokens
    per expert, plus a TP-sharded shared expert."""

    def __init__(self, rank, world, tokens=256, hidden=512, ffn=512, shared_ffn=1024,
                 experts_per_rank=2, capacity_factor=1.25, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        n_exp = experts_per_rank * world

        def r(*shape):
            return nn.Parameter(torch.randn(*shape, generator=g) / shape[-2] ** 0.5,
                                requires_grad=False)

        self.world, self.n_exp, self.local = world, n_exp, experts_per_rank
        self.capacity = int(capacity_factor * tokens / n_exp)
        self.gate = r(hidden, n_exp)
        full_w1, full_w2 = r(n_exp, hidden, ffn), r(n_exp, ffn, hidden)
        self.w1 = nn.Parameter(full_w1[rank * experts_per_rank:(rank + 1) * experts_per_rank]
                               .clone(), requires_grad=False)
        self.w2 = nn.Parameter(full_w2[rank * experts_per_rank:(rank + 1) * experts_per_rank]
                               .clone(), requires_grad=False)
        s1, s2 = r(hidden, shared_ffn), r(shared_ffn, hidden)
        self.s1 = nn.Parameter(s1.chunk(world, 1)[rank].contiguous(), requires_grad=False)
        self.s2 = nn.Parameter(s2.chunk(world, 0)[rank].contiguous(), requires_grad=False)

    def forward(self, x):
        probs = torch.softmax(x @ self.gate, -1)
        expert = probs.argmax(-1)
        weight = probs.gather(-1, expert[:, None]).squeeze(-1)
        onehot = (expert[:, None] == torch.arange(self.n_exp, device=x.device)).to(x.dtype)
        position = ((onehot.cumsum(0) - 1) * onehot).sum(-1)     # arrival order per expert
        keep = (position < self.capacity).to(x.dtype)            # over capacity: dropped
        slot = expert * self.capacity + position.clamp(max=self.capacity - 1).to(expert.dtype)
        buf = x.new_zeros(self.n_exp * self.capacity, x.shape[-1])
        buf.index_add_(0, slot, x * keep[:, None])
        recv = torch.empty_like(buf)
        dist.all_to_all_single(recv, buf)                        # dispatch
        shared = F.silu(x @ self.s1) @ self.s2                   # shared expert (TP)
        dist.all_reduce(shared)
        h = recv.view(self.world, self.local, self.capacity, -1).transpose(0, 1)
        h = h.reshape(self.local, self.world * self.capacity, -1)
        h = torch.bmm(F.silu(torch.bmm(h, self.w1)), self.w2)
        h = h.reshape(self.local, self.world, self.capacity, -1).transpose(0, 1).reshape(buf.shape)
        back = torch.empty_like(h)
        dist.all_to_all_single(back, h)                          # combine
        routed = back[slot] * (keep * weight)[:, None]
        return routed + shared


class Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


class DecodeStep(nn.Module):
    """One decode step of an HF model over a ``StaticCache`` whose tensors are buffers here
    (so the cache is module state). The cache layers count the tokens they hold
    (``cumulative_length``); each step sets it to ``pos`` first, so every call writes the same
    slot and does the same work."""

    def __init__(self, model, cache):
        super().__init__()
        self.model, self.cache = model, cache
        for i, layer in enumerate(cache.layers):
            self.register_buffer(f"k{i}", layer.keys, persistent=False)
            self.register_buffer(f"v{i}", layer.values, persistent=False)
            self.register_buffer(f"n{i}", layer.cumulative_length, persistent=False)

    def forward(self, ids, pos):
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(pos.reshape(()))
        return self.model(input_ids=ids, past_key_values=self.cache, cache_position=pos,
                          use_cache=True).logits


DECODE_CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _decode(rank, device, args):
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    path = os.path.join(args.cache_dir + "-model")
    if rank == 0 and not os.path.exists(os.path.join(path, "config.json")):
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**DECODE_CONFIG)).save_pretrained(path)
    dist.barrier()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = LlamaForCausalLM.from_pretrained(path, tp_plan="auto").eval()
    cache = StaticCache(config=model.config, max_cache_len=32)
    ids = torch.tensor([[3], [5]], device=device)
    pos = torch.tensor([4], device=device)
    with torch.no_grad():  # the cache allocates its tensors on the first call
        model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)
    return DecodeStep(model, cache), (ids, pos)


def build(name, rank, world, device, device_type, args):
    if name == "moe":
        x = torch.randn(256, 512, generator=torch.Generator().manual_seed(10 + rank))
        return MoEBlock(rank, world).to(device).eval(), (x.to(device),)
    if name == "llama":
        from models import tp_llama

        model = tp_llama(world, device, device_type, num_hidden_layers=args.layers)
        ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq),
                            generator=torch.Generator().manual_seed(1)).to(device)
        return Logits(model), (ids,)
    if name == "decode":
        return _decode(rank, device, args)
    raise ValueError(f"unknown workload {name!r}; expected moe, llama or decode")
