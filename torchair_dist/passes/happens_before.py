"""The happens-before check: every cross-stream data edge of a graph is ordered.

The order is the one model's (:mod:`..streams.order_model`: program order per stream, events, stream
waits, fork/join, synchronize, collective waits). A data edge (a value produced on one stream
and read on another) is *not* an ordering: on a device the reader may run before the writer.

:func:`unordered_edges` lists every cross-stream data edge of an FX graph that no ordering
covers, naming producer and consumer with their source lines; :func:`check_stream_order` is
the pipeline stage (``debug.check_stream_order``, or ``TORCHAIR_DIST_CHECK_STREAM_ORDER=1``)
that raises :class:`~torchair_dist.errors.GraphValidationError` on the first graph with one.
"""
from __future__ import annotations

from typing import List

import torch
import torch.fx

from ..base.envvars import env_flag
from ..errors import GraphValidationError
from ..streams.order_model import GraphOrder

CHECK_ENV = "TORCHAIR_DIST_CHECK_STREAM_ORDER"


def unordered_edges(graph: torch.fx.Graph) -> List[str]:
    """Every cross-stream data edge of ``graph`` that no ordering covers, one line each:
    ``producer (stream, source line) -> consumer (stream, source line)``."""
    from .stream_rewrite import where

    order = GraphOrder(graph)
    if not order.uses_side_streams():
        return []
    return list(dict.fromkeys(  # two values of one producer read by one node: one line
        f"{r.producer.name} on stream {r.producer_stream or 'main'!r} ({where(r.producer)}) "
        f"-> {r.reader.name} on stream {r.reader_stream or 'main'!r} ({where(r.reader)})"
        for r in order.cross_reads if not r.ordered))


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
