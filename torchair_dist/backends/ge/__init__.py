"""The GE backend (``max-autotune``): FX (AOT aten) graph -> GE IR -> a GE runtime.

``BACKEND`` (a :class:`~torchair_dist.backends.interface.Backend`) is what ``pipeline.MODE_TABLE``
names; its ``start(ctx)`` makes the :class:`GeBuild` the mode row's backend steps work on (the
route runs them), ``finish`` returns the runner and the handle, and a handle is loaded by
converting the rebuilt graph again. The steps (each ``build -> build``, run by
the pipeline in the row's order when their gate and platforms allow): :func:`convert_step`
converts the graph with the converter registry (:mod:`.converters`); :func:`dump_step` dumps it;
:func:`cann_options_step` / :func:`cann_dump_step` / :func:`cann_aoe_step` build the CANN
session/graph options (NPU only); :func:`run_step` loads the serialized ``ModelDef`` into a
runtime (:mod:`.runtime`: CANN on an Ascend host, else the reference executor) and wraps it in
a boxed runner with the FX calling convention; :func:`export_step` writes the export on the
first call. Inputs the graph mutates (AOT's ``copy_`` into a placeholder) are written back after
each run; opaque inputs (a process group passed as a script object) are read at conversion time
and not fed to GE. User streams (the ``torchair_dist_streams`` ops) become
``_user_stream_label``/``_user_stream_priority`` op attributes and control edges
(:mod:`.converters.streams`).

``TORCHAIR_DIST_GE_VALIDATE=1`` checks every converted graph against the GE operator registry
(the GE tests turn it on).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ...base.envvars import env_flag
from ...base.layout import OutputLayout, SymbolBinder, output_layouts, symbol_sources
from ...base.util import input_device
from ..context import GraphContext, boxed, own_copy
from ..interface import Backend, Build, Compiled
from .fx2ge import ConvertedGraph, convert_graph
from .output_views import ViewRebuilder, check_input_views, outputs_as_bases

log = logging.getLogger("torchair_dist")

ENV_VALIDATE = "TORCHAIR_DIST_GE_VALIDATE"


@dataclasses.dataclass
class GeBuild(Build):
    """What the GE backend's steps build: the converted graph, the CANN options
    (``(session, graph)``; None where no ``cann_*`` step ran), the runner."""

    converted: Optional[ConvertedGraph] = None
    cann: Optional[Tuple[Dict[str, str], Dict[str, str]]] = None
    runner: Any = None
    # outputs that view an intermediate: converted as their base, rebuilt after each run
    # (:mod:`.output_views`); ``layouts``: the layout each converted output must have
    views: Any = None
    layouts: List[Any] = dataclasses.field(default_factory=list)
    # the symbols' values of one run, read from its inputs (symbolic layouts are evaluated
    # with them)
    binder: Optional[SymbolBinder] = None


def convert_step(build: GeBuild) -> GeBuild:
    """``ge_convert``: FX -> GE IR (validated against the registry with the env flag); with
    ``enable_view_optimize`` a last-two-dims Transpose feeding a matmul folds into it. A
    lowering step: it decomposes unconverted ops of its own copy of the graph, never of
    ``ctx.gm``, which the observers read."""
    ctx = build.ctx
    gm, views = outputs_as_bases(ctx.gm)
    converted = convert_graph(
        own_copy(gm), ctx.example_inputs, ctx.graph_name, ctx.rank, ctx.world_size,
        ref_data=bool(ctx.config.get("experimental_config.enable_ref_data")))
    if ctx.config.get("experimental_config.enable_view_optimize"):
        from .view_optimize import fold_transposes_into_matmuls

        fold_transposes_into_matmuls(converted.model.graph[0])
    if env_flag(ENV_VALIDATE):
        from .registry_check import validate

        validate(converted.model)
    binder = SymbolBinder(symbol_sources(gm))
    layouts = output_layouts(gm)
    check_input_views(gm, layouts, ctx.graph_name)
    return dataclasses.replace(
        build, converted=converted, layouts=layouts, binder=binder,
        views=ViewRebuilder(views, binder) if views else None)


def dump_step(build: GeBuild) -> GeBuild:
    """``ge_dump``: the GE graph as txt/pbtxt/py."""
    from .dump import dump_graph

    ctx, config = build.ctx, build.ctx.config
    name = dump_graph(_converted(build), config.get("debug.graph_dump.type"),
                      config.get("debug.graph_dump.path"), ctx.graph_name, ctx.rank)
    log.info("rank %d: GE graph %s dumped to %s", ctx.rank, ctx.graph_name, name)
    return build


def cann_options_step(build: GeBuild) -> GeBuild:
    """``cann_options``: the session/graph options CANN gets."""
    from .runtime.cann_options import session_and_graph_options

    return dataclasses.replace(build, cann=session_and_graph_options(build.ctx.config))


def cann_dump_step(build: GeBuild) -> GeBuild:
    """``cann_dump``: GE's own data dump options, added to the session's."""
    from .runtime.cann_options import dump_options

    session, graph = build.cann or ({}, {})
    ctx = build.ctx
    return dataclasses.replace(build, cann=({**session, **dump_options(
        ctx.config, ctx.rank, ctx.world_size)}, graph))


def cann_aoe_step(build: GeBuild) -> GeBuild:
    """``cann_aoe``: AOE tuning options, added to the session's."""
    from .runtime.cann_options import aoe_options

    session, graph = build.cann or ({}, {})
    return dataclasses.replace(build, cann=({**session, **aoe_options(build.ctx.config)}, graph))


def run_step(build: GeBuild) -> GeBuild:
    """``ge_run``: load the serialized graph into a runtime; the boxed runner (the reference
    executor's collectives overlap as ``overlap_collectives`` says)."""
    from .runtime import create_runtime

    ctx = build.ctx
    overlap = bool(ctx.config.get("distributed_config.overlap_collectives"))
    runtime = create_runtime(device=input_device(ctx.example_inputs), overlap=overlap,
                             transport=ctx.transport, options=build.cann)
    converted = _converted(build)
    runtime.load(converted.model.SerializeToString())
    return dataclasses.replace(build, runner=make_runner(converted, runtime, build.layouts,
                                                         build.views, build.binder))


def export_step(build: GeBuild) -> GeBuild:
    """``ge_export``: the first call writes this rank's export, then runs as usual."""
    if build.runner is None:
        raise RuntimeError(f"{build.ctx.graph_name}: ge_export runs before ge_run in the row")
    if _converted(build).rng_key:
        from ...errors import UnsupportedOpError

        raise UnsupportedOpError(
            f"{build.ctx.graph_name}: export of a graph with random ops is not supported: their "
            "key is an extra input (rng_key, uint64 [1]) drawn before every run, which the "
            "exported graph's caller would have to feed; draw the random tensors outside the "
            "compiled region and pass them in")
    return dataclasses.replace(build, runner=_exporting(build.runner, _converted(build),
                                                         build.ctx))


def _converted(build: GeBuild) -> ConvertedGraph:
    if build.converted is None:
        raise RuntimeError(f"{build.ctx.graph_name}: the mode row's backend steps lack "
                           f"ge_convert before this step")
    return build.converted


def _exporting(runner, converted: ConvertedGraph, ctx: GraphContext):
    """Export mode: the first call writes this rank's export (weights need real values, which
    only the first call has), then every call runs the graph as usual."""
    from .export import export_extras, export_model

    config = ctx.config
    done = []

    def run(args: List[Any]):
        if not done:
            weight_name = config.get("export.weight_name") or {}
            names = {i: weight_name[id(args[i])] for i in ctx.static_input_indices
                     if id(args[i]) in weight_name}
            path = export_model(
                converted, args, export_path=config.get("export.export_path_dir") or "./",
                export_name=config.get("export.export_name") or "export", rank=ctx.rank,
                world_size=ctx.world_size, distributed=_distributed(),
                static_input_indices=ctx.static_input_indices, weight_names=names,
                auto_atc_config=config.get("export.experimental.auto_atc_config_generated"),
                **export_extras(config))
            log.info("rank %d: GE graph %s exported to %s", ctx.rank, ctx.graph_name, path)
            done.append(path)
        return runner(args)
    return boxed(run)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def make_runner(converted: ConvertedGraph, runtime: Any,
                layouts: Optional[List[Optional[OutputLayout]]] = None,
                views: Optional[Callable[..., List[Any]]] = None,
                binder: Optional[SymbolBinder] = None):
    """The boxed FX-convention runner around a loaded GE runtime. ``layouts``: per output,
    the layout the FX graph says it has (eager's); GE computes dense row-major tensors, so an
    output laid out otherwise (channels_last, permuted, a strided buffer, a view of an input
    at an offset) is copied into that layout after the run; a symbolic layout is evaluated
    with the run's symbol values (``binder``). ``views``: rebuilds outputs as views of
    another output, as eager returns them (:class:`.output_views.ViewRebuilder`)."""
    runner = _make_runner(converted, runtime)
    fixes = tuple((i, layout) for i, layout in enumerate(layouts or ())
                  if layout is not None and _needs_check(layout))
    if not fixes and views is None:
        return runner
    symbolic = any(layout.symbolic is not None for _, layout in fixes)
    if symbolic and binder is None:
        raise RuntimeError("make_runner: a symbolic output layout needs the graph's binder")

    def laid_out(args: List[Any]):
        outs = list(runner(args))
        values = binder(args) if symbolic else None
        for i, layout in fixes:
            outs[i] = layout.at(values).conform(outs[i]) if layout.symbolic else \
                layout.conform(outs[i])
        return views(outs, args, values) if views is not None else outs
    return boxed(laid_out)


def _needs_check(layout: OutputLayout) -> bool:
    """Whether GE's dense row-major result can differ from ``layout``."""
    if layout.symbolic is not None:
        return True
    if layout.order is not None:
        return layout.order != tuple(range(len(layout.order)))
    size, stride, offset = layout.exact
    return not layout.matches(torch.empty(size, device="meta")) or offset != 0


def _make_runner(converted: ConvertedGraph, runtime: Any):
    sym_positions = [i for i, kind in enumerate(converted.inputs) if kind == "sym"]
    fed = [i for i, kind in enumerate(converted.inputs) if kind != "opaque"]
    if len(fed) == len(converted.inputs):
        fed = None
    outputs = converted.outputs
    mutations = converted.mutations
    rng_key = converted.rng_key
    plain = not sym_positions and not mutations and fed is None and not rng_key and all(
        k == "ge" for k, _ in outputs)
    run = runtime.run
    if converted.call_errors:  # eager refuses these inputs: so does every call
        cls, message = converted.call_errors[0]

        def refuse(args: List[Any]):
            raise cls(message)
        return boxed(refuse)

    if plain:
        def runner(args: List[Any]):
            return run(args)
        return boxed(runner)

    def runner(args: List[Any]):
        feed = list(args)
        for i in sym_positions:
            feed[i] = torch.tensor(int(feed[i]), dtype=torch.int64)
        feed = feed if fed is None else [feed[i] for i in fed]
        if rng_key:  # drawn from torch's generator: manual_seed repeats a run's numbers
            feed.append(random_key())
        outs = run(feed)
        for index, pos in mutations:
            args[index].copy_(outs[pos])
        result = []
        for kind, value in outputs:
            if kind == "ge":
                result.append(outs[value])
            elif kind == "sym":
                result.append(int(outs[value]))
            elif kind == "input":  # an opaque input (a DeviceMesh) returned as it came
                result.append(args[value])
            else:
                result.append(value)
        return result
    return boxed(runner)


def random_key() -> torch.Tensor:
    """A uint64 [1] key for a graph's stateless random ops, drawn from torch's default
    generator (it advances that generator as an eager random op does)."""
    return torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).to(torch.uint64)


class GeBackend(Backend):
    """``max-autotune``: FX -> GE IR -> a GE runtime (the row's steps, see the module doc). A
    handle stands for the FX graph stored beside it: the GE IR is rebuilt on load."""

    name = "ge"
    handle_format = "fx-graph (GE IR rebuilt on load)"

    def start(self, ctx: GraphContext) -> GeBuild:
        return GeBuild(ctx)

    def steps_context(self):
        """AOT calls the compiler under its FakeTensorMode; the steps build real data."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        return unset_fake_temporarily()

    def finish(self, build: GeBuild) -> Compiled:
        if build.runner is None:
            raise RuntimeError(f"{build.ctx.graph_name}: the mode row's backend steps made no "
                               f"runner (it lacks ge_run)")
        return Compiled(build.runner, self.handle(build))


BACKEND = GeBackend()

__all__ = ["BACKEND", "GeBackend", "GeBuild", "make_runner"]
