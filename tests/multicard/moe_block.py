"""An expert-parallel MoE block as graph-mode decode runs it (issue 29's race on gloo):

top-1 gating; each token goes to a fixed-capacity slot of its expert's dispatch buffer
(``index_add``; tokens past the capacity are dropped); ``all_to_all_single`` sends every
rank's slots to the rank that owns the experts, batched expert MLPs run there, and a second
``all_to_all_single`` brings the results back; gather and gate. Beside it a tensor-parallel
shared expert (column- then row-parallel linear + ``all_reduce``).

With the default sizes the dispatch buffer (``experts * capacity`` rows) has the shape of the
shared expert's activations (``tokens`` rows): the buffer is dead for inductor's memory planner
as soon as the dispatch is issued, and a same-shaped buffer is wanted right then, so the
planner reuses it unless it knows the collective still reads it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

TOKENS, HIDDEN, FFN, SHARED_FFN, EXPERTS_PER_RANK = 256, 512, 256, 512, 2


class MoEBlock(nn.Module):
    def __init__(self, rank: int, world: int, seed: int = 0, tokens: int = TOKENS,
                 hidden: int = HIDDEN):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.world, self.local = world, EXPERTS_PER_RANK
        self.n_exp = EXPERTS_PER_RANK * world
        self.capacity = tokens // self.n_exp

        def r(*shape):
            return torch.randn(*shape, generator=g) / shape[-2] ** 0.5

        self.register_buffer("gate", r(hidden, self.n_exp))
        mine = slice(rank * self.local, (rank + 1) * self.local)
        self.register_buffer("w1", r(self.n_exp, hidden, FFN)[mine].clone())
        self.register_buffer("w2", r(self.n_exp, FFN, hidden)[mine].clone())
        s1, s2 = r(hidden, SHARED_FFN * world), r(SHARED_FFN * world, hidden)
        self.register_buffer("s1", s1.chunk(world, 1)[rank].contiguous())
        self.register_buffer("s2", s2.chunk(world, 0)[rank].contiguous())

    def forward(self, x):
        probs = torch.softmax(x @ self.gate, -1)
        expert = probs.argmax(-1)
        weight = probs.gather(-1, expert[:, None]).squeeze(-1)
        onehot = (expert[:, None] == torch.arange(self.n_exp)).to(x.dtype)
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
        h = h.reshape(self.local, self.world, self.capacity, -1).transpose(0, 1)
        h = h.reshape(buf.shape)
        back = torch.empty_like(h)
        dist.all_to_all_single(back, h)                          # combine
        return back[slot] * (keep * weight)[:, None] + shared


def inputs(rank: int, calls: int, tokens: int = TOKENS, hidden: int = HIDDEN):
    """``calls`` different inputs of this rank."""
    return [torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(100 * i + rank))
            for i in range(calls)]
