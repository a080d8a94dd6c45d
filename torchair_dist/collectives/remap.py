"""Remaps: in-place ``torch.distributed`` calls become traceable functional ops under Dynamo.

ONE table, :data:`REMAPS`, maps each ``torch.distributed`` API to a traceable replacement with
the same signature. :func:`install` registers every entry with ``torch._dynamo.substitute_in_graph``
(Dynamo's polyfill mechanism): while tracing, Dynamo inlines the replacement instead of the API;
outside tracing the API is untouched (eager runs the real c10d call). Polyfills take precedence
over torch's own ``traceable_collective_remaps``, so one mechanism covers every call, including
what stock Dynamo graph-breaks on (``async_op=True``, ``broadcast``, ``send``/``recv``, the list
``all_to_all``, unequal ``all_gather``, a stacked ``all_gather_into_tensor`` output, p2p without
``TORCHDYNAMO_ENABLE_P2P_COMPILATION``).

Each replacement issues a functional collective (``_c10d_functional.*`` or ``torchair_dist.*``)
and returns a :class:`CapturedWork`; ``wait()`` on it emits ``wait_tensor`` and copies the result
into the user's tensors. Synchronous calls wait at once, ``async_op=True`` calls return the work
so the wait lands where the program calls ``.wait()`` (inside the same graph).

The group argument is resolved at trace time (Dynamo constant-folds
``get_process_group_ranks`` and ``_get_group_tag``): torch's ops get the c10d group name, ours the
stable name of :mod:`.groups`. Peers are global ranks in the graph.

``reduce``/``gather``/``scatter`` and the list ``reduce_scatter`` are expressed with the above
(all_reduce / list all_gather / all_to_all_single / reduce_scatter_tensor), so every backend
lowers them without new ops; ranks other than the root keep their tensors unchanged.

``barrier`` becomes the side-effectful ``torchair_dist.barrier`` op (GE: an all-reduce of a
one-element token). Not captured (Dynamo reports them under ``fullgraph=True``): a work object
that escapes the compiled function, object collectives (``*_object*``), ``monitored_barrier``.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.distributed import distributed_c10d as c10d

from . import collective_ops as ops  # noqa: F401  (defines torch.ops.torchair_dist.*)
from .groups import stable_group_name

_fn = torch.ops._c10d_functional
_td = torch.ops.torchair_dist


class CapturedWork:
    """What a remapped call returns while tracing; ``wait()`` finishes it inside the graph.

    ``result`` is the functional op's output (None for a send). ``outputs`` are the user tensors
    the result is copied into: one (reshaped to fit) or several (consecutive slices of
    ``sizes`` elements of the flattened result). ``scale`` divides the result (AVG as SUM/n).
    """

    def __init__(self, result, outputs, sizes=None, token=None, scale=None):
        self.result = result
        self.outputs = outputs
        self.sizes = sizes
        self.token = token
        self.scale = scale
        self.done = False

    def wait(self, timeout=None):
        if self.done:
            return True
        self.done = True
        if self.token is not None:
            _fn.wait_tensor(self.token)
        if self.result is None:
            return True
        res = _fn.wait_tensor(self.result)
        if self.scale is not None:
            res = _divide(res, self.scale)
        if self.sizes is None:
            for out in self.outputs:
                out.copy_(res.reshape(out.shape))
            return True
        flat = res.reshape(-1)
        offset = 0
        for out, n in zip(self.outputs, self.sizes):
            out.copy_(flat[offset:offset + n].reshape(out.shape))
            offset = offset + n
        return True

    def is_completed(self):
        return self.done


def _divide(t, n):
    if t.is_floating_point() or t.is_complex():
        return t / n
    return torch.div(t, n, rounding_mode="trunc")


def _finish(work: CapturedWork, async_op: bool):
    if async_op:
        return work
    work.wait()
    return None


# ------------------------------------------------------------------ trace-time group helpers
_warned_outside: set = set()


def _outside(group) -> bool:
    """This rank is not in ``group`` (c10d hands non-members ``GroupMember.NON_GROUP_MEMBER``,
    an int that ``dynamic=True`` may trace as a SymInt): eager skips the call, and so do we."""
    return group is not None and not isinstance(group, dist.ProcessGroup)


@torch._dynamo.assume_constant_result
def _warn_outside(api: str) -> bool:
    """Runs at trace time (Dynamo calls it with the constant ``api`` and folds the result)."""
    if api not in _warned_outside:
        _warned_outside.add(api)
        warnings.warn(f"torch.distributed.{api}: this rank is not a member of the group; the "
                      f"call is skipped (as in eager)", UserWarning, stacklevel=2)
    return True


def _skip(api: str, async_op: bool = False, result=None):
    """A no-op for a non-member, like eager (which warns at every call; we warn once per API,
    at trace time)."""
    _warn_outside(api)
    if async_op:
        return CapturedWork(None, [])
    return result


def _pg(group):
    return dist.group.WORLD if group is None else group


def _ranks(group) -> List[int]:
    return dist.get_process_group_ranks(group)


def _stable_name(group) -> str:
    tag = c10d._get_group_tag(group)
    if tag.startswith("ptd:"):
        tag = ""
    return stable_group_name(_ranks(group), tag)


def _constant_int(value, candidates: List[int]) -> int:
    """``value`` as a constant: with dynamic=True a rank computed in the program may be traced
    as a SymInt; looking it up in a constant list makes Dynamo specialise (and guard) it."""
    return candidates[candidates.index(value)]


def _global_peer(group, peer, group_peer):
    world = _ranks(dist.group.WORLD)
    if group_peer is not None:
        return _ranks(group)[_constant_int(group_peer, list(range(len(_ranks(group)))))]
    return _constant_int(peer, world)


# (ReduceOp member, the functional collectives' name): matched by identity while tracing.
_REDUCE_OPS = tuple((op, name) for op, name in fc.REDUCE_OP_TO_STR.items())


def _reduce_op(op) -> str:
    """The functional collectives' name of a reduce op (None: the APIs' default, SUM).

    Found by identity, never by hashing or a default argument holding the op: torch 2.11's
    Dynamo can neither wrap a ``ReduceOp.RedOpType`` it has no source for nor hash one
    ("SourcelessBuilder ... does not know how to wrap ReduceOp.RedOpType"), so the op a
    user passes only meets ``is`` here and the graph gets its name as a string."""
    if op is None:
        return "sum"
    if isinstance(op, str):
        return op
    for member, name in _REDUCE_OPS:
        if op is member:
            return name
    raise ValueError(f"reduce op {op!r} has no functional collective (known: "
                     f"{[name for _, name in _REDUCE_OPS]})")


# ------------------------------------------------------------------------------ replacements
def all_reduce(tensor, op=None, group=None, async_op=False):
    if _outside(group):
        return _skip("all_reduce", async_op)
    group = _pg(group)
    name = _reduce_op(op)
    scale = None
    if name == "avg":  # no AVG on gloo or HCCL: SUM, then divide by the group size
        name, scale = "sum", len(_ranks(group))
    res = _fn.all_reduce(tensor.contiguous(), name, group.group_name)
    return _finish(CapturedWork(res, [tensor], scale=scale), async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """An in-graph barrier (side-effectful, never reordered against other collectives)."""
    if _outside(group):
        return _skip("barrier", async_op)
    group = _pg(group)
    _td.barrier(torch.zeros(1), _stable_name(group))
    return _finish(CapturedWork(None, []), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    if _outside(group):
        return _skip("all_gather_into_tensor", async_op)
    group = _pg(group)
    world = len(_ranks(group))
    res = _fn.all_gather_into_tensor(input_tensor.contiguous(), world, group.group_name)
    # concatenated (world*d0, ...) and stacked (world, d0, ...) outputs share one memory layout
    return _finish(CapturedWork(res, [output_tensor]), async_op)


def _all_gather_base(output_tensor, input_tensor, group=None, async_op=False):
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    if _outside(group):
        return _skip("reduce_scatter_tensor", async_op)
    group = _pg(group)
    world = len(_ranks(group))
    name = _reduce_op(op)
    scale = None
    if name == "avg":
        name, scale = "sum", world
    res = _fn.reduce_scatter_tensor(input.contiguous(), name, world, group.group_name)
    return _finish(CapturedWork(res, [output], scale=scale), async_op)


def _reduce_scatter_base(output, input, op=None, group=None, async_op=False):
    return reduce_scatter_tensor(output, input, op, group, async_op)


def _split_list(sizes):
    if sizes is None:
        return None
    if isinstance(sizes, torch.Tensor):
        return sizes.tolist()  # needs torch._dynamo.config.capture_scalar_outputs = True
    return list(sizes)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    if _outside(group):
        return _skip("all_to_all_single", async_op)
    group = _pg(group)
    world = len(_ranks(group))
    out_splits = _split_list(output_split_sizes)
    in_splits = _split_list(input_split_sizes)
    if out_splits is None:
        out_splits = [input.shape[0] // world] * world
    if in_splits is None:
        in_splits = [input.shape[0] // world] * world
    res = _fn.all_to_all_single(input.contiguous(), out_splits, in_splits, group.group_name)
    return _finish(CapturedWork(res, [output]), async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """List form: pieces of any (also zero) size, flattened into one all_to_all_single."""
    if _outside(group):
        return _skip("all_to_all", async_op)
    group = _pg(group)
    flat = torch.cat([t.reshape(-1) for t in input_tensor_list])
    in_counts = [t.numel() for t in input_tensor_list]
    out_counts = [t.numel() for t in output_tensor_list]
    res = _fn.all_to_all_single(flat, out_counts, in_counts, group.group_name)
    return _finish(CapturedWork(res, list(output_tensor_list), sizes=out_counts), async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """List form, equal or unequal sizes: one ``torchair_dist.all_gather`` (decomposed later)."""
    if _outside(group):
        return _skip("all_gather", async_op)
    group = _pg(group)
    res = _td.all_gather(list(tensor_list), tensor, _stable_name(group))
    work = _ListWork(res, list(tensor_list))
    if async_op:
        return work
    work.wait()
    return None


class _ListWork:
    """Async list all-gather: the results are copied into the list at ``wait()``."""

    def __init__(self, results, outputs):
        self.results = results
        self.outputs = outputs

    def wait(self, timeout=None):
        for out, got in zip(self.outputs, self.results):
            out.copy_(got)
        return True


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    if _outside(group):
        return _skip("broadcast", async_op)
    group = _pg(group)
    ranks = _ranks(group)
    if group_src is not None:
        root = _constant_int(group_src, list(range(len(ranks))))
    else:
        root = ranks.index(_constant_int(src, _ranks(dist.group.WORLD)))
    res = _fn.broadcast(tensor.contiguous(), root, group.group_name)
    return _finish(CapturedWork(res, [tensor]), async_op)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    if _outside(group):
        return _skip("isend", True)
    group = _pg(group)
    token = _td.send(tensor, _global_peer(group, dst, group_dst), tag, _stable_name(group))
    return CapturedWork(None, [], token=token)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    if _outside(group):
        return _skip("irecv", True)
    group = _pg(group)
    res = _td.recv(tensor, _global_peer(group, src, group_src), tag, _stable_name(group))
    return CapturedWork(res, [tensor])


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    if _outside(group):
        return _skip("send", False)
    isend(tensor, dst, group, tag, group_dst).wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    if _outside(group):
        return _skip("recv", False, -1)
    irecv(tensor, src, group, tag, group_src).wait()
    group = _pg(group)
    return _global_peer(group, src, group_src)


def batch_isend_irecv(p2p_op_list):
    works = []
    for p in p2p_op_list:
        is_send = p.op.__name__ in ("isend", "send")
        issue = isend if is_send else irecv
        works.append(issue(p.tensor, p.peer, p.group, p.tag, p.group_peer))
    return works


# ----------------------------------------------------- rooted collectives (over the above)
def reduce(tensor, dst=None, op=None, group=None, async_op=False, group_dst=None):
    """An all_reduce whose result only the destination keeps (others' tensors stay unchanged)."""
    if _outside(group):
        return _skip("reduce", async_op)
    group = _pg(group)
    root = _global_peer(group, dst, group_dst)
    name = _reduce_op(op)
    scale = None
    if name == "avg":
        name, scale = "sum", len(_ranks(group))
    res = _fn.all_reduce(tensor.contiguous(), name, group.group_name)
    outputs = [tensor] if dist.get_rank() == root else []
    return _finish(CapturedWork(res, outputs, scale=scale), async_op)


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """A list all_gather whose result only the destination keeps."""
    if _outside(group):
        return _skip("gather", async_op)
    group = _pg(group)
    root = _global_peer(group, dst, group_dst)
    world = len(_ranks(group))
    like = list(gather_list) if dist.get_rank() == root else [tensor] * world
    res = _td.all_gather(like, tensor, _stable_name(group))
    work = _ListWork(res, like if dist.get_rank() == root else [])
    return _finish(work, async_op)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """One all_to_all_single in which only the source sends (piece i to group rank i)."""
    if _outside(group):
        return _skip("scatter", async_op)
    group = _pg(group)
    ranks = _ranks(group)
    root = _global_peer(group, src, group_src)
    n = tensor.numel()
    out_counts = [n if r == root else 0 for r in ranks]
    if dist.get_rank() == root:
        flat = torch.cat([t.reshape(-1) for t in scatter_list])
        in_counts = [t.numel() for t in scatter_list]
    else:
        flat = tensor.new_empty((0,))
        in_counts = [0 for _ in ranks]
    res = _fn.all_to_all_single(flat, out_counts, in_counts, group.group_name)
    return _finish(CapturedWork(res, [tensor]), async_op)


def reduce_scatter(output, input_list, op=None, group=None, async_op=False):
    """The list form: the flattened pieces concatenated, then one reduce_scatter_tensor."""
    if _outside(group):
        return _skip("reduce_scatter", async_op)
    flat = torch.cat([t.reshape(-1) for t in input_list])
    return reduce_scatter_tensor(output, flat, op, group, async_op)


# The ONE remap table: torch.distributed API -> traceable replacement (same signature).
REMAPS: Dict[object, object] = {
    dist.all_reduce: all_reduce,
    dist.all_gather_into_tensor: all_gather_into_tensor,
    c10d._all_gather_base: _all_gather_base,
    dist.reduce_scatter_tensor: reduce_scatter_tensor,
    c10d._reduce_scatter_base: _reduce_scatter_base,
    dist.all_to_all_single: all_to_all_single,
    dist.all_to_all: all_to_all,
    dist.all_gather: all_gather,
    dist.broadcast: broadcast,
    dist.send: send,
    dist.recv: recv,
    dist.isend: isend,
    dist.irecv: irecv,
    dist.batch_isend_irecv: batch_isend_irecv,
    dist.reduce: reduce,
    dist.gather: gather,
    dist.scatter: scatter,
    dist.reduce_scatter: reduce_scatter,
    dist.barrier: barrier,
}

_installed: Optional[set] = None


def install() -> None:
    """Register every remap with Dynamo. Idempotent (a second call does nothing)."""
    global _installed
    if _installed is not None:
        return
    from .failures import install_trace_hook

    install_trace_hook()  # ranks fail together: a rank's trace failure reaches its peers
    from torch._dynamo.decorators import substitute_in_graph
    from torch._dynamo.trace_rules import is_polyfilled_callable

    _installed = set()
    for api, replacement in REMAPS.items():
        if is_polyfilled_callable(api):  # another copy of this module registered it already
            continue
        substitute_in_graph(api, skip_signature_check=True)(replacement)
        _installed.add(api)


def installed() -> bool:
    return _installed is not None
