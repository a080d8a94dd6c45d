"""The per-rank graph compiler: common passes, validation, mode dispatch, cross-rank check."""
from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from .backends.context import GraphContext, current_rank_and_world
from .collectives import consistency
from .configs import CompilerConfig
from .debug import data_dump_runner
from .errors import BackendUnavailableError, UnsupportedModeError
from .passes.common import run_common_passes
from .passes.graph_info import mutated_input_indices
from .passes.overlap import schedule_overlap
from .passes.reinplace import reinplace_collectives
from .passes.validate import validate_graph

log = logging.getLogger("torchair_dist")

# mode -> module exposing compile_graph(ctx). The ONE dispatch table.
MODE_BACKENDS: Dict[str, str] = {
    "max-autotune": "torchair_dist.backends.ge",
    "reduce-overhead": "torchair_dist.backends.aclgraph",
    "npugraph_ex": "torchair_dist.backends.aclgraph",
}

# mode -> passes run after the common passes, only in that mode. The pass list per mode.
MODE_PASSES: Dict[str, List[Callable]] = {
    "max-autotune": [],
    "reduce-overhead": [schedule_overlap, reinplace_collectives],
    "npugraph_ex": [schedule_overlap, reinplace_collectives],
}

_graph_ids = itertools.count()
_observers: List[List[GraphContext]] = []


@contextlib.contextmanager
def record_graphs():
    """Collect the ``GraphContext`` of every graph compiled inside the block (tests, debugging).

    ``ctx.gm`` is the graph after the common and mode passes, as the backend received it::

        with record_graphs() as graphs:
            compiled(x)
        assert len(graphs) == 1 and "_c10d_functional.all_reduce.default" in op_targets(graphs[0].gm)
    """
    seen: List[GraphContext] = []
    _observers.append(seen)
    try:
        yield seen
    finally:
        _observers.remove(seen)


def backend_for_mode(mode: str):
    """The ``compile_graph`` function of the backend that serves ``mode``."""
    if mode not in MODE_BACKENDS:
        raise UnsupportedModeError(f"Unsupported npu backend mode: {mode}; expected one of "
                                   f"{sorted(MODE_BACKENDS)}")
    module = importlib.import_module(MODE_BACKENDS[mode])
    compile_graph = getattr(module, "compile_graph", None)
    if compile_graph is None:
        raise BackendUnavailableError(
            f"mode {mode!r} needs {MODE_BACKENDS[mode]}.compile_graph, which this build lacks; "
            f"use mode='npugraph_ex'")
    if mode not in INDUCTOR_KERNEL_MODES:
        return compile_graph
    return functools.partial(_with_inductor_kernels, compile_graph)


# modes whose graphs inductor may generate kernels for (experimental_config.inductor_kernels)
INDUCTOR_KERNEL_MODES = ("reduce-overhead", "npugraph_ex")


def _with_inductor_kernels(compile_graph, ctx: GraphContext):
    from .backends import inductor_kernels

    if inductor_kernels.enabled_for(ctx):
        return inductor_kernels.compile_graph(ctx)
    return compile_graph(ctx)


def _static_indices(example_inputs: Sequence[Any]) -> List[int]:
    """Parameters/buffers among the graph inputs, from AOT's metadata when it has it."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is not None and getattr(meta, "static_input_indices", None) is not None:
        return list(meta.static_input_indices)
    return [i for i, x in enumerate(example_inputs) if isinstance(x, torch.nn.Parameter)]


class NpuFxCompiler:
    """Compiles AOT graphs for one config; used as AOT's forward/inference/backward compiler."""

    def __init__(self, config: CompilerConfig):
        self.config = config
        self.compiled: List[GraphContext] = []  # every graph this compiler saw (debug/tests)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs, is_inference: bool = True):
        cfg = self.config
        static = _static_indices(example_inputs)
        gm = run_common_passes(gm, example_inputs, cfg)
        for mode_pass in MODE_PASSES.get(cfg.mode.raw, ()):
            gm = mode_pass(gm, example_inputs, cfg)
        validate_graph(gm)
        rank, world = current_rank_and_world()
        ctx = GraphContext(gm=gm, example_inputs=list(example_inputs), config=cfg,
                           static_input_indices=static,
                           mutated_input_indices=mutated_input_indices(gm),
                           graph_name=f"graph_{next(_graph_ids)}", rank=rank, world_size=world,
                           is_inference=is_inference)
        self.compiled.append(ctx)
        for seen in _observers:
            seen.append(ctx)
        if cfg.debug.data_dump.type.raw is not None:
            runner = data_dump_runner(gm, cfg, ctx.graph_name, rank)
        elif cfg.debug.run_eagerly.raw:
            runner = _eager_runner(gm)
        else:
            runner = backend_for_mode(cfg.mode.raw)(ctx)
        return consistency.guard_first_run(runner, ctx)

    def inference(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=True)

    def forward(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=False)

    def backward(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=False)


def _eager_runner(gm: torch.fx.GraphModule):
    def run(args):
        return gm(*args)

    run._boxed_call = True
    return run


def get_compiler(compiler_config: Optional[CompilerConfig] = None) -> NpuFxCompiler:
    """The graph compiler for ``compiler_config`` (a default config when None)."""
    return NpuFxCompiler(compiler_config if compiler_config is not None else CompilerConfig())
