"""GE executors behind one interface (:class:`~torchair_dist.platform.interfaces.GeRuntime`):
the CANN adapter on Ascend (lazily imported), and, where no CANN runtime exists, the stand-in
that :mod:`torchair_dist.platform.stand_ins` picks (the CPU wing's reference executor)."""
from __future__ import annotations

from ....errors import GeRuntimeError
from ....platform.interfaces import GeRuntime


def create_runtime(kind: str = "auto", device=None, config=None, rank: int = 0,
                   world_size: int = 1, transport=None) -> GeRuntime:
    """``"reference"``, ``"cann"``, or ``"auto"``: CANN on an Ascend host, else the stand-in
    executor on ``device`` (the device of the graph's inputs; CPU by default). The CANN runtime
    gets the session/graph options of ``config`` (:func:`cann_options.cann_options`); the
    stand-in reads ``distributed_config.overlap_collectives`` (off: every collective is finished
    right after it is issued) and exchanges through ``transport`` (the route's choice)."""
    from .... import platform
    from ....platform import stand_ins

    if kind == "reference" or (kind == "auto" and platform.current().name != "npu"):
        return stand_ins.ge_executor(device, config, transport)
    from .cann import CannRuntime
    from .cann_options import cann_options

    if config is None:
        return CannRuntime()
    session, graph = cann_options(config, rank, world_size)
    return CannRuntime(session, graph)


__all__ = ["GeRuntime", "GeRuntimeError", "create_runtime"]
