"""The one place that picks what stands in for a device: each seam of
:mod:`torchair_dist.platform.interfaces` answered for this process's platform.

On an Ascend NPU or an NVIDIA GPU the device's own implementations run and nothing here is
used; on CPU the CPU wing (this package) answers: a capture stand-in for the ACL modes, the
shared-memory exchange for a host's collectives, and the GE reference executor. This module is
the wing's one door: code outside ``torchair_dist/cpu`` imports it and nothing else of the wing,
and ``platform/`` imports nothing of the wing.
"""
from __future__ import annotations

from typing import Optional

from ..platform import current, for_device, platforms_with as _platforms_with
from ..platform.interfaces import CaptureFactory, CollectiveTransport, GeRuntime


def capture_mode() -> str:
    """The CPU capture stand-in (``TORCHAIR_DIST_CPU_CAPTURE``: record | emulate | off)."""
    from .capture import cpu_capture_mode

    return cpu_capture_mode()


def platforms_with(capability: str) -> frozenset:
    """``platform.platforms_with`` less the CPU where its stand-in for ``capability`` is
    switched off (``capture`` with ``TORCHAIR_DIST_CPU_CAPTURE=off``): what the stage table
    asks."""
    found = _platforms_with(capability)
    if capability == "capture" and capture_mode() == "off":
        return found - {"cpu"}
    return found


def capture_factory(device_type: str, gm, graph_name: str, share_pool: bool,
                    opaque_forward: bool = False, pool=None) -> Optional[CaptureFactory]:
    """For a graph whose inputs live on ``device_type`` without a device graph class: the CPU
    capture stand-in's factory, or None (``off``: the forward runs directly); ``pool``: the
    ``pool`` of another graph's factory to join."""
    if for_device(device_type).has_graph_capture:
        raise ValueError(f"{device_type} captures device graphs; no stand-in is needed")
    from .capture import capture_factory as cpu_factory

    return cpu_factory(gm, graph_name, share_pool, opaque_forward, pool)


_DEVICE_TRANSPORT = CollectiveTransport()


def collective_transport() -> CollectiveTransport:
    """How this process's compiled runners can exchange besides the graph's own collectives:
    on CPU, the shared-memory transport; elsewhere the graph's own."""
    if not current().uses_stand_ins:
        return _DEVICE_TRANSPORT
    from .transport import SHARED_MEMORY

    return SHARED_MEMORY


def transport_stage(ctx):
    """The ``shm_collectives`` stage of the route (it runs on CPU when
    ``distributed_config.cpu_shm_collectives`` is on): the graph's runner exchanges through
    this host's transport; each backend takes it from ``ctx.transport``."""
    import dataclasses

    return dataclasses.replace(ctx, transport=collective_transport())


def ge_executor(device=None, overlap: bool = True,
                transport: Optional[CollectiveTransport] = None) -> GeRuntime:
    """The GE executor where no CANN runtime exists: the reference executor on ``device``;
    ``overlap``: a collective finishes at its first reader (False: right after it is issued);
    ``transport``: the route's collective transport (None: the graph's own collectives)."""
    from .ge_reference import ReferenceRuntime

    shm = transport is not None and transport.for_ge_executor()
    return ReferenceRuntime(device, overlap=overlap, shm=shm)
