"""``debug.deadlock_check``: collectives that may run concurrently on different streams.

TorchAir's check runs on the device's task trace after loading (NPU only): it computes vector
clocks over streams and events and flags concurrent communication tasks on different streams.
This pass applies the same idea to the graph itself, so it works on every platform and before
anything runs: it walks the graph with the stream/event ops of ``torchair_dist.streams``,
keeps one vector clock per stream, and names every pair of collectives on different streams
with no happens-before between them. Such a pair can be issued in different orders on
different ranks (or compete for the same communication resources) and hang the job.

The check warns (one ``UserWarning`` per graph listing the pairs, as TorchAir prints its
conflicts) and leaves the graph unchanged. Requires: node order is the execution order.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Tuple

import torch
import torch.fx

from ..base.util import source_line
from .overlap import COMM_NAMESPACES, WAIT, _namespace_and_name, node_kind

# The code that decides what this module's stages make of a graph: the compile cache's key
# hashes it for every stage that shaped a stored entry (cache/keys.py: library_digest).
GRAPH_SOURCES = (__name__, "torchair_dist.collectives.spec", "torchair_dist.passes.overlap")

Clock = Dict[str, int]
_STREAM_OPS = "torchair_dist_streams."


def _merge(into: Clock, other: Clock) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _before(a: Clock, b: Clock) -> bool:
    return all(v <= b.get(k, 0) for k, v in a.items())


class _Streams:
    """Vector clocks of the streams and events seen so far."""

    def __init__(self):
        self.stack: List[str] = [""]
        self.clocks: Dict[str, Clock] = {}
        self.events: Dict[str, Clock] = {}

    def clock(self, tag: str) -> Clock:
        return self.clocks.setdefault(tag or self.stack[-1], {})

    def apply(self, op: str, args) -> None:
        cur = self.stack[-1]
        if op == "stream_enter":
            self.clock(args[0])
            self.stack.append(args[0])
        elif op == "stream_exit":
            if len(self.stack) > 1:
                self.stack.pop()
        elif op == "fork":
            for tag in args[0]:
                _merge(self.clock(tag), self.clock(cur))
        elif op == "join":
            for tag in args[0]:
                _merge(self.clock(cur), self.clock(tag))
        elif op == "event_record":
            self.events[args[0]] = dict(self.clock(args[1] or cur))
        elif op == "event_wait":
            _merge(self.clock(args[1] or cur), self.events.get(args[0], {}))
        elif op == "stream_wait_stream":
            _merge(self.clock(args[0] or cur), self.clock(args[1] or cur))
        elif op == "wait_tensor" and len(args) > 2 and args[2]:
            _merge(self.clock(cur), self.events.get(args[2], {}))

    def task(self) -> Tuple[str, Clock]:
        stream = self.stack[-1]
        clock = self.clock(stream)
        clock[stream] = clock.get(stream, 0) + 1
        return stream, dict(clock)


def _is_collective(node: torch.fx.Node) -> bool:
    """A communication op (functional or in-place, collective or p2p), not its wait."""
    ns, _ = _namespace_and_name(node.target)
    return ns in COMM_NAMESPACES and node_kind(node) != WAIT


def find_conflicts(gm: torch.fx.GraphModule) -> List[Tuple[torch.fx.Node, str, torch.fx.Node, str]]:
    """``[(collective, stream, other collective, other stream)]`` that may run concurrently."""
    streams = _Streams()
    tasks = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if name.startswith(_STREAM_OPS):
            streams.apply(name[len(_STREAM_OPS):].split(".")[0], node.args)
        elif _is_collective(node):
            stream, clock = streams.task()
            tasks.append((node, stream, clock))
    conflicts = []
    for i, (a, sa, ca) in enumerate(tasks):
        for b, sb, cb in tasks[i + 1:]:
            if sa != sb and not _before(ca, cb) and not _before(cb, ca):
                conflicts.append((a, sa, b, sb))
    return conflicts


def deadlock_check(gm: torch.fx.GraphModule, example_inputs, config):
    """Warn about concurrent collectives on different streams (see module doc)."""
    conflicts = find_conflicts(gm)
    if conflicts:
        lines = [f"{a.name} on stream {sa or '(current)'!r} [{source_line(a)}] and {b.name} on "
                 f"stream {sb or '(current)'!r} [{source_line(b)}]" for a, sa, b, sb in conflicts]
        warnings.warn("debug.deadlock_check: these collectives may run concurrently on different "
                      "streams; ranks can issue them in different orders and hang. Order them "
                      "with an event or put them on one stream:\n  " + "\n  ".join(lines),
                      UserWarning, stacklevel=2)
    return gm
