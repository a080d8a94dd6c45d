"""The three seams between device code and the CPU wing (:mod:`torchair_dist.cpu`).

Device code (``backends/``) is written against these interfaces only; what implements them on
a device lives beside that code (``backends/aclgraph/capture.py``'s ``DeviceGraph``, the CANN
runtime, NCCL/HCCL through ``torch.distributed``), and what stands in for a device on CPU lives
in ``torchair_dist/cpu/``. :mod:`torchair_dist.cpu.stand_ins` is the one place that picks one.

* :class:`CaptureGraph`: one captured graph of the ACL modes (capture once, replay);
* :class:`CollectiveTransport`: how a compiled runner's collectives travel (on a device the
  graph's own collectives; on one CPU host, optionally a shared-memory exchange);
* :class:`GeRuntime`: an executor of one serialized GE graph (CANN, or the reference executor).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple


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


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity (Dynamo hashes callables)
class InputFeed:
    """How a replay's caller inputs reach the buffers a graph was captured on (the runner's
    input policy, handed to :meth:`CaptureGraph.capture`).

    ``buffers``: the captured inputs (every position; parameters and mutated inputs are the
    caller's own tensors); ``copied``: positions copied whole before each replay;
    ``narrowed``: (position, part) for an input whose buffer is an expanded view: only
    ``part(tensor)`` (its written part) is copied; ``always``: copy on every call (the buffers
    are the runner's own, ``clone_input``), else only an input that arrives at another address
    than its buffer; ``private``: the buffers are the runner's own, so no caller can see them:
    a graph that can read the caller's tensors in place of them may."""

    buffers: Sequence[Any]
    copied: Tuple[int, ...] = ()
    narrowed: Tuple[Tuple[int, Callable[[Any], Any]], ...] = ()
    always: bool = True
    private: bool = True

    @classmethod
    def of_all(cls, buffers: Sequence[Any]) -> "InputFeed":
        """Every tensor position fed (a graph captured outside a runner, as tests do)."""
        import torch

        return cls(buffers, tuple(i for i, x in enumerate(buffers)
                                  if isinstance(x, torch.Tensor)))

    @property
    def positions(self) -> Tuple[int, ...]:
        """Every position the feed copies."""
        return self.copied + tuple(i for i, _ in self.narrowed)

    def __call__(self, args: Sequence[Any]) -> None:
        """Copy ``args`` into the captured buffers (grad mode as the caller has it: off)."""
        buffers = self.buffers
        if self.always:
            for i in self.copied:
                buffers[i].copy_(args[i])
        else:
            for i in self.copied:
                if args[i].data_ptr() != buffers[i].data_ptr():
                    buffers[i].copy_(args[i])
        for i, part in self.narrowed:
            part(buffers[i]).copy_(part(args[i]))


class CaptureGraph(abc.ABC):
    """One captured graph: ``capture(fn, inputs, feed)`` runs or records ``fn`` on ``inputs``
    (the captured buffers) and returns this call's outputs; :attr:`outputs` are the captured
    output buffers that every :meth:`replay` overwrites.

    What the runner relies on is the same for a device graph and a CPU stand-in: a capture
    leaves the inputs as one run of ``fn`` leaves them (also when it stops with
    :class:`CaptureSkipped`: a stand-in that really runs the graph undoes its input writes);
    ``replay(args)`` makes the outputs those of ``fn(args)`` (feeding the inputs as ``feed``
    says), with grad mode off whatever the caller's (nothing it does is recorded by autograd);
    :meth:`pool_bytes` is what the capture added to its memory pool."""

    outputs: Sequence[Any] = ()

    @abc.abstractmethod
    def capture(self, fn: Callable, inputs: List[Any], feed: InputFeed) -> Sequence[Any]:
        ...

    @abc.abstractmethod
    def replay(self, args: Sequence[Any]) -> None:
        """Recompute into :attr:`outputs` for the caller's inputs ``args``."""

    def pool_bytes(self) -> Optional[int]:
        """The bytes this capture added to its memory pool (a pool shared with earlier
        captures: only what they did not already hold; None: not measured)."""
        return None


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
    that pool, where the factories of other graphs join it (``aclgraph_config.pool_scope``;
    None: none to join)."""

    def __init__(self, make: Callable[[], CaptureGraph], shared_pool: bool, pool: Any = None):
        self.make = make
        self.shared_pool = shared_pool
        self.pool = pool

    def __call__(self) -> CaptureGraph:
        return self.make()
