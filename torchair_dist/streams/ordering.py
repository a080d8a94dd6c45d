"""Every cross-stream data dependency ordered by an event; stream labels for passes.

The contract (README "Streams: the contract"): a compiled graph computes what the program
computes in program order, whatever streams it names. Stream membership is known from the
``stream_enter`` / ``stream_exit`` scopes in program order (the innermost open scope; outside
every scope the graph's own stream, ``""``). Two pipeline stages use it:

* ``stream_labels`` (right after AOT, before the user's passes, the user patterns and the
  fusion passes): :func:`label_streams` sets ``node.meta["stream_label"]`` = the stream tag on
  every node inside a stream scope (and removes it from the others), as TorchAir's scopes do:
  a ``register_replacement`` ``extra_check`` (vllm-ascend's) reads it to refuse fusing across
  streams; the built-in passes never fuse or reinplace across it (:func:`same_stream`).
* ``stream_order`` (after the last pass that rewrites the graph): :func:`order_streams`
  makes every value produced on stream S and read on stream T != S ordered: an
  ``event_record(ev, S)`` right after the producer and an ``event_wait(ev, T)`` right before
  the first reader on T (one event per (producer, reading stream)); a graph output produced on
  a side stream counts as read on the graph's stream. It protects the memory of each such
  value, and of each graph input read on a side stream, from reuse before that use is ordered:
  ``record_stream(value, T)`` right after the first reader on T (a capture's private pool
  honours it too: a block freed with pending stream uses is not reused before the capture
  ends). The program's own waits, tagged events and ``npu_wait_tensor`` stay: they only add
  ordering.

A graph that uses the user's own ``torch.Stream`` objects (CUDA-style code: the program is
responsible for its ordering) and reads a value on another stream without ordering it itself
is racy on any device: the stage orders it anyway and logs ONE warning per graph naming the
first such read's source line (and how many there are).

Happens-before (:class:`Clocks`): one vector clock per stream over program order; a node on
stream S ticks S; ``event_record`` stores its stream's clock, ``event_wait`` /
``wait_tensor`` merge it, ``stream_wait_stream`` merges the waited-on stream, ``fork``
merges the current stream into each side stream, ``join`` the side streams into the current
one, ``synchronize`` every stream into every stream.
"""
from __future__ import annotations

import itertools
import logging
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx

from . import runtime
from .rewrite import where
from .stream_ops import NAMESPACE, ops

# The code that decides what this module's stages make of a graph: the compile cache's key
# hashes it for every stage that shaped a stored entry (cache/keys.py: library_digest).
GRAPH_SOURCES = (__name__,
                 "torchair_dist.streams.rewrite", "torchair_dist.streams.runtime",
                 "torchair_dist.streams.stream_ops")

log = logging.getLogger("torchair_dist")

LABEL = "stream_label"
_graph_ids = itertools.count()


def _stream_op(node: torch.fx.Node) -> str:
    """The op name of a ``torchair_dist_streams`` node, else ""."""
    t = node.target
    if node.op == "call_function" and isinstance(t, torch._ops.OpOverload) \
            and t.namespace == NAMESPACE:
        return t._schema.name.split("::")[1]
    return ""


def streams_of(graph: torch.fx.Graph) -> Dict[torch.fx.Node, str]:
    """The stream tag every node runs on ("" = the graph's stream): the innermost
    ``stream_enter`` scope open at the node in program order. A scope op itself belongs to the
    stream it is issued on (an enter: the enclosing stream; an exit: the stream it leaves)."""
    stack: List[str] = []
    found: Dict[torch.fx.Node, str] = {}
    for node in graph.nodes:
        name = _stream_op(node)
        found[node] = stack[-1] if stack else ""
        if name == "stream_enter":
            stack.append(node.args[0])
        elif name == "stream_exit" and stack:
            stack.pop()
    return found


def label_streams(gm: torch.fx.GraphModule, example_inputs=None, config=None):
    """Pipeline stage ``stream_labels``: ``node.meta["stream_label"]`` = the stream tag of each
    node inside a stream scope; removed from nodes outside every scope."""
    graph = gm.graph if isinstance(gm, torch.fx.GraphModule) else gm
    for node, stream in streams_of(graph).items():
        if stream and not _stream_op(node) and node.op not in ("placeholder", "output"):
            node.meta[LABEL] = stream
        else:
            node.meta.pop(LABEL, None)
    return gm


def same_stream(*nodes, streams: Optional[Dict[torch.fx.Node, str]] = None) -> bool:
    """True when every FX node of ``nodes`` runs on one stream: by ``streams`` (a
    :func:`streams_of` map, authoritative after any rewrite) or else by ``stream_label``.
    Inputs, constants and the output belong to no stream. Fusing or reinplacing passes check
    it."""
    def stream(n):
        return streams.get(n, "") if streams is not None else n.meta.get(LABEL)

    found = {stream(n) for n in nodes if isinstance(n, torch.fx.Node)
             and n.op not in ("placeholder", "get_attr", "output")}
    return len(found) <= 1


# -- happens-before -------------------------------------------------------------------------------------
Clock = Dict[str, int]


def _merge(into: Clock, other: Clock) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class Clocks:
    """Vector clocks of a graph's streams, applied node by node in program order."""

    def __init__(self) -> None:
        self.stack: List[str] = []
        self.clocks: Dict[str, Clock] = {}
        self.events: Dict[str, Clock] = {}
        self.floor: Clock = {}

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def clock(self, stream: str) -> Clock:
        if stream not in self.clocks:
            self.clocks[stream] = dict(self.floor)
        return self.clocks[stream]

    def apply(self, node: torch.fx.Node) -> Optional[Tuple[str, int]]:
        """Apply ``node``; returns (stream, tick) for a node that runs work on a stream."""
        name = _stream_op(node)
        cur = self.current()
        if not name:
            if node.op != "call_function":
                return None
            c = self.clock(cur)
            c[cur] = c.get(cur, 0) + 1
            return cur, c[cur]
        args = node.args
        if name == "stream_enter":
            self.stack.append(args[0])
        elif name == "stream_exit":
            if self.stack:
                self.stack.pop()
        elif name == "fork":
            for tag in args[0]:
                _merge(self.clock(tag), self.clock(cur))
        elif name == "join":
            for tag in args[0]:
                _merge(self.clock(cur), self.clock(tag))
        elif name == "event_record":
            self.events[args[0]] = dict(self.clock(args[1] or cur))
        elif name == "event_wait":
            if args[0] in self.events:
                _merge(self.clock(args[1] or cur), self.events[args[0]])
        elif name == "wait_tensor":
            if args[2] in self.events:
                _merge(self.clock(cur), self.events[args[2]])
        elif name == "stream_wait_stream":
            _merge(self.clock(args[0] or cur), self.clock(args[1] or cur))
        elif name == "synchronize":
            every: Clock = {}
            for c in self.clocks.values():
                _merge(every, c)
            for c in self.clocks.values():
                _merge(c, every)
            _merge(self.floor, every)
        return None


def _carries_tensor(node: torch.fx.Node) -> bool:
    val = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(val, torch.Tensor):
        return True
    if isinstance(val, (tuple, list)):
        return any(isinstance(v, torch.Tensor) for v in val)
    return val is None and node.op == "call_function"  # unknown: order it to be safe


def _tensor_val(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val", node.meta.get("example_value")), torch.Tensor)


def cross_stream_reads(graph: torch.fx.Graph):
    """``[(producer, reader, producer stream, reader stream, ordered)]`` for every value read
    on a stream other than the one that produced it (graph inputs excluded: the graph's fork
    orders them), in program order of the readers; ``ordered`` says whether the graph's own
    stream ops already make the read happen after the producer. The output node reads on the
    graph's stream ``""``."""
    hb = Clocks()
    ticks: Dict[torch.fx.Node, Tuple[str, int]] = {}
    found = []
    for node in graph.nodes:
        name = _stream_op(node)
        if name:
            hb.apply(node)
            continue
        if node.op == "output":
            stream, clock = "", hb.clock("")
        elif node.op == "call_function":
            stream = hb.current()
            clock = hb.clock(stream)
        else:
            continue
        for src in node.all_input_nodes:
            if src not in ticks or not _carries_tensor(src):
                continue
            s, tick = ticks[src]
            if s != stream:
                found.append((src, node, s, stream, clock.get(s, 0) >= tick))
        pos = hb.apply(node)
        if pos is not None:
            ticks[node] = pos
    return found


def _user_stream(tag: str) -> bool:
    return bool(tag) and runtime.user_object(tag) is not None


def order_streams(gm: torch.fx.GraphModule, example_inputs=None, config=None):
    """Pipeline stage ``stream_order``: see the module docstring."""
    graph = gm.graph
    if not any(_stream_op(n) in ("stream_enter", "fork") for n in graph.nodes):
        return gm
    reads = cross_stream_reads(graph)
    races = [(p, r, s, t) for p, r, s, t, ordered in reads
             if not ordered and (_user_stream(s) or _user_stream(t))]
    if races:
        p, r, s, t = races[0]
        log.warning(
            "stream race: %s reads %s on stream %r, produced on stream %r, and the program "
            "does not order the read after the producer (no event, wait or stream wait "
            "between them)%s; torchair_dist orders it with an event (record an event after the "
            "producer and wait on it on the reading stream to make the program right "
            "uncompiled too)", where(r), p.name, t or "(current)", s or "(current)",
            f"; {len(races) - 1} more such read(s) in this graph" if len(races) > 1 else "")
    prefix = f"x{next(_graph_ids)}_"
    events: Dict[Tuple[torch.fx.Node, str], str] = {}
    streams = streams_of(graph)
    for p, r, s, t, _ in reads:
        key = (p, t)
        if key in events:
            continue
        tag = events[key] = f"{prefix}ev{len(events)}"
        with graph.inserting_after(p):
            rec = graph.call_function(ops.event_record.default, (tag, s))
        with graph.inserting_before(r):
            graph.call_function(ops.event_wait.default, (tag, t))
        _copy_trace(rec, p)
        if _tensor_val(p):
            _record_stream_after(graph, p, r, t)
    # graph inputs read on a side stream: their memory is the caller's, protect it likewise
    protected = set()
    for node in graph.nodes:
        stream = streams.get(node, "")
        if not stream or node.op != "call_function" or _stream_op(node):
            continue
        for src in node.all_input_nodes:
            if src.op == "placeholder" and _tensor_val(src) and (src, stream) not in protected:
                protected.add((src, stream))
                _record_stream_after(graph, src, node, stream)
    label_streams(gm)
    graph.lint()
    gm.recompile()
    log.debug("stream_order: %d cross-stream reads ordered (%d events), %d unordered in the "
              "program", len(reads), len(events), sum(1 for *_, o in reads if not o))
    return gm


def _record_stream_after(graph, value, reader, stream: str) -> None:
    """``record_stream(value, stream)`` right after ``reader`` (for the output node: before
    it, on the graph's stream)."""
    if reader.op == "output":
        with graph.inserting_before(reader):
            graph.call_function(ops.record_stream.default, (value, stream))
    else:
        with graph.inserting_after(reader):
            graph.call_function(ops.record_stream.default, (value, stream))


def _copy_trace(new: torch.fx.Node, like: torch.fx.Node) -> None:
    if "stack_trace" in like.meta:
        new.meta["stack_trace"] = like.meta["stack_trace"]
