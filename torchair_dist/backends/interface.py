"""The interface every backend implements (:class:`Backend`: start a build from a graph or from
a handle, finish it into a runner and a handle), the build its steps work on (:class:`Build`),
what it makes (:class:`Compiled`), and how the route's ``compile`` stage has a backend start
(or load) that build (:func:`start_build`).

The pipeline's stage table holds each mode's ``Backend`` object; the backends (``aclgraph``,
``ge``) subclass it. What a backend is handed, ``GraphContext``, is the ground floor's
(:mod:`torchair_dist.base.graph_context`), read by lower layers too.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, Optional

from ..base.graph_context import GraphContext, Runner
from ..errors import HandleMismatchError


@dataclasses.dataclass
class Build:
    """What a backend's steps work on, one graph's build: a backend subclasses it with the
    fields its steps fill in. ``ctx``: the graph as the compiler passed it (read only)."""

    ctx: GraphContext


@dataclasses.dataclass(frozen=True)
class Compiled:
    """One compiled graph: ``runner`` (boxed) and ``handle``, JSON data that the same backend's
    :meth:`Backend.load` takes back, with the graph, to make the runner again in another
    process (None: the runner is a debug runner, nothing to load)."""

    runner: Runner
    handle: Optional[Dict[str, Any]]


class Backend:
    """A mode's graph compiler, one instance per backend (``pipeline.MODE_TABLE``'s row holds it).

    The pipeline's route calls it, top to bottom, once per graph (vLLM's
    ``CompilerInterface`` shape: compile a graph into a runnable and a handle; load a handle)::

        build = backend.start(ctx)             # a fresh compile  | backend.load(handle, ctx)
        build = <the mode row's backend steps>(build)   # the stage table runs them
        compiled = backend.finish(build)       # Compiled(runner, handle)

    ``start(ctx)``: the :class:`Build` of a freshly traced and passed graph. ``load(handle,
    ctx)``: the build of a graph rebuilt from storage (``ctx.gm``: the rebuilt,
    shape-propagated graph) with the ``handle`` a ``finish`` wrote; by default the handle is
    checked (same backend, same :attr:`handle_format`) and the graph is built like a fresh
    one. ``finish(build)``: the runner and the handle. A backend never calls a step, never
    calls the pipeline back, and never writes ``ctx.gm``. The cross-rank check wraps the
    runner in the route (``route.build_runner``), for both paths alike.
    """

    name = "backend"
    #: what a handle of this backend stands for (the graph data is stored beside it)
    handle_format = "fx-graph"

    def start(self, ctx: GraphContext) -> Build:
        raise NotImplementedError(f"backend {self.name!r} does not compile graphs")

    def load(self, handle: Dict[str, Any], ctx: GraphContext) -> Build:
        if handle.get("backend") != self.name or handle.get("format") != self.handle_format:
            raise HandleMismatchError(
                f"backend {self.name!r} ({self.handle_format}) cannot load a handle of "
                f"{handle.get('backend')!r} ({handle.get('format')})")
        return self.start(ctx)

    def finish(self, build: Build) -> Compiled:
        raise NotImplementedError(f"backend {self.name!r} does not compile graphs")

    def steps_context(self):
        """The context the route runs this backend's steps in (default: none)."""
        return contextlib.nullcontext()

    def handle(self, build: Build) -> Dict[str, Any]:
        """The JSON handle of ``build`` (what :meth:`load` checks)."""
        return {"backend": self.name, "format": self.handle_format}

    def __repr__(self) -> str:
        return f"<torchair_dist backend {self.name}>"


def start_build(ctx: GraphContext, backend: Backend) -> Build:
    """What the route's ``compile`` stage does with the mode's ``backend``: start the build of
    ``ctx``'s graph or, for a graph the compile cache rebuilt, load it from the handle it was
    stored with. The row's ``backend`` stages, the backend's steps, follow
    (``pipeline.route.build_runner``)."""
    if ctx.handle is not None:
        return backend.load(ctx.handle, ctx)
    return backend.start(ctx)
