"""The ``torchair_dist`` collective op library: the collectives torch's ``_c10d_functional`` lacks.

Everything else (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single,
broadcast, wait_tensor) is captured as torch's own ``_c10d_functional`` ops; these four fill the
gaps. All are functional (inputs are never written; results are fresh tensors), so the receive
buffer of a p2p op and the outputs of a list collective are real data dependencies in the graph.

Schemas (defined from the rows of :mod:`.spec`; ``group_name`` is a stable group name from
:mod:`.groups`, e.g. ``"tag=;ranks=0,1"``; a c10d name such as ``"0"`` is accepted too;
``dst``/``src`` are *global* ranks)::

    torchair_dist::all_gather(Tensor[] output_like, Tensor input, str group_name) -> Tensor[]
        List all-gather. Result i has the shape/dtype of ``output_like[i]`` and holds the input of
        group rank i; the sizes may differ per rank. Decomposed by default
        (:mod:`.decompositions`): equal sizes -> one gather-into-tensor + split/reshape,
        unequal sizes -> one broadcast per rank.
    torchair_dist::all_to_all_v(Tensor input, SymInt[] send_counts, SymInt[] send_displacements,
                                SymInt[] recv_counts, SymInt[] recv_displacements,
                                str group_name) -> Tensor
        All-to-all in the counts/displacements form of GE's ``HcomAllToAllV``: counts and
        displacements are in *elements* of the flattened input/output, one per group rank.
        Result shape ``[sum(recv_counts) // inner, *input.shape[1:]]`` with
        ``inner = prod(input.shape[1:])``. Like every ``_c10d_functional`` collective, the
        result is valid only after ``_c10d_functional.wait_tensor(result)``: when the pieces
        are packed (displacements are the prefix sums of the counts, as every decomposition
        emits) the exchange runs asynchronously so compute can overlap it.
    torchair_dist::send(Tensor input, int dst, int tag, str group_name) -> Tensor
        Issues a send of ``input`` to ``dst``; returns an empty token tensor. The send is complete
        once ``_c10d_functional.wait_tensor(token)`` returns.
    torchair_dist::recv(Tensor like, int src, int tag, str group_name) -> Tensor
        Issues a receive from ``src`` into a new tensor with the shape/dtype of ``like``; the data
        is there once ``_c10d_functional.wait_tensor(result)`` returns (the remap then copies it
        into the user's buffer, so readers of the buffer depend on the receive).

    torchair_dist::barrier(Tensor token, str group_name) -> Tensor
        Blocks until every rank of the group has reached it: an all-reduce of a one-element
        token on the group's device, then a wait (GE emits the same all-reduce); capturable in
        a device graph, unlike the host-side ``dist.barrier``. ``token`` is a one-element
        tensor that gives the op a dtype/shape for the cross-rank fingerprint. Returns an
        empty tensor.

``send``/``recv``/``barrier`` are registered as side-effectful (never dead-code eliminated). Eager
implementations are ``CompositeExplicitAutograd`` kernels that resolve the process group from the
name and call ``torch.distributed``, so they run on gloo, NCCL and HCCL alike. The p2p kernels
issue the operation asynchronously and register its ``Work`` against the returned tensor, the same
mechanism ``_c10d_functional`` uses, so ``wait_tensor`` waits for it.
"""
from __future__ import annotations

import itertools

import math
from typing import List, Sequence

import torch
import torch.distributed as dist

from . import groups, spec
from .spec import NAMESPACE

# op name -> schema: the library's rows of the spec table
SCHEMAS = {name: row.schema for name, row in spec.library_specs().items()}

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")  # FRAGMENT: safe if imported twice


def _define_all() -> None:
    for name, schema in SCHEMAS.items():
        if not hasattr(getattr(torch.ops, NAMESPACE), name):
            _lib.define(schema, tags=(torch.Tag.pt2_compliant_tag,))


_define_all()


# ------------------------------------------------------------------------------ shape helpers
def a2a_output_shape(input: torch.Tensor, recv_counts: Sequence) -> List:
    inner = math.prod(input.shape[1:]) if input.dim() > 1 else 1
    return [sum(recv_counts) // inner, *input.shape[1:]]


# --------------------------------------------------------------------------------- eager impls
def _group_rank(pg, global_rank: int) -> int:
    return dist.get_process_group_ranks(pg).index(global_rank)


def _register(result: torch.Tensor, work) -> torch.Tensor:
    torch._C._distributed_c10d._register_work(result, work)
    return result


def _all_gather_eager(output_like, input, group_name):
    pg = groups.to_process_group(group_name)
    outs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in output_like]
    me = dist.get_rank(pg)
    if all(t.shape == input.shape for t in output_like):
        flat = torch.empty((len(outs) * input.numel(),), dtype=input.dtype, device=input.device)
        dist.all_gather_into_tensor(flat, input.contiguous().reshape(-1), group=pg)
        for i, out in enumerate(outs):
            out.copy_(flat[i * input.numel():(i + 1) * input.numel()].view(out.shape))
        return outs
    for i, out in enumerate(outs):  # unequal sizes: one broadcast per rank
        if i == me:
            out.copy_(input.reshape(out.shape))
        dist.broadcast(out, group_src=i, group=pg)
    return outs


def _is_packed(counts, displacements) -> bool:
    """True when the pieces lie back to back in order (displacements are the prefix sums)."""
    return list(displacements) == [0, *itertools.accumulate(counts)][:len(counts)]


def _all_to_all_v_eager(input, send_counts, send_displacements, recv_counts,
                        recv_displacements, group_name):
    pg = groups.to_process_group(group_name)
    flat = input.contiguous().reshape(-1)
    shape = a2a_output_shape(input, recv_counts)
    if _is_packed(send_counts, send_displacements) and _is_packed(recv_counts,
                                                                    recv_displacements):
        # The common case (every decomposition emits it): issue asynchronously so compute
        # placed before the wait_tensor overlaps the exchange.
        send = flat[:sum(send_counts)]
        recv = flat.new_empty((sum(recv_counts),))
        work = dist.all_to_all_single(recv, send, list(recv_counts), list(send_counts),
                                      group=pg, async_op=True)
        return _register(recv.view(shape), work)
    send = torch.cat([flat[d:d + c] for c, d in zip(send_counts, send_displacements)])
    recv = flat.new_empty((sum(recv_counts),))
    dist.all_to_all_single(recv, send, list(recv_counts), list(send_counts), group=pg)
    out = flat.new_empty((sum(recv_counts),))
    offset = 0
    for c, d in zip(recv_counts, recv_displacements):
        out[d:d + c] = recv[offset:offset + c]
        offset += c
    return out.view(shape)


def _send_eager(input, dst, tag, group_name):
    pg = groups.to_process_group(group_name)
    work = dist.isend(input.contiguous(), group_dst=_group_rank(pg, dst), group=pg, tag=tag)
    return _register(input.new_empty((0,)), work)


def _recv_eager(like, src, tag, group_name):
    pg = groups.to_process_group(group_name)
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    work = dist.irecv(out, group_src=_group_rank(pg, src), group=pg, tag=tag)
    return _register(out, work)


def _group_device(pg) -> torch.device:
    """The device a collective of ``pg`` runs on: the current CUDA/NPU device for NCCL/HCCL,
    else the CPU."""
    backend = str(dist.get_backend(pg)).lower()
    for name, device_type in (("nccl", "cuda"), ("hccl", "npu")):
        if name in backend:
            module = getattr(torch, device_type)
            return torch.device(device_type, module.current_device())
    return torch.device("cpu")


def _barrier_eager(token, group_name):
    """All-reduce a one-element token on the group's device and wait for it, as GE's
    ``HcomAllReduce`` of the token does: every rank must reach it before any rank's stream
    goes on. Unlike ``dist.barrier`` it never synchronizes the host, so a device graph can
    capture it and a replay re-issues it."""
    pg = groups.to_process_group(group_name)
    device_token = torch.zeros(1, device=_group_device(pg))
    done = torch.ops._c10d_functional.all_reduce(device_token, "sum", pg.group_name)
    torch.ops._c10d_functional.wait_tensor(done)
    return token.new_empty((0,))


# ------------------------------------------------------------------------- fake (meta) impls
def _barrier_fake(token, group_name):
    return token.new_empty((0,))



def _all_gather_fake(output_like, input, group_name):
    return [t.new_empty(t.shape) for t in output_like]


def _all_to_all_v_fake(input, send_counts, send_displacements, recv_counts,
                       recv_displacements, group_name):
    return input.new_empty(a2a_output_shape(input, recv_counts))


def _send_fake(input, dst, tag, group_name):
    return input.new_empty((0,))


def _recv_fake(like, src, tag, group_name):
    return like.new_empty(like.shape)


# op name -> (eager kernel, fake kernel). Whether an op is side-effectful is in the spec table.
OPS = {
    "all_gather": (_all_gather_eager, _all_gather_fake),
    "all_to_all_v": (_all_to_all_v_eager, _all_to_all_v_fake),
    "send": (_send_eager, _send_fake),
    "recv": (_recv_eager, _recv_fake),
    "barrier": (_barrier_eager, _barrier_fake),
}

_registered = False


def register() -> None:
    """Register kernels, fake impls and side effects. Idempotent; runs at import."""
    global _registered
    if _registered:
        return
    _registered = True
    rows = spec.library_specs()
    for name, (eager, fake) in OPS.items():
        qualname = f"{NAMESPACE}::{name}"
        _lib.impl(name, eager, "CompositeExplicitAutograd")
        torch.library.register_fake(qualname, fake, lib=_lib)
        if rows[name].side_effect:
            torch.fx.node.has_side_effect(getattr(torch.ops.torchair_dist, name).default)


register()


def op(name: str) -> torch._ops.OpOverload:
    """``torch.ops.torchair_dist.<name>.default``."""
    return getattr(torch.ops.torchair_dist, name).default
