"""The CPU wing's collective transport: a :class:`CollectiveTransport` that sends a runner's
all_reduce / equal-piece all_to_all through shared memory between the ranks of one host (the
route's ``shm_collectives`` stage picks it when ``distributed_config.cpu_shm_collectives`` is
on; :mod:`.shm_graph` rewrites the runner's copy of the graph; the GE reference executor's
Hcom kernels call :mod:`.shm` directly)."""
from __future__ import annotations

from ..platform.interfaces import CollectiveTransport


class SharedMemoryTransport(CollectiveTransport):
    name = "shared-memory"

    def for_runner(self, ctx, functional: bool = False):
        from . import shm_graph

        return shm_graph.for_runner(ctx, functional)

    def for_ge_executor(self) -> bool:
        return True


SHARED_MEMORY = SharedMemoryTransport()
