"""The one order model: what a device really orders, over a graph's streams.

What it computes: for every operation of a program (an FX graph's nodes, or the ops a capture
recorded), the stream it is issued on and the operations that must complete before it starts
(its predecessors, :attr:`Timeline.preds`), summarised as a vector clock (one counter per
stream, :attr:`Timeline.clocks`), so that "does ``a`` happen before ``b`` on the device" is one
comparison (:meth:`Timeline.ordered`). The orderings it knows are the only ones a device has:

* program order within one stream (the stream entered by the innermost ``stream_enter``;
  ``""`` = the stream current when the graph began);
* ``event_record(e, s)`` -> every later ``event_wait(e, t)`` / ``wait_tensor(.., e)`` (the wait
  waits for the latest record of ``e`` issued before it; a wait on an event not yet recorded
  in the graph orders nothing);
* ``stream_wait_stream(w, o)``: what ``o`` issued so far -> what ``w`` issues next;
* ``fork(tags)``: the current stream so far -> each forked stream's next work;
  ``join(tags)``: each joined stream so far -> the current stream's next work;
* ``synchronize(s)``: the host waits for stream ``s``'s work so far (``""``: every stream's), so
  that work precedes everything issued after it, on every stream (also streams first used
  later);
* a collective and the ``wait_tensor`` / ``wait`` that finishes it: the wait's stream continues
  after the collective completes (``work.wait()`` makes the current stream wait for it).

A data edge (a value produced on one stream and read on another) is *not* an ordering: on a
device the reader may run before the writer. :class:`GraphOrder` places an FX graph's nodes
(``getitem`` and views only describe memory: a read of one is a read of the node whose device
work produced it) and lists its cross-stream data reads with whether the graph orders each.

Users: the ``stream_order`` stage (``passes/stream_ordering.py``: an event only where nothing
orders a read), the happens-before check (``passes/happens_before.py``),
``debug.deadlock_check`` (``passes/deadlock_check.py``) and the CPU model of concurrency
(``cpu/concurrency.py``, which schedules a replay by :attr:`Timeline.preds`).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set

import torch
import torch.fx

from ..base.util import namespace_and_name
from ..collectives import spec
from .stream_ops import NAMESPACE

MAIN = ""
Clock = Dict[str, int]


def stream_op_name(target) -> Optional[str]:
    """The op name of a ``torchair_dist_streams`` op overload/packet, else None."""
    ns, name = namespace_and_name(target)
    return name if ns == NAMESPACE else None


def _merge(into: Clock, other: Clock) -> None:
    for s, n in other.items():
        if into.get(s, 0) < n:
            into[s] = n


class Timeline:
    """Operations in program order, each on a stream, with the device's happens-before."""

    def __init__(self) -> None:
        self.stack: List[str] = []
        self.streams: List[str] = []          # item -> its stream
        self.preds: List[Set[int]] = []       # item -> the items that must complete before it
        self.clocks: List[Clock] = []         # item -> its vector clock
        self.recorded_on: Dict[int, List[str]] = {}  # item -> streams a record_stream names
        self._last: Dict[str, int] = {}       # stream -> its latest item
        self._pending: Dict[str, Set[int]] = {}  # stream -> items its next item must follow
        self._clock: Dict[str, Clock] = {}    # stream -> what its next item has seen
        self._events: Dict[str, int] = {}     # event tag -> its latest record item
        self._host: Optional[int] = None      # the latest synchronize: every stream follows it

    def current(self) -> str:
        return self.stack[-1] if self.stack else MAIN

    def _stream(self, tag: str) -> str:
        return tag or self.current()

    def _running(self, stream: str) -> Clock:
        clock = self._clock.get(stream)
        if clock is None:  # a stream's first work follows the latest host synchronize
            clock = self._clock[stream] = {}
            if self._host is not None:
                self._wait(stream, self._host)
        return clock

    def _wait(self, stream: str, item: Optional[int]) -> None:
        """``stream``'s next work follows ``item`` (and everything before it)."""
        if item is None:
            return
        self._pending.setdefault(stream, set()).add(item)
        _merge(self._running(stream), self.clocks[item])

    def _put(self, stream: str, after: Iterable[int] = ()) -> int:
        """A new item on ``stream`` after its program-order predecessor, its pending waits and
        ``after``."""
        for p in after:
            self._wait(stream, p)
        clock = self._running(stream)
        i = len(self.streams)
        preds = self._pending.pop(stream, set())
        if stream in self._last:
            preds.add(self._last[stream])
        clock[stream] = clock.get(stream, 0) + 1
        self.streams.append(stream)
        self.preds.append(preds)
        self.clocks.append(dict(clock))
        self._last[stream] = i
        return i

    def add(self, target, args: Sequence = (), after: Iterable[int] = ()) -> int:
        """Place one operation (``target`` with its positional ``args``; ``after``: items it
        also follows, e.g. the collective a wait finishes); returns its item."""
        name = stream_op_name(target)
        if name == "stream_enter":
            self.stack.append(args[0])
        elif name == "stream_exit":
            i = self._put(self.current(), after)
            if self.stack:
                self.stack.pop()
            return i
        elif name == "fork":
            i = self._put(self.current(), after)
            for tag in args[0]:
                self._wait(tag, i)
            return i
        elif name == "join":
            after = list(after) + [self._last[t] for t in args[0] if t in self._last]
        elif name == "event_record":
            i = self._put(self._stream(args[1]), after)
            self._events[args[0]] = i
            return i
        elif name in ("event_wait", "wait_tensor"):
            event, stream = (args[0], args[1]) if name == "event_wait" else \
                (args[2] if len(args) > 2 else "", "")
            rec = self._events.get(event) if event else None
            return self._put(self._stream(stream), list(after) + ([rec] if rec is not None
                                                                  else []))
        elif name == "stream_wait_stream":
            waited = self._last.get(self._stream(args[1]))
            after = list(after) + ([waited] if waited is not None else [])
            return self._put(self._stream(args[0]), after)
        elif name == "synchronize":
            return self._synchronize(args[0] if args else "", after)
        elif name == "record_stream":
            i = self._put(self.current(), after)
            self.recorded_on.setdefault(i, []).append(self._stream(args[1]))
            return i
        return self._put(self.current(), after)

    def _synchronize(self, tag: str, after: Iterable[int]) -> int:
        if tag:  # the host waits for one stream: an item on that stream stands for its work
            i = self._put(tag, after)
        else:    # the whole device: an item after every stream's latest work
            i = self._put(self.current(), list(after) + list(self._last.values()))
        self._host = i
        for s in set(self._last) | set(self._clock):
            if s != self.streams[i]:
                self._wait(s, i)
        return i

    def order_before(self, producer: int, item: int) -> None:
        """Add ``producer`` -> ``item`` (an event recorded right after ``producer``, waited
        right before ``item``); ``item`` must be the latest item placed so far."""
        if item != len(self.streams) - 1:
            raise ValueError("order_before: only the latest item can get a new ordering")
        self.preds[item].add(producer)
        _merge(self.clocks[item], self.clocks[producer])
        _merge(self._running(self.streams[item]), self.clocks[producer])

    def ordered(self, producer: int, consumer: int) -> bool:
        """Whether ``producer`` happens before ``consumer`` on the device."""
        s = self.streams[producer]
        return self.clocks[consumer].get(s, 0) >= self.clocks[producer][s]

    def uses_side_streams(self) -> bool:
        return any(s != MAIN for s in self.streams)


# -- an FX graph --------------------------------------------------------------------------------
def _is_alias(node: torch.fx.Node) -> bool:
    t = node.target
    return node.op == "call_function" and (
        t is operator.getitem or (isinstance(t, torch._ops.OpOverload) and t.is_view))


def source(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose device work produced ``node``'s data: through getitem and views."""
    while _is_alias(node):
        first = node.args[0] if node.args else None
        if not isinstance(first, torch.fx.Node):
            break
        node = first
    return node


def carries_tensor(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value holds device data (a tensor, or a sequence with one; an
    unknown value of an op counts, to be safe)."""
    val = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(val, torch.Tensor):
        return True
    if isinstance(val, (tuple, list)):
        return any(isinstance(v, torch.Tensor) for v in val)
    return val is None and node.op == "call_function"


def _comm(node: torch.fx.Node):
    """(is a collective/p2p issue op, is its wait) of a node."""
    ns, name = namespace_and_name(node.target)
    if ns not in spec.COMM_NAMESPACES:
        return False, False
    return name not in spec.WAIT_NAMES, name in spec.WAIT_NAMES


@dataclasses.dataclass(frozen=True)
class CrossRead:
    """A value made on one stream and read on another: ``producer`` (the node whose device
    work made it), ``value`` (the node the reader names: the producer, a getitem or a view),
    ``reader`` and their streams; ``ordered``: whether the graph orders the read."""
    producer: torch.fx.Node
    value: torch.fx.Node
    reader: torch.fx.Node
    producer_stream: str
    reader_stream: str
    ordered: bool


OnRead = Callable[["GraphOrder", torch.fx.Node, List[torch.fx.Node]], None]


class GraphOrder:
    """The :class:`Timeline` of an FX graph's nodes, in program order.

    Inputs and constants are no items (the graph's ``fork`` orders them before the side
    streams); getitem and views are none either (:func:`source`); the output reads on the
    graph's stream. ``on_read(order, reader, unordered_producers)`` is called right after each
    reader with producers it does not see ordered, where it may add orderings
    (:meth:`order_before`) that the rest of the walk sees."""

    def __init__(self, graph: torch.fx.Graph, on_read: Optional[OnRead] = None) -> None:
        self.timeline = Timeline()
        self.items: Dict[torch.fx.Node, int] = {}
        self.cross_reads: List[CrossRead] = []
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr") or _is_alias(node):
                continue
            self._place(node, on_read)

    def _place(self, node: torch.fx.Node, on_read: Optional[OnRead]) -> None:
        tl = self.timeline
        if node.op == "output":
            self.items[node] = tl.add(None)
        elif node.op != "call_function":
            self.items[node] = tl.add(None)
            return
        else:
            after = []
            if _comm(node)[1]:  # a wait follows the collectives it finishes
                after = [self.items[s] for s in map(source, node.all_input_nodes)
                         if s in self.items and _comm(s)[0]]
            self.items[node] = tl.add(node.target, node.args, after)
            if stream_op_name(node.target) is not None:
                return  # a stream op's tensors are ordering tokens (wait_tensor's dependency,
                #         a record_stream's tensor), not data it reads: it IS the ordering
        i = self.items[node]
        unordered: List[torch.fx.Node] = []
        for value in node.all_input_nodes:
            p = source(value)
            if p not in self.items or not carries_tensor(value) \
                    or tl.streams[self.items[p]] == tl.streams[i]:
                continue
            ordered = tl.ordered(self.items[p], i)
            self.cross_reads.append(CrossRead(p, value, node, tl.streams[self.items[p]],
                                              tl.streams[i], ordered))
            if not ordered and p not in unordered:
                unordered.append(p)
        if unordered and on_read is not None:
            on_read(self, node, unordered)

    def stream(self, node: torch.fx.Node) -> Optional[str]:
        """The stream ``node``'s work runs on (an alias: its source's); None for inputs."""
        i = self.items.get(source(node))
        return None if i is None else self.timeline.streams[i]

    def ordered(self, producer: torch.fx.Node, consumer: torch.fx.Node) -> bool:
        """Whether ``producer``'s work happens before ``consumer``'s on the device."""
        return self.timeline.ordered(self.items[source(producer)], self.items[source(consumer)])

    def order_before(self, producer: torch.fx.Node, reader: torch.fx.Node) -> None:
        """Add the ordering an event recorded right after ``producer`` and waited right before
        ``reader`` gives (only from ``on_read``, for its reader)."""
        self.timeline.order_before(self.items[producer], self.items[reader])

    def uses_side_streams(self) -> bool:
        return self.timeline.uses_side_streams()
