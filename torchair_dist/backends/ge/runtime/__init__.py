"""GE runtimes behind one interface (:class:`GeRuntime`): the reference executor (CPU/GPU, torch
kernels, generated straight-line code) and the CANN adapter (Ascend, lazily imported)."""
from __future__ import annotations

from .base import GeRuntime
from .opspec import GeRuntimeError
from .reference import ReferenceRuntime


def create_runtime(kind: str = "auto", device=None) -> GeRuntime:
    """``"reference"``, ``"cann"``, or ``"auto"``: CANN on an Ascend host, else the reference
    executor on ``device`` (the device of the graph's inputs; CPU by default)."""
    if kind == "reference":
        return ReferenceRuntime(device)
    from .cann import CannRuntime

    if kind == "cann":
        return CannRuntime()
    from .... import platform

    return CannRuntime() if platform.current().name == "npu" else ReferenceRuntime(device)


__all__ = ["GeRuntime", "GeRuntimeError", "ReferenceRuntime", "create_runtime"]
