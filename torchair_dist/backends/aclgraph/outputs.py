"""A replay's outputs: handed out without copies, valid until their memory is really reused.

A captured graph writes its outputs into memory of its pool. The runner hands out fresh tensor
objects over that memory on each replay (no copy). An output stays valid until a replay is
about to write its memory; then, if the caller still holds it (any view, alias or storage of
it), its values are *preserved*: the storage the caller holds is moved onto a copy of its
bytes (one copy, at storage level: every view the caller made follows), and the graph keeps
writing the memory it was captured on. A caller that dropped its outputs before the next call
(a serving loop) costs nothing: no copy is made. Each preserving copy is counted in
``capture_summary()`` (``output_copies``, ``output_copy_bytes``).

Which memory a replay writes (the pool model, :class:`PoolOutputs`): its own outputs, and in a
pool shared by several captures the outputs of the captures made *after* it (their outputs may
sit in blocks its intermediates use; the CPU record stand-in overwrites them, as a device pool
may). A capture never writes memory another output holds (a device capture runs nothing; the
record stand-in allocates afresh), so an output kept across another key's capture, or across a
forced recapture (the old graph is dropped, the memory the caller holds is not reused while
held), stays valid without a copy.

"Still held" is read from the storage's use count (:func:`torch._C._storage_Use_Count`): the
graph's own tensors account for a fixed number of references, measured right after the capture;
anything above it is the caller's. Memory handed out raw is not tracked: an array from
``.numpy()``, a ``data_ptr()`` or a DLPack capsule read the pool memory itself and see the next
replay's values (their tensor is preserved, they are not): ``.clone()`` before exporting.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, List, Optional, Sequence

import torch

from ...base.layout import clone_keeping_views
from ...errors import TorchairDistError
from ...platform import for_device
from . import report

use_count = torch._C._storage_Use_Count
# Moving a storage onto a copy needs UntypedStorage._swap_data_ptr_ (torch 2.13 has it, 2.11
# has not). Without it the CPU record stand-in, whose graph writes through its own tensor
# objects, moves the graph onto fresh memory instead (the caller keeps the old, untouched);
# a device graph writes fixed addresses, so a device runner copies every output on every call
# (NO_PRESERVE_MESSAGE).
CAN_PRESERVE = hasattr(torch.UntypedStorage, "_swap_data_ptr_")
NO_PRESERVE_MESSAGE = (
    f"torch {torch.__version__} cannot move a kept output's storage onto a copy "
    "(UntypedStorage._swap_data_ptr_, in torch 2.13 and later): on this device npugraph_ex / "
    "reduce-overhead copy every output on every call instead (as "
    "debug.aclgraph.enable_output_clone=True does), so outputs kept across calls stay right; "
    "upgrade torch to hand them out without copies")


class StaleOutputError(TorchairDistError, RuntimeError):
    """Kept for callers that catch it: outputs are now preserved instead (see the module doc);
    nothing in the runtime raises it."""


class Held:
    """One storage of a capture's pool outputs: its StorageImpl (``ptr``), the references the
    graph itself holds on it (``base``), the graph's tensors on it."""

    __slots__ = ("ptr", "base", "tensors", "graph")

    def __init__(self, graph: str, tensors: List[torch.Tensor]):
        self.graph = graph
        self.tensors = tensors
        self.ptr = tensors[0].untyped_storage()._cdata
        # the graph's tensors, and the storage's Python object: once made it is kept with
        # the storage and counts for good (a caller's untyped_storage() returns that one)
        self.base = use_count(self.ptr)


def capture_outputs(graph: str, outputs: Sequence[Any], positions: Sequence[int]) -> List[Held]:
    """The :class:`Held` storages of a capture's pool outputs (measured right after capture,
    before anything is handed out)."""
    by_storage: Dict[int, List[torch.Tensor]] = {}
    for i in positions:
        by_storage.setdefault(outputs[i].untyped_storage()._cdata, []).append(outputs[i])
    return [Held(graph, tensors) for tensors in by_storage.values()]


def keep(held: Held) -> None:
    """The caller still holds ``held``'s storage and a replay is about to write it: move the
    caller's storage onto a copy of its bytes, and the graph's tensors onto the memory."""
    caller = held.tensors[0].untyped_storage()
    fresh = torch.empty(caller.nbytes(), dtype=torch.uint8,
                        device=caller.device).untyped_storage()
    if CAN_PRESERVE:
        fresh.copy_(caller)
        caller._swap_data_ptr_(fresh)  # caller: the copy; fresh: the graph's memory
    # else (the CPU stand-in on an older torch): the caller keeps the memory, the graph's
    # tensors move onto the fresh storage, which the replay writes
    for t in held.tensors:
        with torch.inference_mode(t.is_inference()), torch.no_grad():
            t.set_(fresh, t.storage_offset(), t.size(), t.stride())
    held.ptr = fresh._cdata
    held.base = use_count(held.ptr)  # a storage's Python object, once made, counts for good
    report.output_copy(held.graph, caller.nbytes())


def hand_out(outputs: Sequence[Any], positions: Sequence[int]) -> List[Any]:
    """The outputs for the caller: fresh tensor objects over the pool outputs at ``positions``
    (their references are what tells a caller's hold apart from the graph's)."""
    result = list(outputs)
    for i in positions:
        result[i] = result[i].detach()
    return result


class PoolOutputs:
    """The captures of one memory pool, in capture order, and per capture what its replay must
    check first: its own outputs and those of the captures made after it (``watch``, a list
    the replay reads, updated in place)."""

    def __init__(self):
        self.order: List[tuple] = []  # (own Held list, watch list)

    def add(self, own: List[Held]) -> List[Held]:
        """A new capture's outputs; returns its watch list."""
        for _, watch in self.order:
            watch.extend(own)
        watch = list(own)
        self.order.append((own, watch))
        return watch

    def remove(self, own: List[Held]) -> None:
        """A capture dropped (recaptured): its outputs leave every watch list (memory the caller
        still holds stays theirs: nothing reuses it while held)."""
        gone = {id(h) for h in own}
        self.order = [entry for entry in self.order if entry[0] is not own]
        for _, watch in self.order:
            watch[:] = [h for h in watch if id(h) not in gone]


class _PoolShare:
    """One graph's part of a :class:`PoolOutputs` that several graphs' factories share
    (``aclgraph_config.pool_scope="device"``, a user's pool): it passes each capture on to the
    pool and remembers it, so the graph's captures leave every other graph's watch list when its
    factory is dropped (with its runner) and the pool keeps none of its memory alive."""

    __slots__ = ("pool", "owned")

    def __init__(self, pool: PoolOutputs):
        self.pool = pool
        self.owned: List[List[Held]] = []

    def add(self, own: List[Held]) -> List[Held]:
        self.owned.append(own)
        return self.pool.add(own)

    def remove(self, own: List[Held]) -> None:
        self.owned[:] = [o for o in self.owned if o is not own]
        self.pool.remove(own)


def _leave(pool: PoolOutputs, owned: List[List[Held]]) -> None:
    for own in owned:
        pool.remove(own)
    owned.clear()


def pool_outputs_of(factory):
    """The :class:`PoolOutputs` of the pool ``factory``'s graphs share, kept by the pool
    object itself (``factory.pool``: the stand-in's RecordPool, a device graph's shared pool;
    else the factory's own). A pool joined by other factories is answered with this factory's
    part of it (:class:`_PoolShare`), left when the factory is collected."""
    pool = factory.pool
    owner = pool if hasattr(pool, "__dict__") else factory
    found = owner.__dict__.get("_pool_outputs")
    if found is None:
        found = owner.__dict__["_pool_outputs"] = PoolOutputs()
    if owner is factory:
        return found
    share = factory.__dict__.get("_pool_share")
    if share is None or share.pool is not found:
        share = factory.__dict__["_pool_share"] = _PoolShare(found)
        weakref.finalize(factory, _leave, found, share.owned)
    return share


class OutputLifetime:
    """The output policy of one graph (module doc): outputs handed out without copies and
    preserved when a replay is about to reuse memory a caller still holds, or, with
    ``debug.aclgraph.enable_output_clone`` (or a device graph on a torch that cannot move a
    storage, with a warning), a copy of every output on every call (``copies``).

    ``pool``: the :class:`PoolOutputs` of the pool the graph's captures share (None: each
    capture in a pool of its own)."""

    def __init__(self, graph: str, clone_output: bool, examples: Sequence[Any],
                 pool: Optional[PoolOutputs]):
        self.graph = graph
        if not clone_output and not CAN_PRESERVE and any(
                isinstance(x, torch.Tensor) and not for_device(x.device.type).uses_stand_ins
                for x in examples):
            warnings.warn(NO_PRESERVE_MESSAGE, UserWarning, stacklevel=4)
            clone_output = True
        self.copies = clone_output
        self.pool = pool

    def adopt(self, entry) -> None:
        """A new capture ``entry``: its pool outputs are watched by the replays that may
        overwrite them (its own and, in a shared pool, those of earlier captures)."""
        entry.held = capture_outputs(self.graph, entry.outputs, entry.pool_positions)
        entry.pool = self.pool if self.pool is not None else PoolOutputs()
        entry.watch = entry.pool.add(entry.held)

    def drop(self, entry) -> None:
        """``entry`` is dropped (recaptured or released): memory a caller holds stays theirs."""
        if entry.pool is not None:
            entry.pool.remove(entry.held)

    def returned(self, entry, outputs: Sequence[Any]) -> List[Any]:
        """What a call that ran ``entry`` (captured or replayed it) returns."""
        if self.copies:
            return clone_keeping_views(outputs, entry.output_alias)
        return hand_out(outputs, entry.pool_positions)
