"""The memory of the record stand-in (:mod:`.record`): the pool its graphs share, and the peak
bytes a record's allocations hold (what a device pool would reserve for the capture).

Captures that share a pool (those of one graph, or with ``aclgraph_config.pool_scope="device"``
those of every graph on the device and rank) model the worst case of a real pool: a replay
overwrites (poisons) the outputs of the graphs captured after it in the same pool, as a device
graph's intermediates may reuse the blocks those outputs later took."""
from __future__ import annotations

import weakref
from typing import Dict, List


from .concurrency import _tensors, poison_value
from .record_static import Arena


class RecordPool:
    """The memory pool shared by record graphs (:class:`.record.RecordGraph`), see the module
    doc. ``reserved``: the bytes the pool holds (the largest capture's peak: a device pool
    keeps its blocks and hands them to the next capture)."""

    def __init__(self):
        self.graphs: List[weakref.ref] = []
        self.reserved = 0
        # graphs whose outputs hold a replay's values (not poisoned since): position -> graph
        self._fresh: Dict[int, weakref.ref] = {}
        self._position: Dict[int, int] = {}  # id(graph) -> its capture position
        self._last = -1  # the position of the graph that ran last: none after it is fresh
        self.arena = Arena()  # where its graphs place their intermediates (.record_static)

    def add(self, graph, peak: int) -> int:
        """A new capture; returns the bytes it added to the pool. A pool none of whose graphs
        is alive any more starts afresh: a device frees a private pool's blocks once no graph
        uses it (a pool shared by every graph of a device outlives the graphs Dynamo drops,
        until the next capture joins it)."""
        if self.graphs and all(ref() is None for ref in self.graphs):
            self.graphs.clear()
            self._fresh.clear()
            self._position.clear()
            self.reserved = 0
            self.arena = Arena()
        self._position[id(graph)] = len(self.graphs)
        self._fresh[len(self.graphs)] = weakref.ref(graph)
        self.graphs.append(weakref.ref(graph))
        self._last = len(self.graphs) - 1
        added = max(0, peak - self.reserved)
        self.reserved = max(self.reserved, peak)
        return added

    def replayed(self, graph) -> None:
        """``graph`` replayed: the outputs of the graphs captured after it are overwritten
        (poisoned), once until they replay again; its own now hold its values."""
        at = self._position.get(id(graph))
        if at is None:
            return
        fresh = self._fresh
        if self._last > at:
            for later in [k for k in fresh if k > at]:
                other = fresh.pop(later)()
                if other is not None:
                    for tensor, value in _fills(other):
                        tensor.fill_(value)
        fresh[at] = self.graphs[at]
        self._last = at


def _fills(graph) -> List[tuple]:
    """(tensor, poison value) of each pool output of ``graph`` (:func:`.concurrency.poison`'s
    values), worked out once: a replay round poisons many."""
    fills = graph.__dict__.get("_poison_fills")
    if fills is None:
        fills = graph.__dict__["_poison_fills"] = [
            (t, poison_value(t.dtype)) for t in graph.pool_outputs if t.numel()]
    return fills


def peak_bytes(entries, inputs, outputs) -> int:
    """Peak bytes held by the allocations a record makes (see ``RecordGraph.pool_bytes``)."""
    given = {t.untyped_storage().data_ptr() for t in _tensors(list(inputs))}
    kept = {t.untyped_storage().data_ptr() for t in _tensors(list(outputs))}
    size: Dict[int, int] = {}
    born: Dict[int, int] = {}
    last: Dict[int, int] = {}
    for k, (_, args, kwargs, out) in enumerate(entries):
        for t in _tensors(list(args)) + _tensors(kwargs):
            last[t.untyped_storage().data_ptr()] = k
        for t in _tensors(out):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in given and ptr not in size:
                size[ptr] = t.untyped_storage().nbytes()
                born[ptr] = k
            last[ptr] = max(last.get(ptr, k), k)
    live = peak = 0
    births: Dict[int, int] = {}
    deaths: Dict[int, int] = {}
    for ptr, n in size.items():
        births[born[ptr]] = births.get(born[ptr], 0) + n
        if ptr not in kept:
            deaths[last[ptr]] = deaths.get(last[ptr], 0) + n
    for k in range(len(entries)):
        live += births.get(k, 0)
        peak = max(peak, live)
        live -= deaths.get(k, 0)
    return peak
