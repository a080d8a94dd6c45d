"""ACL-graph backend (modes ``npugraph_ex`` and ``reduce-overhead``).

``BACKEND`` (a :class:`~torchair_dist.backends.interface.Backend`) is what ``pipeline.MODE_TABLE``
names for both modes. Its ``start(ctx)`` makes the :class:`AclBuild` the row's backend steps
(:mod:`.compile`) work on, and ``finish`` returns the runner and the handle: a
forward generated from the FX graph, or with ``experimental_config.inductor_kernels`` one
inductor compiles (:mod:`.inductor_kernels`). With a device graph class
(``torch.npu.NPUGraph`` / ``torch.cuda.CUDAGraph``) it captures per graph key and replays. On
CPU a stand-in graph takes the device graph's place (:mod:`torchair_dist.cpu.stand_ins`
picks it from the CPU wing, ``TORCHAIR_DIST_CPU_CAPTURE``), behind the same
:class:`~torchair_dist.platform.interfaces.CaptureGraph` interface.

Every capture, replay and recapture is counted in :mod:`.report` (``capture_report()``).
"""
from __future__ import annotations

from ...platform.interfaces import CollectiveTransport
from ..context import GraphContext
from ..interface import Backend, Compiled
from .compile import AclBuild, graph_device_type  # noqa: F401
from .report import capture_report, reset_capture_report

__all__ = ["BACKEND", "AclGraphBackend", "AclBuild", "capture_report",
           "reset_capture_report"]


_OWN_COLLECTIVES = CollectiveTransport()


class AclGraphBackend(Backend):
    """``npugraph_ex`` / ``reduce-overhead``: the FX forward, captured per graph key."""

    name = "aclgraph"
    handle_format = "fx-graph (captured again on load)"

    def start(self, ctx: GraphContext) -> AclBuild:
        return AclBuild(ctx, ctx.transport or _OWN_COLLECTIVES)

    def finish(self, build: AclBuild) -> Compiled:
        return Compiled(build.runner_or_forward(), self.handle(build))


BACKEND = AclGraphBackend()
