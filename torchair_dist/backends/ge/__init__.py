"""The GE backend (``max-autotune``): FX (AOT aten) graph -> GE IR -> a GE runtime.

``BACKEND`` (a :class:`~torchair_dist.pipeline.graph_context.Backend`) is what ``pipeline.MODE_TABLE``
names; its ``compile`` is ``compile_graph(ctx)``, and a cache entry is loaded by converting the
rebuilt graph again. ``compile_graph(ctx)`` converts the graph with the converter registry (:mod:`.converters`),
serializes the ``ModelDef``, optionally dumps/exports it, loads the bytes into a runtime
(:mod:`.runtime`: CANN on an Ascend host, else the reference executor) and returns a boxed
runner with the FX calling convention. Inputs the graph mutates (AOT's ``copy_`` into a
placeholder) are written back after each run; opaque inputs (a process group passed as a script
object) are read at conversion time and not fed to GE. User streams (the
``torchair_dist_streams`` ops) become ``_user_stream_label``/``_user_stream_priority`` op
attributes and control edges (:mod:`.converters.streams`).

Options read: ``debug.graph_dump.type/path``,
``export.export_mode/export_path_dir/export_name/weight_name`` and
``export.experimental.auto_atc_config_generated`` (export happens on the first call, when the
weights' values are known; the graph then runs as usual). ``TORCHAIR_DIST_GE_VALIDATE=1`` checks
every converted graph against the GE operator registry (the GE tests turn it on).
"""
from __future__ import annotations

import logging
from typing import Any, List

import torch

from ...base.envvars import env_flag
from ...base.util import input_device
from ..context import Backend, GraphContext, boxed
from .fx2ge import ConvertedGraph, convert_graph

log = logging.getLogger("torchair_dist")

ENV_VALIDATE = "TORCHAIR_DIST_GE_VALIDATE"


def compile_graph(ctx: GraphContext):
    """Convert, (dump, export,) load and wrap one AOT forward graph; see the module docstring."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # AOT calls us under its FakeTensorMode; we build real data
        return _compile(ctx, ctx.config)


def _compile(ctx: GraphContext, config: Any):
    converted = convert_graph(ctx.gm, ctx.example_inputs, ctx.graph_name, ctx.rank,
                              ctx.world_size,
                              ref_data=bool(config.get("experimental_config.enable_ref_data")))
    if env_flag(ENV_VALIDATE):
        from .registry_check import validate

        validate(converted.model)
    dump_type = config.get("debug.graph_dump.type")
    if dump_type:
        from .dump import dump_graph

        name = dump_graph(converted, dump_type, config.get("debug.graph_dump.path"),
                          ctx.graph_name, ctx.rank)
        log.info("rank %d: GE graph %s dumped to %s", ctx.rank, ctx.graph_name, name)
    model_bytes = converted.model.SerializeToString()
    from .runtime import create_runtime

    runtime = create_runtime(device=input_device(ctx.example_inputs), config=config,
                             rank=ctx.rank, world_size=ctx.world_size, transport=ctx.transport)
    runtime.load(model_bytes)
    runner = make_runner(converted, runtime)
    if config.get("export.export_mode"):
        return _exporting(runner, converted, ctx)
    return runner


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


def make_runner(converted: ConvertedGraph, runtime: Any):
    """The boxed FX-convention runner around a loaded GE runtime."""
    sym_positions = [i for i, kind in enumerate(converted.inputs) if kind == "sym"]
    fed = [i for i, kind in enumerate(converted.inputs) if kind != "opaque"]
    if len(fed) == len(converted.inputs):
        fed = None
    outputs = converted.outputs
    mutations = converted.mutations
    plain = not sym_positions and not mutations and fed is None and all(
        k == "ge" for k, _ in outputs)
    run = runtime.run

    if plain:
        def runner(args: List[Any]):
            return run(args)
        return boxed(runner)

    def runner(args: List[Any]):
        feed = list(args)
        for i in sym_positions:
            feed[i] = torch.tensor(int(feed[i]), dtype=torch.int64)
        outs = run(feed if fed is None else [feed[i] for i in fed])
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


class GeBackend(Backend):
    """``max-autotune``: FX -> GE IR -> a GE runtime (:func:`compile_graph`)."""

    name = "ge"

    def compile(self, ctx: GraphContext):
        return compile_graph(ctx)


BACKEND = GeBackend()

__all__ = ["BACKEND", "GeBackend", "compile_graph", "make_runner"]
