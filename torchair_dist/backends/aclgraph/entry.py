"""One capture of a graph key (:class:`CaptureEntry`) and its replay: the runner's hot path.

A replay, in order: each storage of pool outputs it is about to write that a caller still holds
(its use count above the graph's own references) is moved onto a copy first (:mod:`.outputs`);
the graph replays from the caller's inputs (the graph feeds them into its captured buffers as
its :class:`~torchair_dist.platform.interfaces.InputFeed` says); the replay is counted (the
capture report's cell) and logged at DEBUG; the captured outputs are handed out as fresh
tensor objects over the graph's memory.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...platform.interfaces import CaptureGraph, InputFeed
from .outputs import PoolOutputs, keep, use_count

log = logging.getLogger("torchair_dist")
_DEBUG = logging.DEBUG
# the logger's own cache of isEnabledFor answers (cleared on every level change): a lookup
# answers most calls without the method call
_LEVELS = getattr(log, "_cache", {})


@dataclasses.dataclass(eq=False, slots=True)
class CaptureEntry:
    """A capture: the graph, how its inputs are fed, its outputs and what its replay checks.

    ``output_alias``: per output, whether it aliases an input (handed out as it is);
    ``pool_positions``: the outputs in the graph's pool (handed out as fresh objects);
    ``pinned``: {position: address} of the mutated inputs used in place; ``params``: (weak
    reference, address) of the parameters it reads in place; ``watch``: the pool outputs its
    replay may overwrite (its own and, in a shared pool, later captures'), updated in place by
    the pool; ``replays``: the capture report's counter."""

    key: Any
    name: str
    graph: CaptureGraph
    feed: InputFeed
    outputs: Sequence[Any]
    output_alias: Tuple[bool, ...]
    pool_positions: Tuple[int, ...]
    pinned: Dict[int, int]
    params: tuple = ()
    replays: List[int] = dataclasses.field(default_factory=lambda: [0])
    seconds: float = 0.0
    bytes: Optional[int] = None
    held: list = dataclasses.field(default_factory=list)
    watch: list = dataclasses.field(default_factory=list)
    pool: Optional[PoolOutputs] = None
    graph_name: str = ""

    def replay(self, args: Sequence[Any]) -> List[Any]:
        """Replay for ``args`` and hand out the outputs (module doc)."""
        for held in self.watch:
            if use_count(held.ptr) > held.base:
                keep(held)
        self.graph.replay(args)
        self.replays[0] += 1
        if _LEVELS.get(_DEBUG) is not False and log.isEnabledFor(_DEBUG):
            log.debug("%s: replay of key %s", self.graph_name, self.name)
        handed = list(self.outputs)  # outputs.hand_out, inlined: fresh objects over the pool
        for i in self.pool_positions:
            handed[i] = handed[i].detach()
        return handed
