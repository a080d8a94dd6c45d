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

The block is ``benchmarks/workloads.py``'s (one MoE in the project), sized here: capacity factor
1.0, a shared expert of ``SHARED_FFN`` per rank.
"""
from __future__ import annotations

import os
import sys

import torch

_BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "benchmarks")
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)
from workloads import MoEBlock as _BenchMoE  # noqa: E402

TOKENS, HIDDEN, FFN, SHARED_FFN, EXPERTS_PER_RANK = 256, 512, 256, 512, 2


class MoEBlock(_BenchMoE):
    def __init__(self, rank: int, world: int, seed: int = 0, tokens: int = TOKENS,
                 hidden: int = HIDDEN):
        super().__init__(rank, world, tokens=tokens, hidden=hidden, ffn=FFN,
                         shared_ffn=SHARED_FFN * world, experts_per_rank=EXPERTS_PER_RANK,
                         capacity_factor=1.0, seed=seed)


def inputs(rank: int, calls: int, tokens: int = TOKENS, hidden: int = HIDDEN):
    """``calls`` different inputs of this rank."""
    return [torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(100 * i + rank))
            for i in range(calls)]
