"""Default decompositions of collectives, merged first by ``get_npu_backend``.

The table (``{op overload: function}``), applied by AOT autograd while it traces the graph:

* ``torchair_dist.all_gather`` (the list all-gather the remap emits): equal element counts -> ONE
  ``_c10d_functional.all_gather_into_tensor`` of the flattened input + ``wait_tensor`` + slices
  reshaped to the users' sizes; unequal sizes -> ONE ``_c10d_functional.broadcast`` per group rank
  (TorchAir's ``allgather_decomposition``).
* ``_c10d_functional.all_to_all_single`` -> ``torchair_dist.all_to_all_v``: split sizes (rows)
  become send/recv counts in elements (``split * prod(shape[1:])``), displacements are their
  prefix sums — the operand form of GE's ``HcomAllToAllV`` (TorchAir's
  ``decomp_c10d_functional_all_to_all_single``).

Users replace either entry through ``get_npu_backend(custom_decompositions={op: fn})``.
Decompositions run per rank at trace time, so they may read the rank and the group.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Dict, List

import torch
import torch.distributed as dist
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import groups
from .collective_ops import op


def _same_numel(a: torch.Tensor, b: torch.Tensor) -> bool:
    return statically_known_true(a.numel() == b.numel())


def decompose_all_gather(output_like: List[torch.Tensor], input: torch.Tensor,
                         group_name: str) -> List[torch.Tensor]:
    pg = groups.to_process_group(group_name)
    c10d_name = pg.group_name
    world = len(output_like)
    # Element counts, not shapes, decide (what every rank shares: the list's sizes are the same
    # on every rank, so all ranks make the same choice; a piece may land in another shape).
    if all(_same_numel(t, input) for t in output_like):
        n = input.numel()
        flat = input.contiguous().reshape(-1)
        gathered = torch.ops._c10d_functional.all_gather_into_tensor(flat, world, c10d_name)
        gathered = torch.ops._c10d_functional.wait_tensor(gathered)
        return [gathered[i * n:(i + 1) * n].reshape(t.shape) for i, t in enumerate(output_like)]
    me = dist.get_rank(pg)
    outs = []
    for i, t in enumerate(output_like):
        buf = input.reshape(t.shape) if i == me else input.new_empty(t.shape)
        got = torch.ops._c10d_functional.broadcast(buf.contiguous(), i, c10d_name)
        outs.append(torch.ops._c10d_functional.wait_tensor(got))
    return outs


def counts_and_displacements(split_sizes, rows: int, inner, world: int):
    """Element counts and their prefix-sum displacements from row split sizes (even if empty)."""
    if not split_sizes:
        split_sizes = [rows // world] * world
    counts = [s * inner for s in split_sizes]
    displacements = [0, *itertools.accumulate(counts)][:-1]
    return counts, displacements


def decompose_all_to_all_single(input: torch.Tensor, output_split_sizes, input_split_sizes,
                                group_name) -> torch.Tensor:
    pg = groups.to_process_group(group_name)
    world = dist.get_world_size(pg)
    inner = math.prod(input.shape[1:]) if input.dim() > 1 else 1
    send, send_disp = counts_and_displacements(input_split_sizes, input.shape[0], inner, world)
    recv, recv_disp = counts_and_displacements(output_split_sizes, input.shape[0], inner, world)
    return op("all_to_all_v")(input, send, send_disp, recv, recv_disp,
                              groups.stable_name_of(pg))


def default_decompositions() -> Dict[object, Callable]:
    """The default decomposition table merged first by get_npu_backend (a fresh dict)."""
    return {
        op("all_gather"): decompose_all_gather,
        torch.ops._c10d_functional.all_to_all_single.default: decompose_all_to_all_single,
    }
