"""Kernels of the stream/event ops: tags -> the platform's streams and events.

On CPU (no stream class on the platform) every kernel is ordering only and does nothing: the
ops run in program order, which respects every dependency they express.

With a device (``platform.current()`` has stream and event classes: CUDA or NPU) the kernels
drive real streams: a tag names one stream per device for the whole process (created on first
use, like TorchAir's tag -> stream map), an event tag names one event. Inside a device-graph
capture these calls are captured like any other stream work, which is how replay overlaps what
the user put on side streams: the rewrite brackets each graph with ``fork`` (side streams wait
for the capture stream) and ``join`` (the capture stream waits for them).

THIS DEVICE PATH IS NOT TESTED HERE (CPU-only CI); it is kept deliberately thin.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional

import torch

from .. import platform as _platform

_lock = threading.Lock()
_streams: Dict[str, object] = {}
_events: Dict[str, object] = {}
_local = threading.local()


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
        stream = _streams.get(tag)
        if stream is None:
            stream = _streams[tag] = plat.stream_class(priority=priority)
        return stream


def event_for(tag: str):
    plat = _device_platform()
    if plat is None:
        return None
    with _lock:
        event = _events.get(tag)
        if event is None:
            event = _events[tag] = plat.event_class()
        return event


def _stack() -> List[object]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


# -- kernels (signatures follow the schemas in ops.py) ------------------------------------------
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
    ev = event_for(event)
    if ev is not None:
        ev.record(stream_for(stream))


def event_wait(event: str, stream: str) -> None:
    ev = event_for(event)
    if ev is not None:
        ev.wait(stream_for(stream))


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


def wait_tensor(self: torch.Tensor, dependency: torch.Tensor, event: str) -> None:
    if event and self.device.type != "cpu":
        event_wait(event, "")


def record_stream(self: torch.Tensor, stream: str) -> None:
    if self.device.type != "cpu":
        s: Optional[object] = stream_for(stream)
        if s is not None:
            self.record_stream(s)


def reset() -> None:
    """Forget every tag (tests)."""
    with _lock:
        _streams.clear()
        _events.clear()
