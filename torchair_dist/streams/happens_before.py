"""Happens-before over streams: what a device really orders, as a graph analysis.

A :class:`Timeline` takes a program's operations in program order (the FX graph's nodes, or the
ops a capture recorded) and places each on a stream: the stream entered by the innermost
``stream_enter`` ("" = the stream current when the graph began). It keeps the only orderings a
device has:

* program order within one stream;
* ``event_record(e, s)`` -> every later ``event_wait(e, t)`` (and ``wait_tensor(.., e)``);
* ``stream_wait_stream(w, o)``: what ``o`` issued so far -> what ``w`` issues next;
* ``fork(tags)``: the current stream so far -> each forked stream's next work;
* ``join(tags)``: each joined stream so far -> the current stream's next work;
* ``synchronize``: the host waits, so everything issued so far precedes everything after.

A data edge (a value produced on one stream and read on another) is *not* an ordering: on a
device the reader may run before the writer. Each operation gets the predecessors a scheduler
must respect (:attr:`Timeline.preds`) and a vector clock (one counter per stream), so whether a
producer happens before a consumer is one comparison (:meth:`Timeline.ordered`).

:func:`check_graph` reports every cross-stream data edge of an FX graph that no ordering
covers, naming producer and consumer with their source lines; :func:`check_stream_order` is
the pipeline stage (``debug.check_stream_order``, or ``TORCHAIR_DIST_CHECK_STREAM_ORDER=1``)
that raises :class:`~torchair_dist.errors.GraphValidationError` on the first graph with one.
"""
from __future__ import annotations

import operator
from typing import Dict, Iterable, List, Optional, Sequence, Set

import torch
import torch.fx

from ..base.envvars import env_flag
from ..errors import GraphValidationError
from .stream_ops import NAMESPACE

# The code that decides what this module's stages make of a graph: the compile cache's key
# hashes it for every stage that shaped a stored entry (cache/keys.py: library_digest).
GRAPH_SOURCES = (__name__,
                 "torchair_dist.streams.rewrite", "torchair_dist.streams.runtime",
                 "torchair_dist.streams.stream_ops")

CHECK_ENV = "TORCHAIR_DIST_CHECK_STREAM_ORDER"
MAIN = ""


def _name(target) -> Optional[str]:
    """The op name of a ``torchair_dist_streams`` op overload/packet, else None."""
    if isinstance(target, torch._ops.OpOverload) and target.namespace == NAMESPACE:
        return target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        ns, _, name = target._qualified_op_name.partition("::")
        return name if ns == NAMESPACE else None
    return None


class Timeline:
    """Operations in program order, each on a stream, with the device's happens-before."""

    def __init__(self) -> None:
        self.stack: List[str] = []
        self.streams: List[str] = []          # item -> its stream
        self.preds: List[Set[int]] = []       # item -> the items that must complete before it
        self.clocks: List[Dict[str, int]] = []  # item -> its vector clock
        self.recorded_on: Dict[int, List[str]] = {}  # item -> streams a record_stream names
        self._last: Dict[str, int] = {}       # stream -> its latest item
        self._pending: Dict[str, Set[int]] = {}  # stream -> items its next item must follow
        self._clock: Dict[str, Dict[str, int]] = {}
        self._events: Dict[str, tuple] = {}   # event tag -> (record item, its clock)

    # -- helpers --------------------------------------------------------------------------
    def current(self) -> str:
        return self.stack[-1] if self.stack else MAIN

    def _stream(self, tag: str) -> str:
        return tag or self.current()

    def _merge(self, stream: str, clock: Dict[str, int]) -> None:
        mine = self._clock.setdefault(stream, {})
        for s, n in clock.items():
            if mine.get(s, 0) < n:
                mine[s] = n

    def _wait(self, stream: str, item: Optional[int], clock: Optional[Dict[str, int]]) -> None:
        """``stream``'s next work follows ``item`` (and everything its clock covers)."""
        if item is not None:
            self._pending.setdefault(stream, set()).add(item)
        if clock:
            self._merge(stream, clock)

    def _put(self, stream: str, extra: Iterable[int] = ()) -> int:
        """A new item on ``stream`` after its program-order predecessor and pending waits."""
        i = len(self.streams)
        preds = set(self._pending.pop(stream, ())) | set(extra)
        if stream in self._last:
            preds.add(self._last[stream])
        for p in extra:
            self._merge(stream, self.clocks[p])
        clock = self._clock.setdefault(stream, {})
        clock[stream] = clock.get(stream, 0) + 1
        self.streams.append(stream)
        self.preds.append(preds)
        self.clocks.append(dict(clock))
        self._last[stream] = i
        return i

    def last_on(self, stream: str) -> Optional[int]:
        return self._last.get(stream)

    # -- operations -----------------------------------------------------------------------
    def add(self, target, args: Sequence = ()) -> int:
        """Place one operation (``target`` with its positional ``args``); returns its item."""
        name = _name(target)
        if name is None:
            return self._put(self.current())
        if name == "stream_enter":
            self.stack.append(args[0])
            return self._put(self.current())
        if name == "stream_exit":
            i = self._put(self.current())
            if self.stack:
                self.stack.pop()
            return i
        if name == "fork":
            i = self._put(self.current())
            for tag in args[0]:
                self._wait(tag, i, self.clocks[i])
            return i
        if name == "join":
            return self._put(self.current(), [self._last[t] for t in args[0] if t in self._last])
        if name == "event_record":
            i = self._put(self._stream(args[1]))
            self._events[args[0]] = (i, self.clocks[i])
            return i
        if name in ("event_wait", "wait_tensor"):
            event, stream = (args[0], args[1]) if name == "event_wait" else \
                (args[2] if len(args) > 2 else "", "")
            rec = self._events.get(event) if event else None
            return self._put(self._stream(stream), [rec[0]] if rec else [])
        if name == "stream_wait_stream":
            waited = self._last.get(self._stream(args[1]))
            return self._put(self._stream(args[0]), [waited] if waited is not None else [])
        if name == "synchronize":
            streams = [self._stream(args[0])] if args and args[0] else list(self._last)
            i = self._put(self.current(), [self._last[s] for s in streams if s in self._last])
            for s in set(self._last) | set(self._clock):
                self._wait(s, i, self.clocks[i])
            return i
        if name == "record_stream":
            i = self._put(self.current())
            self.recorded_on.setdefault(i, []).append(self._stream(args[1]))
            return i
        return self._put(self.current())

    def add_after(self, stream: str, extra: Iterable[int] = ()) -> int:
        """An item of the model itself (a free) on ``stream``, after ``extra``."""
        return self._put(stream, extra)

    def ordered(self, producer: int, consumer: int) -> bool:
        """Whether ``producer`` happens before ``consumer`` on the device."""
        s = self.streams[producer]
        return self.clocks[consumer].get(s, 0) >= self.clocks[producer][s]

    def uses_side_streams(self) -> bool:
        return any(s != MAIN for s in self.streams)


# -- the FX check ---------------------------------------------------------------------------
def _source(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose device work produced ``node``'s data: through getitem and views (which
    only describe memory)."""
    while node.op == "call_function" and (
            node.target is operator.getitem
            or (isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)):
        first = node.args[0] if node.args else None
        if not isinstance(first, torch.fx.Node):
            break
        node = first
    return node


def _reads(node: torch.fx.Node) -> List[torch.fx.Node]:
    found: List[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def unordered_edges(graph: torch.fx.Graph) -> List[str]:
    """Every cross-stream data edge of ``graph`` that no ordering covers, one line each:
    ``producer (stream, source line) -> consumer (stream, source line)``."""
    from .rewrite import where

    tl = Timeline()
    item: Dict[torch.fx.Node, int] = {}
    found: List[str] = []
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            continue
        is_alias = _source(node) is not node
        i = tl.add(node.target, node.args) if node.op == "call_function" and not is_alias \
            else None
        if node.op == "output":
            i = tl.add(None)
        if i is None:
            continue
        item[node] = i
        if node.op == "call_function" and _name(node.target) is not None:
            continue  # a stream op's tensors are ordering tokens (wait_tensor's dependency, a
            #           record_stream's tensor), not data it reads: it IS the ordering
        for arg in _reads(node):
            src = _source(arg)
            p = item.get(src)
            if p is None or tl.streams[p] == tl.streams[i] or tl.ordered(p, i):
                continue
            found.append(f"{src.name} on stream {tl.streams[p] or 'main'!r} ({where(src)}) -> "
                         f"{node.name} on stream {tl.streams[i] or 'main'!r} ({where(node)})")
    return found if tl.uses_side_streams() else []


def check_graph(gm: torch.fx.GraphModule) -> None:
    """Raise :class:`GraphValidationError` naming every unordered cross-stream data edge."""
    found = unordered_edges(gm.graph)
    if found:
        raise GraphValidationError(
            "a value crosses streams without an ordering (on a device the reader may run "
            "before the writer; record an event after the producer and wait for it before the "
            "reader): " + "; ".join(found))


def check_enabled(value) -> bool:
    """The stage's gate: ``debug.check_stream_order`` or ``TORCHAIR_DIST_CHECK_STREAM_ORDER=1``."""
    return bool(value) or env_flag(CHECK_ENV)


def check_stream_order(gm, example_inputs, config):
    """Requires: the post-pass AOT graph. Guarantees: every cross-stream data edge is ordered
    by the graph's stream ops (else ``GraphValidationError`` naming both nodes); the graph is
    returned unchanged. Runs with ``debug.check_stream_order`` or the variable set."""
    if check_enabled(config.get("debug.check_stream_order")):
        check_graph(gm)
    return gm
