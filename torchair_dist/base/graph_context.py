"""What the compiler hands a backend: one AOT forward graph and everything known about it
(:class:`GraphContext`), and the runner convention (boxed runners). The interface every backend
implements lives with the backends (:mod:`torchair_dist.backends.interface`).

A ground-floor module (it imports nothing of torchair_dist but ``util``): the
collectives' cross-rank check and the cache read ``GraphContext`` too.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from .util import current_rank_and_world  # noqa: F401 - re-exported


@dataclasses.dataclass
class GraphContext:
    """What every backend gets: one graph and what is known about it. Data only.

    Attributes:
        gm: the AOT (functionalized, aten-level) forward graph after the AOT-pass stages: the
            graph at the pipeline's observation point (``pipeline.stages.OBSERVATION_POINT``).
            Every observer (``record_graphs``, the compile cache, the cross-rank check, dumps)
            reads it and no backend changes it: a backend that rewrites a graph rewrites its
            own copy (:func:`own_copy`).
        example_inputs: fake or real example inputs, one per placeholder, in order.
        config: the ``CompilerConfig`` of this compile (a private copy: backends may read it,
            never write it).
        static_input_indices: placeholders that are parameters or buffers (never copied).
        mutated_input_indices: placeholders the graph writes in place (``copy_`` into an input).
        graph_name: a name unique within the process, stable for one program
            (``graph_<n>``), used in dumps.
        rank / world_size: of the default process group, 0 / 1 without one.
        is_inference: True for an inference (no-grad) graph, False for a training forward.
        original_gm: the graph before the AOT passes (kept only when the ``keep_original``
            stage ran: ``dump_config.data_dump_stage="original"``).
        handle: the backend handle the graph was stored with (a compile-cache entry's); None
            for a fresh compile. The route's ``compile`` stage then loads instead of compiling.
        transport: how the runner's collectives travel (a
            ``platform.interfaces.CollectiveTransport``; None: the graph's own collectives),
            chosen by the route's ``shm_collectives`` stage.
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
    handle: Optional[Dict[str, Any]] = None
    transport: Any = None


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


def eager_stage(ctx: GraphContext) -> Runner:
    """The ``run_eagerly`` stage of the route (and a summary's ``skip_compile``): the FX graph
    runs as it is, instead of the backend."""
    return eager_runner(ctx.gm)


def own_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` a backend may rewrite (lower, decompose, hand to inductor) without the
    observers of ``GraphContext.gm`` seeing it: new nodes (same names, meta dicts copied
    shallowly), the same attribute values (constants are shared, never written)."""
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
        env[node].name = node.name
    copied = torch.fx.GraphModule(gm, graph, gm.__class__.__name__)
    copied.meta = dict(getattr(gm, "meta", {}))
    return copied
