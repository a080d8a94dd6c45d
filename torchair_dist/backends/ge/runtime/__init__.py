"""GE runtimes behind one interface (:class:`GeRuntime`): the reference executor (CPU/GPU, torch
kernels, generated straight-line code) and the CANN adapter (Ascend, lazily imported)."""
from __future__ import annotations

from .base import GeRuntime
from .opspec import GeRuntimeError
from .reference import ReferenceRuntime


def create_runtime(kind: str = "auto", device=None, config=None, rank: int = 0,
                   world_size: int = 1) -> GeRuntime:
    """``"reference"``, ``"cann"``, or ``"auto"``: CANN on an Ascend host, else the reference
    executor on ``device`` (the device of the graph's inputs; CPU by default). The CANN runtime
    gets the session/graph options of ``config`` (:func:`cann_options.cann_options`); the
    reference executor reads ``distributed_config.overlap_collectives`` (off: every collective
    is finished right after it is issued) and, on a CPU host,
    ``distributed_config.cpu_shm_collectives``."""
    from .... import platform

    if kind == "reference" or (kind == "auto" and platform.current().name != "npu"):
        overlap = config is None or bool(config.get("distributed_config.overlap_collectives"))
        shm = (config is not None and platform.current().name == "cpu"
               and bool(config.get("distributed_config.cpu_shm_collectives")))
        return ReferenceRuntime(device, overlap=overlap, shm=shm)
    from .cann import CannRuntime
    from .cann_options import cann_options

    if config is None:
        return CannRuntime()
    session, graph = cann_options(config, rank, world_size)
    return CannRuntime(session, graph)


__all__ = ["GeRuntime", "GeRuntimeError", "ReferenceRuntime", "create_runtime"]
