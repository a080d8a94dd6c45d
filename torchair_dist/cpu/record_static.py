"""Fixed addresses for a record's intermediates, as a device graph has them (:mod:`.record`).

A device graph replays kernels whose every buffer was placed at capture: an intermediate has
the same address on every replay, and a view costs nothing at replay (it is an address and a
shape the kernels were captured with). The record stand-in models that here:

* an op that makes a new tensor, and has an ``out=`` overload with the same arguments, writes
  a buffer placed at capture (:class:`StaticPlan.targets`);
* a view of tensors that are all placed (captured buffers, constants, placed intermediates)
  is made once at capture and not re-issued (:class:`StaticPlan.views`);
* intermediates that no output reads share one arena by their lifetimes, as a device pool
  reuses a freed block within a capture; the arena belongs to the pool the graph's captures
  share (:class:`Arena`), so graphs replayed one after another reuse the same memory;
* an output of the graph is placed in the tensor recorded for it (never in the arena: it
  outlives the replay); other tensors on an output's memory are made at every replay (the
  runner moves a caller's kept output off that memory by re-pointing the output tensors, and
  a tensor made at capture would not follow); the buffers an op outside aten reads or writes
  are placed in their recorded tensors too (a collective may read its input after it returns).

Anything else is re-issued as recorded: the inputs read from the caller, the views of them,
the ops with no ``out=`` form, ops with several results. A graph that changes a tensor's
shape or strides in place (``resize_``, ``set_``, ``transpose_`` ...) is replayed without a
plan: a view made at capture would no longer describe its base.

Two replays in flight at once on one arena would overwrite each other's intermediates (on a
device: two graphs sharing a pool replayed concurrently); the replay function holds the arena's
lock, and a replay that finds it held raises :class:`ArenaBusy` instead of computing a wrong
result.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from ..errors import TorchairDistError
from .concurrency import _tensors

# ops that change a tensor's metadata (shape, strides, storage) in place
_META_MUTATING = {"resize_", "resize_as_", "set_", "as_strided_", "transpose_", "t_",
                  "squeeze_", "unsqueeze_", "swapaxes_", "swapdims_", "detach_",
                  "_resize_output_", "resize_as_sparse_", "sparse_resize_"}
_ALIGN = 64


class ArenaBusy(TorchairDistError):
    """A record replay started while another replay on the same arena was running."""


class Arena:
    """The memory a pool's graphs place their intermediates in (see the module doc):
    ``storage`` is at least the largest plan's bytes; a plan that needs more gets a new, larger
    storage, and the graphs placed in the old one keep it."""

    __slots__ = ("storage", "lock", "__weakref__")

    def __init__(self):
        self.storage: Optional[torch.UntypedStorage] = None
        self.lock = threading.Lock()  # held by the replay running on the arena

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def storage_for(self, nbytes: int) -> torch.UntypedStorage:
        if self.storage is None or self.storage.nbytes() < nbytes:
            self.storage = torch.empty(max(nbytes, 1), dtype=torch.uint8).untyped_storage()
        return self.storage

    def busy_error(self, graph_name: str) -> ArenaBusy:
        return ArenaBusy(
            f"{graph_name}: a replay started while another graph placed in the same memory "
            "arena was replaying (two threads replaying graphs of one pool at once, as two "
            "device graphs sharing a memory pool must not); give each thread its own pool "
            "(aclgraph_config.pool_scope='graph' or one rank per thread)")


@dataclasses.dataclass
class StaticPlan:
    """What a replay of one record places at capture (module doc).

    ``targets``: index of the op in the record -> (its recorded result, the tensor it writes
    through ``out=``); ``views``: index of a view op -> [(its recorded result, the view, made
    once)]; ``offsets``: storage key -> the byte
    offset in the arena of each intermediate placed there; ``arena_bytes``: the arena bytes
    the plan uses (0: none). The targets and views in the arena are the recorded tensors until
    :meth:`bound` remakes them over an arena's storage."""

    targets: Dict[int, Tuple[torch.Tensor, torch.Tensor]]
    views: Dict[int, List[Tuple[torch.Tensor, torch.Tensor]]]
    offsets: Dict[int, int]
    arena_bytes: int

    def bound(self, storage: Optional[torch.UntypedStorage]) -> "StaticPlan":
        """The plan with its arena tensors remade over ``storage`` (at least
        ``arena_bytes``)."""
        if not self.offsets:
            return self

        @torch.inference_mode(False)  # normal tensors: a replay may run in or out of it
        def remade(t: torch.Tensor) -> torch.Tensor:
            base = self.offsets.get(_storage_key(t))
            if base is None:
                return t
            return torch.empty(0, dtype=t.dtype).set_(
                storage, base // t.element_size() + t.storage_offset(), t.size(), t.stride())

        return StaticPlan({k: (t, remade(t)) for k, (t, _) in self.targets.items()},
                          {k: [(t, remade(t)) for t, _ in pairs]
                           for k, pairs in self.views.items()}, {}, self.arena_bytes)


def _storage_key(t: torch.Tensor) -> Optional[int]:
    if t.layout != torch.strided or t.is_quantized or t.is_nested:
        return None
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    if storage.nbytes() == 0:
        return None
    return storage.data_ptr()


def _plain(t: Any) -> bool:
    return (type(t) is torch.Tensor and t.layout == torch.strided and not t.is_quantized
            and not t.is_nested and t.device.type == "cpu" and t.numel() > 0)


def _returns_alias(func) -> Optional[bool]:
    """True: a view op (its result aliases an argument, not written); False: a writing op
    (in place or ``out=``); None: a functional op (or not an OpOverload)."""
    if not isinstance(func, torch._ops.OpOverload):
        return None
    infos = [r.alias_info for r in func._schema.returns if r.alias_info is not None]
    if not infos:
        return None
    return not any(info.is_write for info in infos)


def plan(entries: Sequence[tuple], inputs: Sequence[Any], outputs: Sequence[Any],
         fed: Optional[Sequence[int]], out_overload) -> Optional[StaticPlan]:
    """The plan for a record (``entries``: (op, args, kwargs, result)); None when nothing is
    placed or the graph changes a tensor's metadata in place. ``fed``: the input positions
    read from the caller (None: all); ``out_overload(op, result)``: the ``out=`` form of
    ``op`` or None."""
    for func, *_ in entries:
        schema = getattr(func, "_schema", None)
        if schema is not None and schema.name.split("::")[-1] in _META_MUTATING:
            return None
    fed_set = None if fed is None else set(fed)
    dynamic: Set[int] = set()  # ids of tensors a replay makes anew or reads from the caller
    inputs_at: Set[int] = set()
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            key = _storage_key(x)
            if key is not None:
                inputs_at.add(key)
            if fed_set is None or i in fed_set:
                dynamic.add(id(x))
    # what the graph returns: only the output tensors themselves are placed on their
    # storages (a caller's kept output is moved off them by re-pointing exactly those: the
    # runner's preserve, which another tensor on that storage would not follow)
    returned = {id(t) for t in _tensors(list(outputs))}
    returned_at = {_storage_key(t) for t in _tensors(list(outputs))} - {None}
    placed: Dict[int, int] = {}  # storage key -> entry index of the op that writes it
    targets: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
    view_of: Dict[int, List[torch.Tensor]] = {}
    kept: Set[int] = set()  # storages an op outside aten touches
    born: Set[int] = set()  # storages a (non-view) op made
    for k, (func, args, kwargs, out) in enumerate(entries):
        given = _tensors(list(args)) + _tensors(kwargs)
        results = _tensors(out)
        is_aten = isinstance(func, torch._ops.OpOverload) and func.namespace == "aten"
        if not is_aten:
            kept.update(_storage_key(t) for t in given + results)
        kind = _returns_alias(func)
        given_at = {_storage_key(t) for t in given} - {None}
        if kind is True or (kind is None and results and all(
                _storage_key(t) in given_at for t in results)):
            # a view (or a functional op whose result aliases an argument: _unsafe_view)
            if is_aten and all(id(t) not in dynamic for t in given) and all(
                    _plain(t) and (_storage_key(t) not in returned_at or id(t) in returned)
                    for t in results):
                view_of[k] = results
            else:
                dynamic.update(id(t) for t in results)
            continue
        if kind is False:  # writes an argument: its result is that argument
            dynamic.update(id(t) for t in results if not any(g is t for g in given))
            continue
        key = _storage_key(out) if isinstance(out, torch.Tensor) else None
        if (is_aten and key is not None and _plain(out) and key not in born
                and key not in inputs_at and key not in given_at and out._base is None
                and (key not in returned_at or id(out) in returned)
                and out_overload(func, out) is not None):
            targets[k] = (out, out)
            placed[key] = k
        else:
            dynamic.update(id(t) for t in results)
        born.update(_storage_key(t) for t in results)
    # a view is placed where its storage is: a placed one, a constant's or a buffer's
    views = {k: [(t, t) for t in ts] for k, ts in view_of.items()
             if all(_storage_key(t) in placed or _storage_key(t) not in born for t in ts)}
    kept.update(returned_at)
    arena = {key: k for key, k in placed.items() if key not in kept}
    if not targets and not views:
        return None
    offsets, nbytes = _offsets(entries, targets, arena)
    return StaticPlan(targets, views, offsets, nbytes)


def _offsets(entries, targets, arena: Dict[int, int]):
    """Byte offsets in the arena for the storages ``arena`` (key -> the op that writes it):
    each block is free after its storage's last reader, first fit; and the bytes used."""
    last: Dict[int, int] = {}
    for k, (_, args, kwargs, out) in enumerate(entries):
        for t in _tensors(list(args)) + _tensors(kwargs) + _tensors(out):
            key = _storage_key(t)
            if key in arena:
                last[key] = k
    sizes = {_storage_key(t): t.untyped_storage().nbytes() for t, _ in targets.values()
             if _storage_key(t) in arena}
    offsets: Dict[int, int] = {}
    live: List[tuple] = []  # (offset, end, last use)
    used = 0
    for key in sorted(sizes, key=lambda s: arena[s]):
        born, need = arena[key], -(-sizes[key] // _ALIGN) * _ALIGN
        live = sorted(block for block in live if block[2] >= born)
        at = 0
        for start, stop, _ in live:
            if start - at >= need:
                break
            at = max(at, stop)
        offsets[key] = at
        live.append((at, at + need, last.get(key, born)))
        used = max(used, at + need)
    return offsets, used
