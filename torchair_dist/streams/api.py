"""User-facing stream/event APIs, device-agnostic, traceable with ``fullgraph=True``.

They mirror TorchAir's (``torchair.scope.npu_stream_switch``, ``torchair.ops.npu_wait_tensor``,
the tagged events). Traced (``torch.compile``, ``torch.export``, ``make_fx``) they emit the
``torchair_dist_streams`` ops of :mod:`.stream_ops`, which survive tracing, functionalization
and dead-code elimination; the compiled graph runs the scopes on real streams with a device,
every cross-stream dependency ordered (:mod:`torchair_dist.passes.stream_ordering`).

Called eagerly (outside any tracing) they keep TorchAir's eager meaning: program order on the
current stream. ``npu_stream_switch`` switches no stream and ``npu_wait_tensor`` does nothing
(everything already runs in program order on one stream); a tagged event is recorded on, and
waited on by, the current stream whatever stream is named (so a compiled graph that waits on
it, or eager code that waits on a graph's record, is ordered); ``npu_stream_wait_stream``
makes the current stream wait for the named one; ``npu_record_tagged_stream`` records the
tensor's use on the named stream (harmless: it only delays the reuse of its memory).

Example::

    from torchair_dist.streams import npu_stream_switch, npu_wait_tensor

    def f(x, w):
        h = x @ w
        with npu_stream_switch("side", priority=0):
            npu_wait_tensor(x, h)          # the side stream starts after h is computed
            y = torch.relu(x) * 2          # runs on stream "side"
        return h + y
"""
from __future__ import annotations

import threading
from typing import Dict, Optional, Union

import torch

from ..errors import StreamApiError
from .stream_ops import ops


def traced() -> bool:
    """True while a tracer records the calls (Dynamo, export, ``make_fx``): the APIs emit
    their graph ops; False eagerly: they keep program order on the current stream."""
    if torch.compiler.is_compiling():
        return True
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return get_proxy_mode() is not None


def _check_tag(tag, what: str) -> str:
    if not isinstance(tag, str) or not tag:
        raise StreamApiError(f"{what}: the tag must be a non-empty str, got {tag!r}")
    return tag


class npu_stream_switch:  # noqa: N801 - TorchAir's name
    """Scope: the ops inside run on the stream named ``tag`` (created on first use).

    ``priority`` is the stream's priority when a device creates it (0 = default). Scopes nest;
    leaving one returns to the enclosing stream. In a compiled graph a scope that is left open
    (e.g. by a graph break inside it) is a ``GraphValidationError``.

    ``enable_inner_parallel`` (a bool, TorchAir's third argument) asks GE to run independent
    ops inside the scope in parallel; it is accepted and kept (``.enable_inner_parallel``) for
    TorchAir callers, and has no effect in the ACL modes or on CPU.
    """

    def __init__(self, tag: str, priority: int = 0, enable_inner_parallel: bool = False):
        self.tag = _check_tag(tag, "npu_stream_switch")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise StreamApiError(f"npu_stream_switch({tag!r}): priority must be an int, got "
                                 f"{priority!r}")
        if not isinstance(enable_inner_parallel, bool):
            raise StreamApiError(f"npu_stream_switch({tag!r}): enable_inner_parallel must be a "
                                 f"bool, got {enable_inner_parallel!r}")
        self.priority = priority
        self.enable_inner_parallel = enable_inner_parallel

    def __enter__(self):
        self._traced = traced()
        if self._traced:  # eagerly: no switch, program order on the current stream
            ops.stream_enter(self.tag, self.priority)
        return self

    def __exit__(self, *exc_info):
        if getattr(self, "_traced", False):
            ops.stream_exit(self.tag)
        return False


def npu_wait_tensor(tensor: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    """Make what follows on the current stream wait until ``dependency`` is computed; returns
    ``tensor`` (TorchAir's signature: callers usually ignore the result). Eagerly it does
    nothing: program order on one stream already computed ``dependency``."""
    if traced():
        ops.wait_tensor(tensor, dependency, "")
    return tensor


class TaggedEvent:
    """An event known by its tag (see :func:`npu_create_tagged_event`)."""

    __slots__ = ("tag",)

    def __init__(self, tag: str):
        self.tag = tag

    def __repr__(self) -> str:
        return f"TaggedEvent({self.tag!r})"


_tagged_events: Dict[str, TaggedEvent] = {}
_tagged_lock = threading.Lock()


def npu_create_tagged_event(tag: str) -> TaggedEvent:
    """Create the event named ``tag`` (call it outside compiled code). A tag is created once
    per process: a second creation is a ``StreamApiError``, as in TorchAir."""
    _check_tag(tag, "npu_create_tagged_event")
    with _tagged_lock:
        if tag in _tagged_events:
            raise StreamApiError(f"tagged event {tag!r} already exists; tags are unique per "
                                 f"process (reuse the returned TaggedEvent)")
        event = _tagged_events[tag] = TaggedEvent(tag)
    return event


def _event_tag(event: Union[TaggedEvent, str]) -> str:
    return event if isinstance(event, str) else event.tag


def npu_tagged_event_record(event: Union[TaggedEvent, str], stream: Optional[str] = None) -> None:
    """Record ``event`` on the stream tagged ``stream`` (None: the current stream; eagerly
    always the current stream)."""
    ops.event_record(_event_tag(event), (stream or "") if traced() else "")


def npu_tagged_event_wait(event: Union[TaggedEvent, str], stream: Optional[str] = None) -> None:
    """Make the stream tagged ``stream`` (None: the current stream; eagerly always the
    current stream) wait for ``event``."""
    ops.event_wait(_event_tag(event), (stream or "") if traced() else "")


def npu_stream_wait_stream(waiting: Optional[str], waited_on: Optional[str]) -> None:
    """Stream ``waiting`` waits for the work issued so far on ``waited_on`` (None: current;
    eagerly the current stream is the one that waits)."""
    if traced():
        ops.stream_wait_stream(waiting or "", waited_on or "")
    elif waited_on:
        ops.stream_wait_stream("", waited_on)


def npu_record_tagged_stream(tensor: torch.Tensor, tag: str) -> None:
    """``record_stream`` equivalent: ``tensor`` is used on stream ``tag``; its memory is not
    reused before that stream's work issued so far is done."""
    ops.record_stream(tensor, tag)


def _forget_tagged_events() -> None:
    """Drop every tagged event (tests)."""
    with _tagged_lock:
        _tagged_events.clear()
