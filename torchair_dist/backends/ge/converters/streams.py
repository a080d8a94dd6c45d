"""Converters: the ``torchair_dist_streams`` ops (:mod:`torchair_dist.streams.stream_ops`) -> GE
stream attributes and control edges, as TorchAir's ``npu_stream_switch`` lowers to GE.

Each stream tag is a :class:`~..builder.Lane` of the builder (``""`` = the main stream):

- ``stream_enter(tag, priority)`` / ``stream_exit(tag)``: the ops issued in between are on lane
  ``tag`` and carry ``_user_stream_label`` = tag and ``_user_stream_priority`` = str(priority)
  (GE assigns them to that user stream; ``Data``/``Const`` are not issued on a stream).
- ``event_record(event, stream)``: the event stands for the last op issued so far on ``stream``
  ("" = current); ``event_wait(event, stream)``: the next op issued on ``stream`` gets a control
  edge (``"<op>:-1"``) from it. ``stream_wait_stream(waiting, waited_on)``: the next op on
  ``waiting`` gets a control edge from the last op on ``waited_on``.
- ``wait_tensor(self, dependency, event)``: an ``Identity`` of ``self`` on the current stream
  with a control edge from ``dependency``'s op; the next op on the stream follows it.
- ``fork``/``join``/``record_stream``/``synchronize``: nothing (GE orders the graph by its edges
  and owns the memory of the tensors it allocates).

A control edge no later op takes (a wait at the end of a stream) goes into ``NetOutput``.

GE orders every data edge itself, across streams too; the ``stream_order`` stage's events (one
per value read on another stream than its producer's) arrive here as ordinary
``event_record`` / ``event_wait`` pairs and add the same ordering as control edges.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch

from ....errors import UnsupportedOpError
from ....streams import stream_ops as _stream_ops  # noqa: F401  (defines torch.ops.torchair_dist_streams)
from ..builder import Lane
from .registry import register

st = torch.ops.torchair_dist_streams

LABEL, PRIORITY = "_user_stream_label", "_user_stream_priority"


class StreamState:
    """The stream stack and the events recorded so far, per converted graph."""

    def __init__(self, cx) -> None:
        self.b = cx.b
        self.stack: List[str] = []
        self.events: Dict[str, Optional[str]] = {}  # event tag -> the op it stands for

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def lane(self, tag: str) -> Lane:
        """The lane of stream ``tag`` ("" = the current stream), created on first use."""
        tag = tag or self.current()
        lane = self.b.lanes.get(tag)
        if lane is None:
            lane = self.b.lanes[tag] = Lane({LABEL: tag, PRIORITY: "0"})
        return lane


def _state(cx) -> StreamState:
    state = getattr(cx, "streams", None)
    if state is None:
        state = cx.streams = StreamState(cx)
    return state


@register([st.stream_enter.default], [])
def _stream_enter(cx, tag: str, priority: int):
    s = _state(cx)
    lane = s.lane(tag) if tag else None
    if lane is None:
        raise UnsupportedOpError(f"stream_enter %{cx.node.name}: a stream tag must be non-empty")
    lane.attrs[PRIORITY] = str(int(priority))
    s.stack.append(tag)
    cx.b.lane = lane


@register([st.stream_exit.default], [])
def _stream_exit(cx, tag: str):
    s = _state(cx)
    if s.current() != tag or not tag:
        raise UnsupportedOpError(
            f"stream_exit %{cx.node.name} leaves stream {tag!r}, but the innermost entered "
            f"stream is {s.current() or 'the main stream'!r}")
    s.stack.pop()
    cx.b.lane = s.lane("")


@register([st.event_record.default], [])
def _event_record(cx, event: str, stream: str):
    s = _state(cx)
    s.events[event] = s.lane(stream).last


@register([st.event_wait.default], [])
def _event_wait(cx, event: str, stream: str):
    s = _state(cx)
    src = s.events.get(event)  # None: recorded before this graph (program order covers it)
    if src is not None:
        s.lane(stream).pending.append(src)


@register([st.stream_wait_stream.default], [])
def _stream_wait_stream(cx, waiting: str, waited_on: str):
    s = _state(cx)
    src = s.lane(waited_on).last
    if src is not None:
        s.lane(waiting).pending.append(src)


@register([st.wait_tensor.default], ["Identity"])
def _wait_tensor(cx, x, dependency, event: str = ""):
    (y,) = cx.emit("Identity", [("x", x)], None, [("y", (x.dtype, x.shape))],
                   control=[dependency.op])
    cx.b.lane.pending.append(y.op)


@register([st.fork.default, st.join.default, st.record_stream.default,
           st.synchronize.default], [])
def _no_op(cx, *args):
    return None
