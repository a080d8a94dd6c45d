"""The memory of the record stand-in (:mod:`.record`): the pool its graphs share, and the peak
bytes a record's allocations hold (what a device pool would reserve for the capture).

Captures of one runner that share a pool model the worst case of a real pool: a replay
overwrites (poisons) the outputs of the graphs captured after it in the same pool, as a device
graph's intermediates may reuse the blocks those outputs later took."""
from __future__ import annotations

import weakref
from typing import Dict, List


from .concurrency import _tensors, poison


class RecordPool:
    """The memory pool shared by the record graphs (:class:`.record.RecordGraph`) of one
    runner (see the module doc)."""

    def __init__(self):
        self.graphs: List[weakref.ref] = []

    def add(self, graph) -> None:
        self.graphs.append(weakref.ref(graph))

    def clobber_after(self, graph) -> None:
        """Overwrite the pool outputs of the graphs captured after ``graph``."""
        if self.graphs and self.graphs[-1]() is graph:
            return  # the latest capture: none after it
        live = [g() for g in self.graphs]
        live = [g for g in live if g is not None]
        if graph not in live:
            return
        for later in live[live.index(graph) + 1:]:
            for out in later.pool_outputs:
                poison(out)


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
