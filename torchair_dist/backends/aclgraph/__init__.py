"""ACL-graph backend (modes ``npugraph_ex`` and ``reduce-overhead``).

``BACKEND`` (a :class:`~torchair_dist.pipeline.graph_context.Backend`) is what ``pipeline.MODE_TABLE``
names for both modes: with ``experimental_config.inductor_kernels`` (and a device that allows
it) inductor generates the forward (:mod:`.inductor_kernels`), else ``compile_graph(ctx)``
generates a runner from the FX graph. With a device graph class
(``torch.npu.NPUGraph`` / ``torch.cuda.CUDAGraph``) it captures per graph key and replays. On
CPU a stand-in graph takes the device graph's place (:mod:`torchair_dist.platform.stand_ins`
picks it from the CPU wing, ``TORCHAIR_DIST_CPU_CAPTURE``), behind the same
:class:`~torchair_dist.platform.interfaces.CaptureGraph` interface.

Every capture, replay and recapture is counted in :mod:`.report` (``capture_report()``).
"""
from __future__ import annotations

from ...platform.interfaces import CollectiveTransport
from ..context import Backend, GraphContext
from .compile import capture_runner, compile_graph, graph_device_type, graph_factory_for  # noqa: F401
from .report import capture_report, reset_capture_report

__all__ = ["BACKEND", "AclGraphBackend", "compile_graph", "graph_factory_for", "capture_report",
           "reset_capture_report"]


_OWN_COLLECTIVES = CollectiveTransport()


class AclGraphBackend(Backend):
    """``npugraph_ex`` / ``reduce-overhead``: a generated runner, captured per graph key."""

    name = "aclgraph"

    def compile(self, ctx: GraphContext):
        from . import inductor_kernels

        transport = ctx.transport or _OWN_COLLECTIVES
        if inductor_kernels.enabled_for(ctx):
            return inductor_kernels.compile_graph(transport.for_runner(ctx, functional=True))
        return compile_graph(transport.for_runner(ctx))


BACKEND = AclGraphBackend()
