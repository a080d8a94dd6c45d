"""Graph capture: the device graph (CUDA/NPU) and the CPU stand-in with the same semantics.

A captured graph owns *static* buffers: the inputs it was captured on and the outputs it
produced (``graph.outputs``). ``capture(fn, inputs)`` returns the outputs of the current call;
``replay()`` recomputes into the static output tensors. On a device that is the real
graph replay; on CPU, :class:`EmulatedGraph` re-runs the forward and copies the results into
the captured output tensors, so the runner's input-copy / output-aliasing / recapture logic is
exercised exactly as on a device (enable it with ``TORCHAIR_DIST_CPU_CAPTURE=emulate``).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import torch


class EmulatedGraph:
    """CPU stand-in for a device graph: fixed input and output buffers, replay recomputes."""

    def __init__(self):
        self.fn: Optional[Callable] = None
        self.inputs: List[Any] = []
        self.outputs: Sequence[Any] = ()

    def capture(self, fn: Callable, inputs: List[Any]) -> Sequence[Any]:
        self.fn, self.inputs = fn, inputs
        self.outputs = fn(list(inputs))
        return self.outputs

    def replay(self) -> None:
        fresh = self.fn(list(self.inputs))
        for static, new in zip(self.outputs, fresh):
            if isinstance(static, torch.Tensor) and static is not new:
                static.copy_(new)


class DeviceGraph:
    """A real CUDA/NPU graph through the platform's graph class and capture context."""

    def __init__(self, platform, pool=None, capture_error_mode: str = "global"):
        self.platform = platform
        self.graph = platform.graph_class()
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.outputs: Sequence[Any] = ()

    def capture(self, fn: Callable, inputs: List[Any]) -> Sequence[Any]:
        """Warm up, then capture. Capturing records kernels without running them, so this
        call's results (and its one application of any input mutation) come from the warm-up
        run; the captured outputs are only filled by later replays."""
        module = getattr(torch, self.platform.device_type)
        # Warm up on a side stream (lazy kernel/communicator init must not be captured).
        side = module.Stream()
        side.wait_stream(module.current_stream())
        with module.stream(side):
            first = fn(list(inputs))
        module.current_stream().wait_stream(side)
        with module.graph(self.graph, pool=self.pool,
                          capture_error_mode=self.capture_error_mode):
            self.outputs = fn(list(inputs))
        return first

    def replay(self) -> None:
        self.graph.replay()

    def pool_handle(self):
        return self.graph.pool()
