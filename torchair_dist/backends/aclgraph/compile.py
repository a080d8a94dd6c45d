"""Compiling one AOT graph for the ACL modes: the generated forward, the capture factory for the
graph's device (a device graph, or the CPU stand-in :mod:`torchair_dist.platform.stand_ins`
picks), and the capturing runner."""
from __future__ import annotations

import dataclasses
import logging

import torch

from ... import platform as _platform
from ...tools.dumps import dump_fx_graph
from ...platform import stand_ins
from ...platform.interfaces import CaptureFactory
from ..context import GraphContext
from .capture import DeviceGraph
from .codegen import generate_forward
from .runner import AclGraphRunner
from .sym_values import ValueIntRunner, split_value_ints

log = logging.getLogger("torchair_dist")


def graph_device_type(ctx: GraphContext) -> str:
    """The device of the graph's tensor inputs ('cpu' when it has none)."""
    for x in ctx.example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return "cpu"


def graph_factory_for(ctx: GraphContext, opaque_forward: bool = False):
    """A zero-argument factory of capture graphs, or None to run without capture.

    ``opaque_forward``: the forward runs kernels the dispatcher never sees (inductor's), which
    the CPU record stand-in cannot record (it would replay the FX graph's aten ops instead): on
    CPU such a graph gets the emulating stand-in (fixed buffers, the forward runs per replay)."""
    plat = _platform.for_device(graph_device_type(ctx))
    cfg = ctx.config
    custom = cfg.get("aclgraph_config.use_custom_pool")
    share = custom is not None or not cfg.get("debug.aclgraph.disable_mempool_reuse_in_same_fx")
    if plat.has_graph_capture:
        pool = custom if custom is not None or not share else plat.graph_pool_handle()
        mode = cfg.get("npugraphex_config.capture_error_mode")
        return CaptureFactory(lambda: DeviceGraph(plat, pool if share else None, mode), share)
    return stand_ins.capture_factory(plat.device_type, ctx.gm, ctx.graph_name, share,
                                     opaque_forward)


def compile_graph(ctx: GraphContext):
    """Compile one AOT graph for the ACL modes; returns a boxed runner."""
    generated = generate_forward(ctx.gm, ctx.graph_name)
    dump_fx_graph(ctx.gm, ctx.config, ctx.graph_name, ctx.rank, generated.source)
    factory = graph_factory_for(ctx)
    if factory is None:
        log.debug("%s: no graph capture on this device; running the generated forward",
                  ctx.graph_name)
        return generated.fn

    def make_forward(c: GraphContext):
        made = generated if c.gm is ctx.gm else generate_forward(c.gm, c.graph_name)
        return made.fn, made.source

    return capture_runner(ctx, factory, make_forward)


def capture_runner(ctx: GraphContext, factory, make_forward, opaque_forward: bool = False):
    """The capturing runner of ``ctx``: ``make_forward(ctx) -> (fn, source)`` compiles the
    graph's forward (``opaque_forward``: see :func:`graph_factory_for`). Integer inputs that
    only reach tensor ops as values are split out first (:mod:`.sym_values`), so one capture
    serves every value of them."""
    split = split_value_ints(ctx.gm)
    if split is None:
        fn, source = make_forward(ctx)
        runner = AclGraphRunner(fn, ctx, factory)
        runner.source = source
        return runner
    log.debug("%s: integer inputs %s are fed as values (one capture for every value)",
              ctx.graph_name, split.value_positions)
    values = split.gm.graph.find_nodes(op="placeholder")[-split.n_values:] if split.n_values \
        else []
    device_ctx = dataclasses.replace(ctx, gm=split.gm, example_inputs=list(ctx.example_inputs)
                                     + [p.meta["val"] for p in values])
    fn, source = make_forward(device_ctx)
    inner = AclGraphRunner(fn, device_ctx, graph_factory_for(device_ctx, opaque_forward))
    inner.source = source
    return ValueIntRunner(split, inner)
