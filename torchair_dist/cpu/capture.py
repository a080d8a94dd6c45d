"""The CPU stand-ins for a device graph, and which one runs (``TORCHAIR_DIST_CPU_CAPTURE``).

* ``record`` (default): capture records the dispatched ops, replay re-issues them on the
  captured buffers, with the device-graph rules (:mod:`.record`);
* ``emulate``: :class:`EmulatedGraph`: fixed input and output buffers, replay re-runs the
  FX forward and copies into the captured outputs, so the runner's input-copy /
  output-aliasing / recapture logic is exercised exactly as on a device;
* ``off``: no capture, the FX forward runs directly.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Sequence

import torch

from ..base.envvars import CPU_CAPTURE_ENV, env_choice
from ..platform.interfaces import CaptureFactory, CaptureGraph, InputFeed

log = logging.getLogger("torchair_dist")

CPU_CAPTURE_MODES = ("record", "emulate", "off")
DEFAULT_CPU_CAPTURE = "record"


def cpu_capture_mode() -> str:
    """The CPU stand-in in use: "record" (default), "emulate", or "off" (run directly)."""
    return env_choice(CPU_CAPTURE_ENV, CPU_CAPTURE_MODES, DEFAULT_CPU_CAPTURE)


class EmulatedGraph(CaptureGraph):
    """CPU stand-in for a device graph: fixed input and output buffers, replay recomputes."""

    def __init__(self):
        self.fn: Optional[Callable] = None
        self.inputs: List[Any] = []
        self.outputs: Sequence[Any] = ()
        self.feed: Optional[InputFeed] = None

    def capture(self, fn: Callable, inputs: List[Any], feed: InputFeed) -> Sequence[Any]:
        self.fn, self.inputs, self.feed = fn, inputs, feed
        self.outputs = fn(list(inputs))
        return self.outputs

    def replay(self, args) -> None:
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            if self.feed.private:  # the runner's own buffers: the caller's tensors hold them
                fresh = self.fn(list(args))
            else:
                self.feed(args)
                fresh = self.fn(list(self.inputs))
            for static, new in zip(self.outputs, fresh):
                if isinstance(static, torch.Tensor) and static is not new:
                    static.copy_(new)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)


def capture_factory(gm: torch.fx.GraphModule, graph_name: str, share_pool: bool,
                    opaque_forward: bool = False, pool=None) -> Optional[CaptureFactory]:
    """The stand-in capture graphs of one runner, or None to run without capture.

    ``opaque_forward``: the forward runs kernels the dispatcher never sees (inductor's), which
    the record stand-in cannot record (it would replay the FX graph's aten ops instead): such a
    graph gets the emulating stand-in (fixed buffers, the forward runs per replay).
    ``pool``: another factory's ``pool`` to join (the pieces of one piecewise graph)."""
    from .record import RecordGraph
    from .record_pool import RecordPool

    stand_in = cpu_capture_mode()
    if stand_in == "record" and opaque_forward:
        log.debug("%s: its forward calls compiled kernels; the emulating CPU stand-in replays "
                  "it (the record stand-in only re-issues dispatched ops)", graph_name)
        stand_in = "emulate"
    if stand_in == "record":
        if not share_pool:
            pool = None
        elif not isinstance(pool, RecordPool):
            pool = RecordPool()
        return CaptureFactory(lambda: RecordGraph(gm, pool, graph_name), share_pool, pool)
    if stand_in == "emulate":
        return CaptureFactory(EmulatedGraph, False)
    return None
