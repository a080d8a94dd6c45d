"""The three seams between device code and the CPU wing (:mod:`torchair_dist.cpu`).

Device code (``backends/``) is written against these interfaces only; what implements them on
a device lives beside that code (``backends/aclgraph/capture.py``'s ``DeviceGraph``, the CANN
runtime, NCCL/HCCL through ``torch.distributed``), and what stands in for a device on CPU lives
in ``torchair_dist/cpu/``. :mod:`.stand_ins` is the one place that picks a stand-in.

* :class:`CaptureGraph`: one captured graph of the ACL modes (capture once, replay);
* :class:`CollectiveTransport`: how a compiled runner's collectives travel (on a device the
  graph's own collectives; on one CPU host, optionally a shared-memory exchange);
* :class:`GeRuntime`: an executor of one serialized GE graph (CANN, or the reference executor).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, List, Optional, Sequence


@dataclasses.dataclass
class Uncapturable:
    """Why a graph cannot be captured: the op, what it needs, and where the user wrote it."""

    op: str
    why: str
    where: str


class CaptureSkipped(Exception):
    """Raised inside a capture when the graph breaks a device-graph rule (caught by the
    runner, which then runs the graph uncaptured)."""

    def __init__(self, found: Uncapturable):
        super().__init__(f"{found.op}: {found.why}")
        self.found = found


class CaptureGraph(abc.ABC):
    """One captured graph: ``capture(fn, inputs)`` runs/records ``fn`` on ``inputs`` (the
    static buffers) and returns this call's outputs; :attr:`outputs` are the captured output
    buffers that every :meth:`replay` overwrites.

    The class attributes say what the runner may rely on; a device graph keeps the defaults.
    """

    #: capture really executes ``fn`` (a stand-in can stop half way with ``CaptureSkipped``,
    #: so the runner saves mutated inputs to restore them).
    executes_capture: bool = False
    #: ``run(inputs)`` replays reading the copied inputs where the caller holds them (no copy
    #: into the static buffers); ``False``: the runner copies them and calls :meth:`replay`.
    reads_caller_inputs: bool = False

    outputs: Sequence[Any] = ()

    def feed(self, indices: Optional[Sequence[int]]) -> None:
        """The input positions the runner copies into the static buffers before each replay
        (told before :meth:`capture`). A device graph reads its buffers and ignores this."""

    @abc.abstractmethod
    def capture(self, fn: Callable, inputs: List[Any]) -> Sequence[Any]:
        ...

    @abc.abstractmethod
    def replay(self, inputs: Optional[List[Any]] = None) -> None:
        """Recompute into :attr:`outputs`. ``inputs`` (only when :attr:`reads_caller_inputs`):
        the caller's inputs, read at the fed positions instead of the static buffers."""

    #: :meth:`pool_bytes` is what this capture *added* to a pool shared with earlier ones (a
    #: device allocator's reserve), not the capture's own footprint (the CPU model's).
    pool_bytes_incremental: bool = False

    def pool_bytes(self) -> Optional[int]:
        """The bytes this graph takes in its memory pool (None: not measured)."""
        return None

    def replay_sole(self, inputs: List[Any]) -> None:
        """:meth:`replay` from ``inputs`` for a capture that is alone in its memory pool (a
        stand-in may skip the pool's bookkeeping)."""
        self.replay(inputs)


class CollectiveTransport:
    """How a compiled runner's collectives travel, chosen by the route's ``shm_collectives``
    stage (``GraphContext.transport``). The default (every device) leaves the graph as the
    compiler made it: its collectives run on the process group (HCCL, NCCL, gloo)."""

    name = "process-group"

    def for_runner(self, ctx, functional: bool = False):
        """``ctx`` itself, or a copy whose graph sends some collectives another way (the
        original graph stays what the cross-rank check, the cache and export see).
        ``functional``: in-place collectives must become functional (inductor compiles it)."""
        return ctx

    def for_ge_executor(self) -> bool:
        """Whether a GE executor on this host exchanges through this transport."""
        return False


class GeRuntime(abc.ABC):
    """Loads one serialized GE ``ModelDef`` and runs it.

    ``load(model_bytes)`` is called once; ``run(inputs)`` takes one tensor per ``Data`` op (in
    ``index`` order; symbolic sizes as shape-[] int64 tensors) and returns one tensor per
    ``NetOutput`` input, in order.
    """

    name = "abstract"

    @abc.abstractmethod
    def load(self, model_bytes: bytes) -> None:
        ...

    @abc.abstractmethod
    def run(self, inputs: Sequence[Any]) -> List[Any]:
        ...


class CaptureFactory:
    """Makes the :class:`CaptureGraph` objects of one runner; ``shared_pool``: the graphs it
    makes share one memory pool (a replay may overwrite another capture's outputs); ``pool``:
    that pool where a factory of another graph can join it (a stand-in's; None: none to
    join)."""

    def __init__(self, make: Callable[[], CaptureGraph], shared_pool: bool, pool: Any = None):
        self.make = make
        self.shared_pool = shared_pool
        self.pool = pool

    def __call__(self) -> CaptureGraph:
        return self.make()
