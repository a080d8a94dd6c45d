"""Device graph capture (CUDA/NPU): a :class:`~torchair_dist.platform.interfaces.CaptureGraph`.

A captured graph owns *static* buffers: the inputs it was captured on and the outputs it
produced (``graph.outputs``). ``capture(fn, inputs, feed)`` returns the outputs of the current
call; ``replay(args)`` copies the caller's inputs into the static buffers (``feed``) and
recomputes into the static output tensors. (On CPU a stand-in from
:mod:`torchair_dist.cpu` takes this class's place, picked by
:mod:`torchair_dist.cpu.stand_ins`.)
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import torch

from ...platform.interfaces import CaptureGraph, InputFeed
from ...streams import runtime as stream_runtime

_CAPTURE_STREAMS: dict = {}


class DeviceGraph(CaptureGraph):
    """A real CUDA/NPU graph through the platform's graph class and capture context."""

    def __init__(self, platform, pool=None, capture_error_mode: str = "global"):
        self.platform = platform
        self.graph = platform.graph_class()
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.outputs: Sequence[Any] = ()
        self.feed: Optional[InputFeed] = None
        self.user_events: List[Any] = []
        self.reserved_bytes = None

    def capture(self, fn: Callable, inputs: List[Any], feed: InputFeed) -> Sequence[Any]:
        """Warm up, then capture, both on this graph's capture stream. Capturing records
        kernels without running them, so this call's results (and its one application of any
        input mutation) come from the warm-up run; the captured outputs are only filled by
        later replays."""
        self.feed = feed
        module = getattr(torch, self.platform.device_type)
        caller = module.current_stream()
        stream = self.capture_stream()
        # Warm up on the capture stream (lazy kernel/communicator init must not be captured,
        # and whatever the warm-up creates on that stream is then known to the capture).
        stream.wait_stream(caller)
        with module.stream(stream):
            first = fn(list(inputs))
        caller.wait_stream(stream)
        # The warm-up results were allocated on the capture stream but are used on the
        # caller's: tell the allocator, or it may hand their blocks out too early.
        for out in first if isinstance(first, (list, tuple)) else [first]:
            if isinstance(out, torch.Tensor) and out.device.type == self.platform.device_type:
                out.record_stream(caller)
        reserved = getattr(module, "memory_reserved", None)
        before = reserved() if reserved is not None else None
        with stream_runtime.capture_log() as recorded, \
                self.platform.graph_context(self.graph, pool=self.pool, stream=stream,
                                            capture_error_mode=self.capture_error_mode):
            self.outputs = fn(list(inputs))
        # what the capture added to the allocator's reserve (blocks a shared pool already
        # held are not counted again)
        self.reserved_bytes = reserved() - before if before is not None else None
        # User events recorded inside: the graph recorded private external events; the user's
        # own are re-recorded after each replay so waits outside the graph see them.
        self.user_events = [stream_runtime.user_object(tag) for tag in recorded]
        return first

    def capture_stream(self):
        """One capture stream per device for the process (as torch's graph context keeps)."""
        key = (self.platform.device_type, getattr(torch, self.platform.device_type)
               .current_device())
        stream = _CAPTURE_STREAMS.get(key)
        if stream is None:
            stream = _CAPTURE_STREAMS[key] = self.platform.stream_class()
        return stream

    def replay(self, args) -> None:
        grad = torch.is_grad_enabled()
        if grad:  # the feed's copies are not autograd's
            torch._C._set_grad_enabled(False)
        try:
            self.feed(args)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        self.graph.replay()
        if self.user_events:
            caller = getattr(torch, self.platform.device_type).current_stream()
            for event in self.user_events:
                event.record(caller)

    def pool_bytes(self):
        return self.reserved_bytes

    def pool_handle(self):
        return self.graph.pool()
