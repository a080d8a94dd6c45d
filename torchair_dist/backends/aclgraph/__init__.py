"""ACL-graph backend (modes ``npugraph_ex`` and ``reduce-overhead``).

``BACKEND`` (a :class:`~torchair_dist.graph_context.Backend`) is what ``pipeline.MODE_TABLE``
names for both modes: with ``experimental_config.inductor_kernels`` (and a device that allows
it) inductor generates the forward (:mod:`.inductor_kernels`), else ``compile_graph(ctx)``
generates a runner from the FX graph. With a device graph class
(``torch.npu.NPUGraph`` / ``torch.cuda.CUDAGraph``) it captures per graph key and replays. On
CPU a stand-in graph takes the device graph's place, chosen by ``TORCHAIR_DIST_CPU_CAPTURE``:

* ``record`` (default): capture records the dispatched ops, replay re-issues them on the
  captured buffers, with the device-graph rules (:mod:`.record`, :mod:`.rules`);
* ``emulate``: replay re-runs the generated forward and copies into the captured outputs;
* ``off``: no capture, the generated forward runs directly.

Every capture, replay and recapture is counted in :mod:`.report` (``capture_report()``).
"""
from __future__ import annotations

import dataclasses
import logging
import os

import torch

from ... import platform as _platform
from ...debug import dump_fx_graph
from ...errors import ConfigError
from ..context import Backend, GraphContext
from .capture import DeviceGraph, EmulatedGraph
from .codegen import generate_forward
from .record import RecordGraph, RecordPool
from .report import capture_report, reset_capture_report
from .runner import AclGraphRunner
from .sym_values import ValueIntRunner, split_value_ints

__all__ = ["BACKEND", "AclGraphBackend", "compile_graph", "graph_factory_for", "cpu_capture_mode", "capture_report",
           "reset_capture_report"]

log = logging.getLogger("torchair_dist")

CPU_CAPTURE_ENV = "TORCHAIR_DIST_CPU_CAPTURE"
CPU_CAPTURE_MODES = ("record", "emulate", "off")
DEFAULT_CPU_CAPTURE = "record"


def graph_device_type(ctx: GraphContext) -> str:
    """The device of the graph's tensor inputs ('cpu' when it has none)."""
    for x in ctx.example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return "cpu"


class _Factory:
    """A zero-argument factory of capture graphs; ``shared_pool``: its graphs share a pool."""

    def __init__(self, make, shared_pool: bool):
        self.make = make
        self.shared_pool = shared_pool

    def __call__(self):
        return self.make()


def cpu_capture_mode() -> str:
    """The CPU stand-in in use: "record" (default), "emulate", or "off" (run directly)."""
    value = os.environ.get(CPU_CAPTURE_ENV, DEFAULT_CPU_CAPTURE) or DEFAULT_CPU_CAPTURE
    if value not in CPU_CAPTURE_MODES:
        raise ConfigError(f"{CPU_CAPTURE_ENV}={value!r}: expected one of "
                          f"{list(CPU_CAPTURE_MODES)}")
    return value


def graph_factory_for(ctx: GraphContext, opaque_forward: bool = False):
    """A zero-argument factory of capture graphs, or None to run without capture.

    ``opaque_forward``: the forward runs kernels the dispatcher never sees (inductor's), which
    the CPU record stand-in cannot record (it would replay the FX graph's aten ops instead): on
    CPU such a graph gets the emulating stand-in (fixed buffers, the forward runs per replay)."""
    plat = _platform.for_device(graph_device_type(ctx))
    cfg = ctx.config
    custom = cfg.aclgraph_config.use_custom_pool.raw
    share = custom is not None or not cfg.debug.aclgraph.disable_mempool_reuse_in_same_fx.raw
    if plat.has_graph_capture:
        pool = custom if custom is not None or not share else plat.graph_pool_handle()
        mode = cfg.npugraphex_config.capture_error_mode.raw
        return _Factory(lambda: DeviceGraph(plat, pool if share else None, mode), share)
    stand_in = cpu_capture_mode()
    if stand_in == "record" and opaque_forward:
        log.debug("%s: its forward calls compiled kernels; the emulating CPU stand-in replays "
                  "it (the record stand-in only re-issues dispatched ops)", ctx.graph_name)
        stand_in = "emulate"
    if stand_in == "record":
        pool = RecordPool() if share else None
        return _Factory(lambda: RecordGraph(ctx.gm, pool), share)
    if stand_in == "emulate":
        return _Factory(EmulatedGraph, False)
    return None


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


class AclGraphBackend(Backend):
    """``npugraph_ex`` / ``reduce-overhead``: a generated runner, captured per graph key."""

    name = "aclgraph"

    def compile(self, ctx: GraphContext):
        from ...collectives import shm
        from . import inductor_kernels

        if inductor_kernels.enabled_for(ctx):
            return inductor_kernels.compile_graph(shm.for_runner(ctx, functional=True))
        return compile_graph(shm.for_runner(ctx))


BACKEND = AclGraphBackend()
