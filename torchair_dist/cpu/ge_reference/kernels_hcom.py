"""Hcom* GE ops through ``torch.distributed`` (gloo, NCCL or HCCL process groups).

The ``group`` attribute is a stable group name; it is resolved to a live process group with
:func:`torchair_dist.collectives.groups.resolve` when the graph is loaded. Every kernel returns a
new tensor and leaves its input untouched, like the GE op.

The collectives are asynchronous (``kernel(..., asynchronous=True)``): a kernel issues the
collective and returns ``done()``, which waits and gives the output; the reference executor
calls it just before the first op that reads the output (as GE runs HCCL ops on their own
stream), so the compute scheduled between them overlaps the communication. ``HcomSend`` is
waited for at the end of the graph and ``HcomReceive`` blocks.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ...collectives import groups
from ...collectives.spec import DIST_REDUCE_OPS
from .. import shm
from .kernels import ints, kernel
from .opspec import GeRuntimeError, OpSpec

def _group(spec: OpSpec):
    return groups.resolve(spec.attr("group"))


def _reduce_op(spec: OpSpec):
    try:
        return DIST_REDUCE_OPS[spec.attr("reduction")]
    except KeyError:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: unknown reduction "
                             f"{spec.attr('reduction')!r}") from None


def _done(work, y):
    def done():
        work.wait()
        return y
    return done


def _finished(y):
    return lambda: y


def _shm_group(spec: OpSpec):
    """The group name for the shared-memory transport, None when this graph does not use it
    (``distributed_config.cpu_shm_collectives`` off, or a device graph)."""
    if not spec.state.get("shm") or spec.state["device"].type != "cpu":
        return None
    return groups.stable_name_of(_group(spec))


@kernel("HcomAllReduce", asynchronous=True)
def _all_reduce(spec: OpSpec):
    pg, op = _group(spec), _reduce_op(spec)
    via_shm = _shm_group(spec) if spec.attr("reduction") in shm.REDUCE_OPS else None

    def run(x):
        y = x.clone(memory_format=torch.contiguous_format)
        if via_shm is not None:
            return _finished(shm.all_reduce_(y, spec.attr("reduction"), via_shm))
        return _done(dist.all_reduce(y, op, group=pg, async_op=True), y)
    return run


@kernel("HcomAllGather", asynchronous=True)
def _all_gather(spec: OpSpec):
    pg, size = _group(spec), spec.attr("rank_size")

    def run(x):
        x = x.contiguous()
        y = x.new_empty((x.shape[0] * size,) + tuple(x.shape[1:]))
        return _done(dist.all_gather_into_tensor(y, x, group=pg, async_op=True), y)
    return run


@kernel("HcomReduceScatter", asynchronous=True)
def _reduce_scatter(spec: OpSpec):
    pg, op, size = _group(spec), _reduce_op(spec), spec.attr("rank_size")

    def run(x):
        x = x.contiguous()
        y = x.new_empty((x.shape[0] // size,) + tuple(x.shape[1:]))
        return _done(dist.reduce_scatter_tensor(y, x, op, group=pg, async_op=True), y)
    return run


@kernel("HcomBroadcast", asynchronous=True)
def _broadcast(spec: OpSpec):
    pg, root = _group(spec), spec.attr("root_rank")

    def run(*xs):
        ys = tuple(x.clone(memory_format=torch.contiguous_format) for x in xs)
        works = [dist.broadcast(y, group=pg, group_src=root, async_op=True) for y in ys]

        def done():
            for work in works:
                work.wait()
            return ys if len(ys) != 1 else ys[0]
        return done
    return run


@kernel("HcomAllToAll", asynchronous=True)
def _all_to_all(spec: OpSpec):
    pg, via_shm = _group(spec), _shm_group(spec)

    def run(x):
        if via_shm is not None:
            n = x.numel() // pg.size()
            return _finished(shm.all_to_all_v(x, [n] * pg.size(), [i * n for i in range(
                pg.size())], [n] * pg.size(), [i * n for i in range(pg.size())], via_shm))
        x = x.contiguous()
        y = torch.empty_like(x)
        return _done(dist.all_to_all_single(y, x, group=pg, async_op=True), y)
    return run


@kernel("HcomAllToAllV", asynchronous=True)
def _all_to_all_v(spec: OpSpec):
    """Counts and displacements are in elements of the flattened send/receive buffers."""
    pg, via_shm = _group(spec), _shm_group(spec)

    def run(x, send_counts, send_displs, recv_counts, recv_displs):
        sc, sd, rc, rd = ints(send_counts), ints(send_displs), ints(recv_counts), ints(recv_displs)
        if via_shm is not None:
            return _finished(shm.all_to_all_v(x, sc, sd, rc, rd, via_shm).reshape(-1))
        flat = x.reshape(-1)
        if all(d == sum(sc[:i]) for i, d in enumerate(sd)):
            send = flat[:sum(sc)]  # pieces back to back (every decomposition): no gather copy
        else:
            send = torch.cat([flat[d:d + c] for c, d in zip(sc, sd)])
        recv = flat.new_empty(sum(rc))
        work = dist.all_to_all_single(recv, send, output_split_sizes=rc, input_split_sizes=sc,
                                      group=pg, async_op=True)
        if all(d == sum(rc[:i]) for i, d in enumerate(rd)):
            return _done(work, recv)

        def done():
            work.wait()
            out = flat.new_zeros(sum(rc))
            offset = 0
            for c, d in zip(rc, rd):
                out[d:d + c] = recv[offset:offset + c]
                offset += c
            return out
        return done
    return run


@kernel("HcomSend")
def _send(spec: OpSpec):
    """Issued asynchronously (a blocking send could deadlock against the peer's own sends);
    every pending send of the graph is waited for before the graph returns."""
    pg, dst, tag = _group(spec), spec.attr("dest_rank"), spec.attr("sr_tag", 0)
    pending = spec.state.setdefault("pending", [])

    def finish():
        for work in pending:
            work.wait()
        pending.clear()
    spec.state["finish"] = finish

    def run(x):
        x = x.contiguous()
        pending.append(dist.isend(x, group=pg, group_dst=dst, tag=tag))
    return run


@kernel("HcomReceive")
def _receive(spec: OpSpec):
    pg, src, tag = _group(spec), spec.attr("src_rank"), spec.attr("sr_tag", 0)
    dtype, device = spec.outputs[0][0], spec.state.get("device")
    shape = tuple(spec.attr("shape"))

    def run():
        y = torch.empty(shape, dtype=dtype, device=device)
        dist.recv(y, group=pg, group_src=src, tag=tag)
        return y
    return run
