"""What the compiler hands a backend: one AOT forward graph and everything known about it.

A ground-floor module (it imports nothing of torchair_dist but ``util``): the collectives'
cross-rank check and the cache read ``GraphContext`` too.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Sequence

import torch

from .util import current_rank_and_world  # noqa: F401 - re-exported


@dataclasses.dataclass
class GraphContext:
    """What every backend's ``compile``/``load`` gets: one graph and what is known about it.

    Attributes:
        gm: the AOT (functionalized, aten-level) forward graph after the common passes.
        example_inputs: fake or real example inputs, one per placeholder, in order.
        config: the ``CompilerConfig`` of this compile (a private copy: backends may read it,
            never write it).
        static_input_indices: placeholders that are parameters or buffers (never copied).
        mutated_input_indices: placeholders the graph writes in place (``copy_`` into an input).
        graph_name: a name unique within the process, stable for one program
            (``graph_<n>``), used in dumps.
        rank / world_size: of the default process group, 0 / 1 without one.
        is_inference: True for an inference (no-grad) graph, False for a training forward.
        original_gm: the graph before the AOT passes (kept only for
            ``dump_config.data_dump_stage="original"``).
        cache_entry: the compile-cache entry the graph was rebuilt from (None: a fresh compile;
            the route's last stage then loads instead of compiling).
        transport: how the runner's collectives travel (a
            ``platform.interfaces.CollectiveTransport``; None: the graph's own collectives).
        run_steps: the route's runner of the mode row's ``backend`` stages
            (``build -> build``; set by the ``compile`` stage, None elsewhere).
    """

    gm: torch.fx.GraphModule
    example_inputs: Sequence[Any]
    config: Any
    static_input_indices: List[int]
    mutated_input_indices: List[int]
    graph_name: str
    rank: int = 0
    world_size: int = 1
    is_inference: bool = True
    original_gm: Any = None
    cache_entry: Any = None
    transport: Any = None
    run_steps: Any = None


# A runner takes the flat list of graph inputs ("boxed": the list may be cleared by the
# callee) and returns the list/tuple of graph outputs. Backends set ``runner._boxed_call = True``.
Runner = Callable[[List[Any]], Sequence[Any]]


def boxed(fn: Callable[..., Any]) -> Runner:
    """Mark ``fn(args_list)`` as using AOT autograd's boxed calling convention."""
    fn._boxed_call = True  # type: ignore[attr-defined]
    return fn


def eager_runner(gm: torch.fx.GraphModule) -> Runner:
    """A boxed runner that runs the FX graph itself (``debug.run_eagerly`` and friends)."""
    def run(args):
        return gm(*args)
    return boxed(run)


class Backend:
    """A mode's graph compiler, one instance per backend (``pipeline.MODE_TABLE`` names it).

    ``compile(ctx)``: the runner of a freshly traced and passed graph: the backend starts a
    build and hands it to :meth:`run_steps`, which runs the mode row's ``backend`` stages (the
    pipeline's one rule: row order, gate, platforms); the backend never calls a step itself.
    ``load(entry, ctx)``: the runner of a graph the compile cache rebuilt from ``entry`` (the
    stored entry data; ``ctx.gm`` is the rebuilt, shape-propagated graph). By default a loaded
    graph is compiled like a fresh one; a backend whose entries hold more than the graph
    overrides it. Neither applies the cross-rank check: the compiler wraps both paths' runners
    in one place (``compiler.build_runner``).
    """

    name = "backend"

    def compile(self, ctx: GraphContext) -> Runner:
        raise NotImplementedError(f"backend {self.name!r} does not compile graphs")

    def load(self, entry: Any, ctx: GraphContext) -> Runner:
        return self.compile(ctx)

    def run_steps(self, ctx: GraphContext, build: Any) -> Any:
        """``build`` after the mode row's backend steps (``ctx.run_steps``, the route's)."""
        if ctx.run_steps is None:
            raise RuntimeError(f"backend {self.name!r}: compile(ctx) outside the pipeline's "
                               f"route (ctx.run_steps is not set; the compile stage sets it)")
        return ctx.run_steps(build)

    def __repr__(self) -> str:
        return f"<torchair_dist backend {self.name}>"
