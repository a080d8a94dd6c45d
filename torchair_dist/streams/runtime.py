"""Kernels of the stream/event ops: tags -> the platform's streams and events.

On CPU (no stream class on the platform) every kernel is ordering only and does nothing: the
ops run in program order, which respects every dependency they express.

With a device (``platform.current()`` has stream and event classes: CUDA or NPU) the kernels
drive real streams: a tag names one stream per device for the whole process (created on first
use, like TorchAir's tag -> stream map), an event tag names one event. Inside a device-graph
capture these calls are captured like any other stream work, which is how replay overlaps what
the user put on side streams: the rewrite brackets each graph with ``fork`` (side streams wait
for the capture stream) and ``join`` (the capture stream waits for them), and the
``stream_order`` stage (:mod:`torchair_dist.passes.stream_ordering`) puts an ``event_record`` / ``event_wait`` pair on
every value read on another stream than its producer's and a ``record_stream`` on its memory.

These kernels are what a compiled graph runs: ``stream_enter`` really switches (without
waiting: the graph's events order the data). The user APIs (:mod:`.api`) emit them only while
tracing; called eagerly they keep TorchAir's eager meaning (program order on the current
stream) and reach here only for events and ``record_stream``, on the current stream.

User objects keep their identity: the rewrite binds each ``torch.Stream`` / ``torch.Event`` it
turns into a tag to that tag (:func:`bind`, both ways: :func:`user_object` / :func:`tag_of`), so
the kernels run on the user's own stream and record the user's own event. Inside a device
capture an event cannot be a plain one (a plain event recorded in a graph is internal to it):
there the tag's private *external* event is recorded and waited on, and the graph re-records
the user's event on the caller's stream after every replay (:func:`capture_log`), so a wait
outside the compiled region sees it. Events created for tags are external too, so a tag shared
by two captured graphs (or a graph and eager code) works across them.

THIS DEVICE PATH IS NOT RUN HERE (CPU-only CI); tests drive it with a fake platform.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Dict, Iterator, List, Optional

import torch

from .. import platform as _platform

_lock = threading.Lock()
_streams: Dict[str, object] = {}
_events: Dict[str, object] = {}
_bound: Dict[str, object] = {}   # tag -> the user's stream/event object
_bound_tags: Dict[int, str] = {}  # id(user object) -> tag
_local = threading.local()


def bind(tag: str, obj) -> None:
    """Tag ``tag`` names the user's ``obj`` (a torch.Stream/torch.Event)."""
    with _lock:
        _bound[tag] = obj
        _bound_tags[id(obj)] = tag


def user_object(tag: str):
    return _bound.get(tag)


def tag_of(obj) -> Optional[str]:
    tag = _bound_tags.get(id(obj))
    return tag if tag is not None and _bound.get(tag) is obj else None


def _capturing(plat) -> bool:
    check = getattr(_module(plat), "is_current_stream_capturing", None)
    return bool(check()) if check is not None else False


@contextlib.contextmanager
def capture_log() -> Iterator[List[str]]:
    """Collects the tags of user events recorded while a device graph captures."""
    log: List[str] = []
    saved = getattr(_local, "capture_log", None)
    _local.capture_log = log
    try:
        yield log
    finally:
        _local.capture_log = saved


def _new_event(plat):
    try:
        return plat.event_class(external=True)
    except TypeError:  # an event class without external events
        return plat.event_class()


def _device_platform():
    plat = _platform.current()
    return plat if plat.stream_class is not None else None


def _module(plat):
    return getattr(torch, plat.device_type)


def stream_for(tag: str, priority: int = 0):
    """The device stream of ``tag`` ("" = the current stream); None on CPU."""
    plat = _device_platform()
    if plat is None:
        return None
    if tag == "":
        return _module(plat).current_stream()
    with _lock:
        stream = _bound.get(tag) or _streams.get(tag)
        if stream is None:
            stream = _streams[tag] = plat.stream_class(priority=priority)
        return stream


def event_for(tag: str, capturing: bool = False):
    """The event of ``tag``: the user's own (bound) event, except inside a capture, where it
    is the tag's private external event; None on CPU."""
    plat = _device_platform()
    if plat is None:
        return None
    with _lock:
        if not capturing and tag in _bound:
            return _bound[tag]
        event = _events.get(tag)
        if event is None:
            event = _events[tag] = _new_event(plat)
        return event


def _stack() -> List[object]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


# -- kernels (signatures follow the schemas in stream_ops.py) ------------------------------------------
def stream_enter(tag: str, priority: int) -> None:
    plat = _device_platform()
    if plat is None:
        return
    module = _module(plat)
    _stack().append(module.current_stream())
    module.set_stream(stream_for(tag, priority))


def stream_exit(tag: str) -> None:
    plat = _device_platform()
    if plat is None or not _stack():
        return
    _module(plat).set_stream(_stack().pop())


def fork(tags: List[str]) -> None:
    current = stream_for("")
    if current is None:
        return
    for tag in tags:
        stream_for(tag).wait_stream(current)


def join(tags: List[str]) -> None:
    current = stream_for("")
    if current is None:
        return
    for tag in tags:
        current.wait_stream(stream_for(tag))


def event_record(event: str, stream: str) -> None:
    plat = _device_platform()
    if plat is None:
        return
    capturing = _capturing(plat)
    event_for(event, capturing).record(stream_for(stream))
    log = getattr(_local, "capture_log", None)
    if capturing and event in _bound and log is not None and event not in log:
        log.append(event)


def event_wait(event: str, stream: str) -> None:
    plat = _device_platform()
    if plat is None:
        return
    event_for(event, _capturing(plat)).wait(stream_for(stream))


def stream_wait_stream(waiting: str, waited_on: str) -> None:
    a = stream_for(waiting)
    if a is not None:
        a.wait_stream(stream_for(waited_on))


def synchronize(stream: str) -> None:
    plat = _device_platform()
    if plat is None:
        return
    if stream:
        stream_for(stream).synchronize()
    else:
        _module(plat).synchronize()


@functools.lru_cache(maxsize=None)
def _device_type_has_streams(device_type: str) -> bool:
    return _platform.for_device(device_type).stream_class is not None


def _on_streams(t: torch.Tensor) -> bool:
    """Whether the platform that owns ``t`` has streams (a device's memory; host memory is
    ordered by program order alone). Per replay on the CPU stand-in: answered once per device
    type (what a device type offers does not change within a process)."""
    return _device_type_has_streams(t.device.type)


def wait_tensor(self: torch.Tensor, dependency: torch.Tensor, event: str) -> None:
    if event and _on_streams(self):
        event_wait(event, "")


def record_stream(self: torch.Tensor, stream: str) -> None:
    if _on_streams(self):
        s: Optional[object] = stream_for(stream)
        if s is not None:
            self.record_stream(s)


def reset() -> None:
    """Forget every tag (tests)."""
    with _lock:
        _streams.clear()
        _events.clear()
        _bound.clear()
        _bound_tags.clear()
