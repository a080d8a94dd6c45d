"""The platform layer: Ascend NPU, NVIDIA GPU or CPU.

Everything device-specific the rest of the library needs comes from :func:`current`, an instance
of one :class:`Platform` class per kind of device: the device type, the process-group backend,
the graph-capture class, the stream/event classes, and the capabilities as methods and
properties (callers ask ``current().runs_ge_natively``, never compare its name). ``torch_npu``
is imported lazily, only when asked for; when it is missing or broken the library still
imports, and :func:`npu_status` says why NPU is off.

The choice is made on first use and kept until ``torch._dynamo.reset()`` (after a compile with
our backend), which makes the next :func:`current` choose again: a changed
``TORCHAIR_DIST_PLATFORM`` takes effect from there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from typing import Any, Callable, Optional

import torch

from ..base.util import on_dynamo_reset

log = logging.getLogger("torchair_dist")


@dataclasses.dataclass(frozen=True)
class Platform:
    """What one kind of device offers the library (the defaults: an accelerator with its own
    ``torch.<device_type>`` module and device graphs)."""

    name: str                    # "npu" | "cuda" | "cpu": the stage table's platform key
    device_type: str             # torch device type
    dist_backend: str            # "hccl" | "nccl" | "gloo"
    graph_class: Optional[Any]   # device graph capture class, None on CPU
    stream_class: Optional[Any]
    event_class: Optional[Any]

    @property
    def has_graph_capture(self) -> bool:
        return self.graph_class is not None

    #: compute runs on the host's cores (ranks on one host share them)
    runs_on_host = False
    #: CANN runs GE graphs here (Ascend): GE IR is handed to it, with the HCCL communicator
    #: names and Ascend-only op attributes; elsewhere the reference executor stands in
    runs_ge_natively = False
    #: what the CPU wing (:mod:`torchair_dist.cpu.stand_ins`) stands in for: capture, transport, GE execution
    uses_stand_ins = False

    def device(self, local_rank: int = 0) -> torch.device:
        return torch.device(self.device_type, local_rank)

    def set_device(self, local_rank: int) -> None:
        getattr(torch, self.device_type).set_device(local_rank)

    def graph_context(self, graph, pool=None, stream=None, capture_error_mode=None):
        """The capture context manager: ``torch.npu.graph`` on NPU; on CUDA
        :func:`_own_cuda_capture` (independent of the process's other capturers)."""
        if self.device_type == "cuda":
            return _own_cuda_capture(graph, pool, stream, capture_error_mode or "global")
        module = getattr(torch, self.device_type)
        if capture_error_mode is None:
            return module.graph(graph, pool=pool, stream=stream)
        return module.graph(graph, pool=pool, stream=stream,
                            capture_error_mode=capture_error_mode)

    def graph_pool_handle(self):
        return getattr(torch, self.device_type).graph_pool_handle()

    def synchronize(self) -> None:
        getattr(torch, self.device_type).synchronize()

    def vendor_function(self, name: str) -> Optional[Callable]:
        """The device vendor's Python kernel ``name`` (``torch_npu.<name>``), None where the
        platform has none."""
        return None

    def vendor_op(self, name: str) -> Optional[Any]:
        """The vendor's registered op ``torch.ops.npu.<name>.default``, None where absent."""
        return None

    def install_determinism_guard(self) -> bool:
        """Install the vendor's deterministic-level guard (recompile when
        ``torch.use_deterministic_algorithms`` changes); False where there is none."""
        return False


class NpuPlatform(Platform):
    """Ascend NPU through torch_npu: CANN runs GE graphs, torch_npu's kernels exist."""

    runs_ge_natively = True

    def vendor_function(self, name: str) -> Optional[Callable]:
        import torch_npu

        return getattr(torch_npu, name, None)

    def vendor_op(self, name: str) -> Optional[Any]:
        try:
            return getattr(torch.ops.npu, name).default
        except (AttributeError, RuntimeError):
            return None

    def install_determinism_guard(self) -> bool:
        try:
            from torch_npu.dynamo._deterministic_guard import \
                install_npu_deterministic_level_guard
        except ImportError:
            return False
        install_npu_deterministic_level_guard()
        return True


class CpuPlatform(Platform):
    """The host itself: one device, no device graphs or streams; the CPU wing stands in."""

    runs_on_host = True
    uses_stand_ins = True

    def device(self, local_rank: int = 0) -> torch.device:
        return torch.device("cpu")

    def set_device(self, local_rank: int) -> None:
        pass

    def synchronize(self) -> None:
        pass


@contextlib.contextmanager
def _own_cuda_capture(graph, pool, stream, capture_error_mode: str):
    """Capture ``graph`` on ``stream`` into ``pool`` (None: a private pool of its own) without
    touching what other capturers in the process rely on.

    * cuBLAS keeps a workspace per (handle, stream), made on first use outside any pool. A
      graph captured on a stream whose workspace already exists records that workspace's
      address, memory it does not own: torch's CUDA graph trees (inductor reduce-overhead,
      the ``cudagraphs`` backend) clear every workspace when they record, and the next
      ``empty_cache`` returns it to the driver, so the earlier graph's replay reads and writes
      freed memory ("illegal memory access"). The workspaces are cleared here, before
      ``capture_begin``, so the one this capture uses is allocated inside its own pool, which
      lives as long as the graph (what CUDA graph trees do for theirs).
    * ``torch.cuda.graph``'s ``empty_cache`` on entry is left out: releasing cached blocks
      to the driver turns another capturer's stale pointer into a crash and frees nothing
      this capture needs.
    """
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()
    with torch.cuda.stream(stream):
        if pool is None:
            graph.capture_begin(capture_error_mode=capture_error_mode)
        else:
            graph.capture_begin(pool, capture_error_mode=capture_error_mode)
        try:
            yield
        finally:
            graph.capture_end()


_NPU_STATUS = {"reason": "not probed yet"}


def npu_status() -> str:
    """Why NPU support is on or off, in one line (probes torch_npu on first use)."""
    _probe_npu()
    return _NPU_STATUS["reason"]


@functools.lru_cache(maxsize=None)
def _probe_npu() -> bool:
    from ..base.envvars import env_flag

    if env_flag("TORCHAIR_DIST_DISABLE_NPU"):
        _NPU_STATUS["reason"] = "NPU disabled by TORCHAIR_DIST_DISABLE_NPU=1"
        return False
    try:
        import torch_npu  # noqa: F401  (lazy: needs the CANN toolkit)
    except ImportError:
        _NPU_STATUS["reason"] = "torch_npu is not installed (pip install torchair-dist[npu])"
        return False
    except Exception as exc:  # broken install, e.g. CANN toolkit missing
        _NPU_STATUS["reason"] = f"torch_npu is installed but failed to import: {exc}"
        log.warning("NPU support off: %s", _NPU_STATUS["reason"])
        return False
    if not (hasattr(torch, "npu") and torch.npu.is_available()):
        _NPU_STATUS["reason"] = "torch_npu imported but no NPU device is visible"
        return False
    _NPU_STATUS["reason"] = f"NPU available ({torch.npu.device_count()} devices)"
    return True


def _npu() -> Platform:
    npu = torch.npu
    return NpuPlatform("npu", "npu", "hccl", npu.NPUGraph, npu.Stream, npu.Event)


def _cuda() -> Platform:
    cuda = torch.cuda
    return Platform("cuda", "cuda", "nccl", cuda.CUDAGraph, cuda.Stream, cuda.Event)


def _cpu() -> Platform:
    return CpuPlatform("cpu", "cpu", "gloo", None, None, None)


_BY_NAME = {"npu": _npu, "cuda": _cuda, "cpu": _cpu}

# What each platform offers the pipeline: a stage of the table names the capability it needs
# (``Stage.needs``) and this answers where it runs; class-level facts, no device is probed.
#   vendor_kernels: torch_npu's fused kernels exist; cann: CANN runs GE graphs and takes its
#   options; device_graphs: NPU/CUDA graph capture; capture: graphs are captured (a device's,
#   or on CPU the stand-in unless TORCHAIR_DIST_CPU_CAPTURE=off); host_shared_memory: a host's
#   ranks can exchange through shared memory; inductor_kernels: inductor generates kernels.
_CAPABILITIES = {
    "npu": frozenset({"vendor_kernels", "cann", "device_graphs", "capture"}),
    "cuda": frozenset({"device_graphs", "capture", "inductor_kernels"}),
    "cpu": frozenset({"host_shared_memory", "inductor_kernels", "capture"}),
}
CAPABILITIES = frozenset().union(*_CAPABILITIES.values())


def platforms_with(capability: str) -> frozenset:
    """The platform names (``npu``/``cuda``/``cpu``) that have ``capability`` (what a stand-in
    can be switched off for: :func:`torchair_dist.cpu.stand_ins.platforms_with`)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown platform capability {capability!r}; one of "
                         f"{sorted(CAPABILITIES)}")
    return frozenset(name for name, caps in _CAPABILITIES.items() if capability in caps)


def has(platform_name: str, capability: str) -> bool:
    """Whether the platform named ``platform_name`` has ``capability``."""
    return platform_name in platforms_with(capability)


@functools.lru_cache(maxsize=None)
def current() -> Platform:
    """The platform of this process: NPU if usable, else CUDA if available, else CPU.

    ``TORCHAIR_DIST_PLATFORM=npu|cuda|cpu`` forces one (e.g. CPU on a GPU host). Chosen on
    first use and kept until ``torch._dynamo.reset()``, which makes the next call choose again.
    """
    from ..base.envvars import env_choice

    forced = env_choice("TORCHAIR_DIST_PLATFORM", sorted(_BY_NAME))
    if forced:
        return _BY_NAME[forced]()
    if _probe_npu():
        return _npu()
    if torch.cuda.is_available():
        return _cuda()
    return _cpu()


on_dynamo_reset(current.cache_clear)  # the next current() reads TORCHAIR_DIST_PLATFORM again


def for_device(device_type: str) -> Platform:
    """The platform that owns tensors of ``device_type`` (used for a graph's inputs)."""
    if device_type == "npu" and _probe_npu():
        return _npu()
    if device_type == "cuda" and torch.cuda.is_available():
        return _cuda()
    return _cpu()
