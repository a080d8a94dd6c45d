"""Small tensor-parallel models written with plain torch.distributed calls.

Column-parallel layers hold a slice of the output features, row-parallel layers a slice of the
input features followed by an all_reduce: the Megatron layout. Weights are generated from one
seed on every rank and then sliced, so ``full_reference`` can compute the unsharded result.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def _shard(t: torch.Tensor, dim: int, rank: int, world: int) -> torch.Tensor:
    return t.chunk(world, dim=dim)[rank].contiguous()


class TPBlock(nn.Module):
    """Pre-norm transformer block: attention (heads split over ranks) + MLP (ffn split)."""

    def __init__(self, hidden: int, heads: int, ffn: int, rank: int, world: int, seed: int = 0):
        super().__init__()
        if heads % world or ffn % world:
            raise ValueError(f"heads ({heads}) and ffn ({ffn}) must divide by world size {world}")
        g = torch.Generator().manual_seed(seed)
        full = {
            "wq": torch.randn(hidden, hidden, generator=g) / hidden**0.5,
            "wk": torch.randn(hidden, hidden, generator=g) / hidden**0.5,
            "wv": torch.randn(hidden, hidden, generator=g) / hidden**0.5,
            "wo": torch.randn(hidden, hidden, generator=g) / hidden**0.5,
            "w1": torch.randn(ffn, hidden, generator=g) / hidden**0.5,
            "w2": torch.randn(hidden, ffn, generator=g) / ffn**0.5,
        }
        self.local_heads, self.head_dim = heads // world, hidden // heads
        for name in ("wq", "wk", "wv", "w1"):  # column parallel: split output features
            self.register_parameter(name, nn.Parameter(_shard(full[name], 0, rank, world)))
        for name in ("wo", "w2"):              # row parallel: split input features
            self.register_parameter(name, nn.Parameter(_shard(full[name], 1, rank, world)))
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q, k, v = (F.linear(h, w).view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = F.linear(a.transpose(1, 2).reshape(b, s, -1), self.wo)
        dist.all_reduce(a)
        x = x + a
        m = F.linear(F.gelu(F.linear(self.norm2(x), self.w1)), self.w2)
        dist.all_reduce(m)
        return x + m


class TPTransformer(nn.Module):
    def __init__(self, layers=2, hidden=128, heads=4, ffn=512, rank=0, world=1, seed=0):
        super().__init__()
        self.blocks = nn.ModuleList(TPBlock(hidden, heads, ffn, rank, world, seed + i)
                                    for i in range(layers))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


# ------------------------------------------------------------------ a tiny HF Llama with TP
LLAMA_DEFAULTS = dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=128)


def llama_tp_plan(num_layers: int) -> dict:
    """Megatron plan for HF Llama: Colwise q/k/v/gate/up, Rowwise o/down, every layer."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for i in range(num_layers):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    return plan


def tiny_llama(seed: int = 0, attn_implementation: str = "sdpa", **overrides):
    """``LlamaForCausalLM`` from a tiny random config (no download), eval mode. Needs
    ``transformers`` (the ``test`` extra)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**{**LLAMA_DEFAULTS, **overrides}, attn_implementation=attn_implementation)
    return LlamaForCausalLM(cfg).eval()


def tp_llama(world: int, device, device_type: str = "cpu", seed: int = 0, **overrides):
    """The tiny Llama on ``device``, sharded over a 1-D ``("tp",)`` mesh of ``world`` ranks
    with ``parallelize_module`` (needs an initialised process group when world > 1)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    model = tiny_llama(seed, **overrides).to(device)
    mesh = init_device_mesh(device_type, (world,), mesh_dim_names=("tp",))
    return parallelize_module(model, mesh, llama_tp_plan(model.config.num_hidden_layers))
