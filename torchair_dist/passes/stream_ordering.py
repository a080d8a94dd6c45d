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
  makes every value produced on stream S and read on stream T != S ordered, adding an event
  only where nothing already orders the read. The one order model (:mod:`..streams.order_model`) says
  what the program orders: its own events and waits, ``npu_wait_tensor``, stream waits,
  fork/join, synchronize, collective waits, and what they imply transitively. A read it does
  not prove ordered gets an ``event_record(ev, S)`` right after the producer and an
  ``event_wait(ev, T)`` right before the reader (:func:`plan_events`: each added event counts
  for the later reads too, one event per producer, waited by each stream that needs it); a
  graph output produced on a side stream counts as read on the graph's stream (the graph's
  ``join`` orders it). A wait on an event recorded *before* the producer does not order it.
  The number of events added is ``gm.meta["stream_events_added"]`` (logged at DEBUG; the
  capture report shows it per graph). The program's own waits, tagged events and
  ``npu_wait_tensor`` stay: they only add ordering.

  Memory is a separate concern: each tensor made on one stream and read on another, and each
  graph input read on a side stream, gets ``record_stream(value, T)`` right after its first
  reader on T, ordered or not (a capture's private pool honours it too: a block freed with
  pending stream uses is not reused before that stream's work is done).

A graph that uses the user's own ``torch.Stream`` objects (CUDA-style code: the program is
responsible for its ordering) and reads a value on another stream without ordering it itself
is racy on any device: the stage orders it anyway and logs ONE warning per graph naming the
first such read's source line (and how many there are).
"""
from __future__ import annotations

import itertools
import logging
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx

from ..streams import runtime
from ..streams.order_model import GraphOrder
from ..streams.stream_ops import NAMESPACE, ops
from .stream_rewrite import where

log = logging.getLogger("torchair_dist")

LABEL = "stream_label"
EVENTS_ADDED = "stream_events_added"  # gm.meta key: events the stream_order stage added
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


# -- the stage --------------------------------------------------------------------------------------
def _tensor_val(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val", node.meta.get("example_value")), torch.Tensor)


def cross_stream_reads(graph: torch.fx.Graph):
    """``[(producer, reader, producer stream, reader stream, ordered)]`` for every value read
    on a stream other than the one whose work produced it (graph inputs excluded: the graph's
    fork orders them), in program order of the readers; ``ordered``: whether the graph's own
    ordering (:mod:`..streams.order_model`) makes the read happen after the producer. The output node
    reads on the graph's stream ``""``."""
    return [(r.producer, r.reader, r.producer_stream, r.reader_stream, r.ordered)
            for r in GraphOrder(graph).cross_reads]


def plan_events(graph: torch.fx.Graph) -> List[Tuple[torch.fx.Node, torch.fx.Node]]:
    """The events the graph needs: ``[(producer, reader)]``, each an event recorded right
    after ``producer`` on its stream and waited right before ``reader`` on the reader's stream,
    for the reads nothing orders yet. Walked in program order over the one order model, each
    planned event counts as an ordering for every later read (what it implies transitively is
    not ordered again); a reader's unordered producers are covered by as few events as the
    model allows (an event after a producer that happens after the others covers them)."""
    plan: List[Tuple[torch.fx.Node, torch.fx.Node]] = []

    def order(model: GraphOrder, reader: torch.fx.Node, unordered: List[torch.fx.Node]):
        items = model.items
        tl = model.timeline
        while unordered:
            best = max(unordered, key=lambda p: (
                sum(tl.ordered(items[q], items[p]) for q in unordered), items[p]))
            model.order_before(best, reader)
            plan.append((best, reader))
            unordered = [p for p in unordered if not model.ordered(p, reader)]

    GraphOrder(graph, on_read=order)
    return plan


def _user_stream(tag: str) -> bool:
    return bool(tag) and runtime.user_object(tag) is not None


def order_streams(gm: torch.fx.GraphModule, example_inputs=None, config=None):
    """Pipeline stage ``stream_order``: see the module docstring."""
    graph = gm.graph
    if not any(_stream_op(n) in ("stream_enter", "fork") for n in graph.nodes):
        return gm
    reads = GraphOrder(graph).cross_reads
    races = [r for r in reads if not r.ordered
             and (_user_stream(r.producer_stream) or _user_stream(r.reader_stream))]
    if races:
        r = races[0]
        log.warning(
            "stream race: %s reads %s on stream %r, produced on stream %r, and the program "
            "does not order the read after the producer (no event, wait or stream wait "
            "between them)%s; torchair_dist orders it with an event (record an event after the "
            "producer and wait on it on the reading stream to make the program right "
            "uncompiled too)", where(r.reader), r.producer.name, r.reader_stream or "(current)",
            r.producer_stream or "(current)",
            f"; {len(races) - 1} more such read(s) in this graph" if len(races) > 1 else "")
    plan = plan_events(graph)
    streams = streams_of(graph)
    prefix = f"x{next(_graph_ids)}_"
    tags: Dict[torch.fx.Node, str] = {}  # one event per producer, waited by every stream
    for p, r in plan:
        if p not in tags:
            tags[p] = f"{prefix}ev{len(tags)}"
            with graph.inserting_after(p):
                rec = graph.call_function(ops.event_record.default, (tags[p], streams[p]))
            _copy_trace(rec, p)
        reader_stream = "" if r.op == "output" else streams[r]
        with graph.inserting_before(r):
            graph.call_function(ops.event_wait.default, (tags[p], reader_stream))
    _protect_memory(graph, reads, streams)
    label_streams(gm)
    graph.lint()
    gm.recompile()
    gm.meta[EVENTS_ADDED] = len(tags)
    log.debug("stream_order: %d cross-stream reads, %d ordered by the program; %d events added "
              "(%d records, %d waits) for the others", len(reads),
              sum(1 for r in reads if r.ordered), len(tags), len(tags), len(plan))
    return gm


def _protect_memory(graph, reads, streams) -> None:
    """``record_stream(value, T)`` right after the first reader on stream T of each tensor
    made on another stream, and of each graph input read on a side stream: the caching
    allocator does not reuse its block before T's work issued so far is done (whatever orders
    the read itself)."""
    done = set()
    for r in reads:
        key = (r.value, r.reader_stream)
        if _tensor_val(r.value) and key not in done:
            done.add(key)
            _record_stream_after(graph, r.value, r.reader, r.reader_stream)
    for node in list(graph.nodes):
        stream = streams.get(node, "")
        if not stream or node.op != "call_function" or _stream_op(node):
            continue
        for src in node.all_input_nodes:
            if src.op == "placeholder" and _tensor_val(src) and (src, stream) not in done:
                done.add((src, stream))
                _record_stream_after(graph, src, node, stream)


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
