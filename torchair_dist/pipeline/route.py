"""The per-rank graph compiler: the AOT-pass stages, the route to a runner (the mode's backend
and its steps), the runtime stages (the cross-rank check); all run by ``stages.run_stages``."""
from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from . import stages as pipeline
from ..configs import CompilerConfig
from ..backends.interface import Backend, Build, Compiled
from ..base.graph_context import GraphContext, current_rank_and_world
from ..base.torch_support import torch_at_least
from ..base.util import calling_rank, on_dynamo_reset, ranks_are_threads
from ..collectives import failures
from ..errors import BackendUnavailableError, WrongRankError
from ..passes.graph_info import mutated_input_indices
from .aot import keep_input_versions

log = logging.getLogger("torchair_dist")

_graph_ids = itertools.count()


@on_dynamo_reset
def _reset_graph_ids() -> None:
    global _graph_ids
    _graph_ids = itertools.count()

_observers: List[Tuple[Optional[str], List[Any]]] = []


@contextlib.contextmanager
def record_graphs(after: Optional[str] = None):
    """Collect what every graph compiled inside the block looked like (tests, debugging).

    Without ``after``: the ``GraphContext`` of each graph, ``ctx.gm`` being the graph after all
    AOT passes, as the backend received it::

        with record_graphs() as graphs:
            compiled(x)
        assert len(graphs) == 1 and "_c10d_functional.all_reduce.default" in op_targets(graphs[0].gm)

    With ``after="overlap"`` (any AOT-pass stage of ``pipeline.STAGES``): a copy of each graph
    as that stage left it; the real pipeline still runs to the end (vLLM's TestBackend idiom).
    A stage that does not run (its gate is off, or not on this platform) records nothing.
    """
    if after is not None and (after not in pipeline.STAGES
                              or pipeline.STAGES[after].level != "aot-pass"):
        raise ValueError(f"record_graphs(after={after!r}): not an AOT-pass stage; choose one of "
                         f"{[s.name for s in pipeline.STAGES.values() if s.level == 'aot-pass']}")
    seen: List[Any] = []
    entry = (after, seen)
    _observers.append(entry)
    try:
        yield seen
    finally:
        _observers.remove(entry)


def _observe(ctx: GraphContext) -> None:
    """The observation point (``pipeline.OBSERVATION_POINT``): the graph after the AOT-pass
    stages, before any backend; what ``record_graphs()``, the compile cache's recorder and the
    cross-rank check read, in every mode (no backend writes ``ctx.gm``)."""
    for after, seen in _observers:
        if after is None:
            seen.append(ctx)


def _observe_stage(name: str, gm: torch.fx.GraphModule) -> None:
    for after, seen in _observers:
        if after == name:
            seen.append(copy.deepcopy(gm))


def backend_for_mode(mode: str) -> Backend:
    """The :class:`~torchair_dist.backends.interface.Backend` object that serves ``mode`` (its
    ``pipeline.MODE_TABLE`` row holds it)."""
    return pipeline.mode_row(mode).backend


def build_runner(ctx: GraphContext) -> Compiled:
    """The route of ``ctx``'s graph to its runner, top to bottom, once (every stage is the
    mode row's, run by ``pipeline.run_stages`` when its gate and platform let it):

    1. the ``route`` stages: debug runners that replace the backend (a summary's eager run, a
       data dump, ``run_eagerly``), the collective transport, then ``compile``, which has the
       mode's backend start a build: from the graph (a fresh compile), or from ``ctx.handle``
       (a graph the compile cache rebuilt: ``backend.load``);
    2. the ``backend`` stages, the backend's steps, on that build;
    3. ``backend.finish``: the runner and the handle a later ``load`` takes;
    4. the ``runtime`` stages around the runner (the cross-rank check), for both paths alike.
    """
    config = ctx.config
    made = pipeline.run_stages(config, "route", ctx,
                               stop=lambda v: not isinstance(v, GraphContext))
    if isinstance(made, GraphContext):
        raise BackendUnavailableError(f"mode {config.get('mode')!r}: its route ends without "
                                      f"a runner (pipeline.MODE_TABLE lacks a compile stage)")
    if isinstance(made, Build):
        backend = backend_for_mode(config.get("mode"))
        with backend.steps_context():
            made = pipeline.run_stages(config, "backend", made)
        compiled = backend.finish(made)
    else:  # a debug stage's runner: nothing a later process could load
        compiled = Compiled(made, None)
    runner = pipeline.run_stages(config, "runtime", compiled.runner, ctx)
    if ranks_are_threads():
        _warn_thread_ranks_on_old_torch()
        runner = _one_rank_only(runner, ctx)
    return Compiled(runner, compiled.handle)


_THREAD_RANKS_FROM = (2, 13)
_warned_old_torch: List[bool] = []


def _warn_thread_ranks_on_old_torch() -> None:
    """Once per process: thread ranks are tested from torch 2.13. On 2.11 Dynamo crashed the
    process (a segfault in ``FakeTensorMode.__enter__``) when one thread rank compiled while
    its peer ran, and 2.11's ``destroy_process_group`` fails on the threaded world
    (``ThreadLocalWorld`` has no ``comms``), leaving it to the process's later work."""
    if _warned_old_torch or torch_at_least(*_THREAD_RANKS_FROM):
        return
    _warned_old_torch.append(True)
    log.warning("torchair_dist: thread ranks (torch's threaded process group) are tested from "
                "torch %d.%d; on torch %s Dynamo has crashed the process when one thread rank "
                "compiled while another ran. Use process ranks (torchrun) or torch >= %d.%d.",
                *_THREAD_RANKS_FROM, torch.__version__, *_THREAD_RANKS_FROM)


def _one_rank_only(runner, ctx: GraphContext):
    """Thread ranks (torch's threaded process group): ``runner`` refuses calls from another
    rank than the one it was compiled on (:class:`WrongRankError`).

    A runner holds its rank's state (captured buffers, the GE executor's, the cross-rank check's
    first run). Dynamo shares one compiled frame between threads whenever its guards cannot
    tell the ranks apart — one ``torch.compile``'d function called by every thread rank, with
    its group given by ranks or by name — and would hand this rank's runner to a peer: a race on
    its buffers and, where the program depends on the rank, another rank's graph. Only calls
    from a thread this runner has not seen look the rank up."""
    import threading

    call = runner if getattr(runner, "_boxed_call", False) else (lambda args: runner(*args))
    threads = {threading.get_ident()}
    get_ident = threading.get_ident

    def run(args):
        if get_ident() not in threads:
            rank = calling_rank()
            if rank is not None and rank != ctx.rank:
                error = WrongRankError(
                    f"rank {rank}: {ctx.graph_name} was compiled on rank {ctx.rank} and holds "
                    f"that rank's state; with thread ranks (torch's threaded process group) "
                    f"Dynamo hands one compiled function's graph to every thread whose guards "
                    f"it passes. Compile per rank: call torch.compile(..., backend="
                    f"get_npu_backend(...)) in each rank's thread (one backend object per "
                    f"rank), or pass the ProcessGroup object (Dynamo guards on it) rather than "
                    f"ranks or a group name.")
                failures.publish(error, "the run", ctx.graph_name)  # peers waiting fail too
                raise error
            threads.add(get_ident())
        return call(args)

    run._boxed_call = True
    return run


def make_context(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig,
                 static_input_indices: List[int], graph_name: str,
                 is_inference: bool = True, handle: Optional[Dict[str, Any]] = None,
                 original: Optional[torch.fx.GraphModule] = None) -> GraphContext:
    """The GraphContext of a graph about to be compiled, on this process's rank (``handle``:
    the backend handle it was stored with; ``original``: the graph before the passes, kept
    by the ``keep_original`` stage)."""
    rank, world = current_rank_and_world()
    return GraphContext(gm=gm, example_inputs=list(example_inputs), config=config,
                        static_input_indices=list(static_input_indices),
                        mutated_input_indices=mutated_input_indices(gm),
                        graph_name=graph_name, rank=rank, world_size=world,
                        is_inference=is_inference, original_gm=original, handle=handle)


def run_aot_passes(gm: torch.fx.GraphModule, example_inputs, cfg: CompilerConfig):
    """The mode's AOT-pass stages that apply, in the row's order (the pipeline's runner)."""
    return pipeline.run_stages(cfg, "aot-pass", gm, example_inputs, cfg,
                               after=lambda stage, out: _observe_stage(stage.name, out)
                               if _observers else None)


def _static_indices(example_inputs: Sequence[Any]) -> List[int]:
    """Parameters/buffers among the graph inputs, from AOT's metadata when it has it."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is not None and getattr(meta, "static_input_indices", None) is not None:
        return list(meta.static_input_indices)
    return [i for i, x in enumerate(example_inputs) if isinstance(x, torch.nn.Parameter)]


_PRIMAL = re.compile(r"primals_(\d+)$")


def _backward_static_indices(gm: torch.fx.GraphModule) -> List[int]:
    """The static inputs of a backward graph: its placeholders that are forward inputs the
    forward holds static (parameters/buffers). AOT's metadata lists the *forward's* positions;
    the backward takes saved values and tangents in another order, and AOT's partitioner names
    a saved forward input after the forward's placeholder (``primals_<k>``, input k-1), which
    is how its positions map here. Saved activations and tangents are new tensors each step,
    copied into the capture's buffers like any other input."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    forward_static = set(getattr(meta, "static_input_indices", None) or ())
    static = []
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        match = _PRIMAL.match(node.name)
        if match and int(match.group(1)) - 1 in forward_static:
            static.append(i)
    return static


class NpuFxCompiler:
    """Compiles AOT graphs for one config; used as AOT's forward/inference/backward compiler."""

    def __init__(self, config: CompilerConfig):
        self.config = config
        self.compiled: List[GraphContext] = []  # every graph this compiler saw (debug/tests)
        self.handles: List[Optional[Dict[str, Any]]] = []  # the backend's handle of each
        # per input of Dynamo's graph: eager's version bumps per call (pipeline.aot)
        self.version_bumps: Optional[Dict[int, int]] = None

    # A backward graph is compiled (and run) when autograd reaches it: under a user's compiled
    # frame (torch.autograd.grad inside torch.compile) Dynamo would trace this library's own
    # frames, graph-breaking at every step, unless they are disabled for it.
    @torch.compiler.disable
    def __call__(self, gm: torch.fx.GraphModule, example_inputs, is_inference: bool = True,
                 is_backward: bool = False):
        cfg = self.config
        static = _backward_static_indices(gm) if is_backward else _static_indices(example_inputs)
        original = copy.deepcopy(gm) if pipeline.keeps_original(cfg) else None
        gm = run_aot_passes(gm, example_inputs, cfg)
        ctx = make_context(gm, example_inputs, cfg, static, f"graph_{next(_graph_ids)}",
                           is_inference, original=original)
        self.compiled.append(ctx)
        _observe(ctx)
        compiled = build_runner(ctx)
        self.handles.append(compiled.handle)
        runner = compiled.runner
        if is_backward:
            boxed = getattr(runner, "_boxed_call", False)
            runner = torch.compiler.disable(runner)  # run by autograd, maybe in a user frame
            if boxed:
                runner._boxed_call = True
            return runner
        return keep_input_versions(
            runner, cfg.get("experimental_config.keep_inference_input_mutations"),
            self.version_bumps)

    def inference(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=True)

    def forward(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=False)

    @torch.compiler.disable  # AOT compiles a backward lazily, maybe under a user's frame
    def backward(self, gm, example_inputs):
        return self(gm, example_inputs, is_inference=False, is_backward=True)


def get_compiler(compiler_config: Optional[CompilerConfig] = None) -> NpuFxCompiler:
    """The graph compiler for ``compiler_config`` (a default config when None)."""
    return NpuFxCompiler(compiler_config if compiler_config is not None else CompilerConfig())
