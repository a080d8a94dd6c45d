"""GE executors behind one interface (:class:`~torchair_dist.platform.interfaces.GeRuntime`):
the CANN adapter on Ascend (lazily imported), and, where no CANN runtime exists, the stand-in
that :mod:`torchair_dist.cpu.stand_ins` picks (the CPU wing's reference executor)."""
from __future__ import annotations

from ....errors import GeRuntimeError
from ....platform.interfaces import GeRuntime


def create_runtime(kind: str = "auto", device=None, overlap: bool = True, transport=None,
                   options=None) -> GeRuntime:
    """``"reference"``, ``"cann"``, or ``"auto"``: CANN where the platform runs GE graphs
    itself (Ascend), else the stand-in executor on ``device`` (the device of the graph's
    inputs; CPU by default). The CANN runtime gets ``options``, its ``(session, graph)``
    options (the mode row's ``cann_*`` steps build them); the stand-in finishes a collective at
    its first reader with ``overlap`` (the ``ge_run`` stage passes
    ``distributed_config.overlap_collectives``), else right after it is issued, and exchanges
    through ``transport`` (the route's choice)."""
    from .... import platform
    from ....cpu import stand_ins

    if kind == "reference" or (kind == "auto" and not platform.current().runs_ge_natively):
        return stand_ins.ge_executor(device, overlap, transport)
    from .cann import CannRuntime

    session, graph = options if options is not None else ({}, {})
    return CannRuntime(session, graph)


__all__ = ["GeRuntime", "GeRuntimeError", "create_runtime"]
