"""``debug.deadlock_check``: collectives that may run concurrently on different streams.

TorchAir's check runs on the device's task trace after loading (NPU only): it computes vector
clocks over streams and events and flags concurrent communication tasks on different streams.
This pass applies the same idea to the graph itself, so it works on every platform and before
anything runs: the one order model of ``torchair_dist.streams.order_model`` gives each
collective its stream and happens-before (events, stream waits, fork/join, synchronize), and
the check names every pair of collectives on different streams with no happens-before between
them. Such a pair can be issued in different orders on different ranks (or compete for the
same communication resources) and hang the job.

The check warns (one ``UserWarning`` per graph listing the pairs, as TorchAir prints its
conflicts) and leaves the graph unchanged. Requires: node order is the execution order.
"""
from __future__ import annotations

import warnings
from typing import List, Tuple

import torch
import torch.fx

from ..base.util import source_line
from ..streams.order_model import GraphOrder
from .overlap import COMM_NAMESPACES, WAIT, _namespace_and_name, node_kind


def _is_collective(node: torch.fx.Node) -> bool:
    """A communication op (functional or in-place, collective or p2p), not its wait."""
    ns, _ = _namespace_and_name(node.target)
    return ns in COMM_NAMESPACES and node_kind(node) != WAIT


def find_conflicts(gm: torch.fx.GraphModule) -> List[Tuple[torch.fx.Node, str, torch.fx.Node, str]]:
    """``[(collective, stream, other collective, other stream)]`` that may run concurrently:
    on different streams with no happens-before either way (:mod:`torchair_dist.streams.
    order_model`: events, stream waits, fork/join, synchronize, collective waits)."""
    order = GraphOrder(gm.graph)
    tasks = [(n, order.stream(n)) for n in gm.graph.nodes
             if n.op == "call_function" and _is_collective(n)]
    conflicts = []
    for i, (a, sa) in enumerate(tasks):
        for b, sb in tasks[i + 1:]:
            if sa != sb and not order.ordered(a, b) and not order.ordered(b, a):
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
