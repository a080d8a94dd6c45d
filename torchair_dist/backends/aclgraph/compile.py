"""Compiling one AOT graph for the ACL modes, as the steps of the mode row's ``backend`` stages.

The pipeline runs these steps from the table (``torchair_dist.pipeline.stages``: ``acl_codegen``,
``acl_dump``, ``inductor_kernels``, ``value_ints``, ``device_capture``, ``capture``), in the
row's order and only when their gate and platforms allow; each takes and returns the
:class:`AclBuild` being put together. :meth:`AclBuild.runner_or_forward` is what the backend
returns: the capturing runner when a capture step made one, else the forward itself.
"""
from __future__ import annotations

import dataclasses
import logging
import warnings
import weakref
from typing import Any, Callable, Optional, Tuple

import torch

from ... import platform as _platform
from ...base.dumps import dump_fx_graph
from ...base.util import calling_rank, on_dynamo_reset
from ...cpu import stand_ins
from ...platform.interfaces import CaptureFactory, CollectiveTransport
from ...passes.stream_ordering import EVENTS_ADDED
from ..context import GraphContext
from ..interface import Build
from . import report
from .capture import DeviceGraph
from .codegen import generate_forward
from .runner import AclGraphRunner
from .sym_values import ValueIntRunner, split_value_ints

log = logging.getLogger("torchair_dist")


@dataclasses.dataclass
class AclBuild(Build):
    """What the ACL backend's steps build, step by step.

    ``ctx``: the graph as the compiler passed it (what the cross-rank check, the cache and
    dumps of the original see); ``run_ctx``: the runner's copy of it (the route's collective
    transport applied); ``make_forward(ctx) -> (fn, source)``: compiles a forward of a graph
    (the codegen's or inductor's); ``opaque``: that forward runs kernels the dispatcher never
    sees (inductor's); ``split``: integer inputs fed as values (``value_ints``);
    ``factory``: the capture graphs' factory; ``runner``: the capturing runner once built;
    ``splitting_ops``: the ops a piecewise graph splits at (``piecewise``; empty: whole).
    """

    transport: CollectiveTransport
    run_ctx: Optional[GraphContext] = None
    make_forward: Optional[Callable[[GraphContext], Tuple[Callable, Optional[str]]]] = None
    source: Optional[str] = None
    opaque: bool = False
    split: Any = None
    factory: Optional[CaptureFactory] = None
    runner: Any = None
    splitting_ops: Tuple[str, ...] = ()

    def runner_or_forward(self):
        if self.runner is not None:
            return self.runner
        if self.make_forward is None:
            raise RuntimeError(f"{self.ctx.graph_name}: the mode row's backend steps made no "
                               f"forward (it lists neither acl_codegen nor inductor_kernels)")
        log.debug("%s: no graph capture; running the forward directly", self.ctx.graph_name)
        return self.make_forward(self.run_ctx)[0]


def graph_device_type(ctx: GraphContext) -> str:
    """The device of the graph's tensor inputs ('cpu' when it has none)."""
    return _graph_device(ctx).type


def _graph_device(ctx: GraphContext) -> torch.device:
    for x in ctx.example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _shared_pool(cfg) -> Tuple[Any, bool]:
    custom = cfg.get("aclgraph_config.use_custom_pool")
    return custom, custom is not None or not cfg.get(
        "debug.aclgraph.disable_mempool_reuse_in_same_fx")


# -- which captures share one memory pool (``aclgraph_config.pool_scope``) -------------------
class SharedPool:
    """A device graph memory pool that several graphs' factories join: its ``handle`` (what the
    device's graph capture takes); the pool's output bookkeeping hangs off this object
    (:func:`.outputs.pool_outputs_of`), so a replay of one graph watches the outputs of every
    graph captured later in the same pool."""

    def __init__(self, handle: Any):
        self.handle = handle


# The pools shared beyond one graph: ("device", type, index, rank) -> the device's SharedPool
# or the CPU record stand-in's RecordPool; ("custom", handle) -> a user's pool. Held weakly:
# the graphs' factories hold their pool, so a pool leaves with the last graph using it
# (``torch._dynamo.reset()``; a device frees a private pool once no graph uses it) and the next
# capture starts a fresh one.
_SHARED_POOLS: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()


@on_dynamo_reset
def _forget_shared_pools() -> None:
    """Graphs compiled after ``torch._dynamo.reset()`` start a fresh pool, even where a graph
    from before is still referenced somewhere (Dynamo keeps a resumed frame's compiled
    function in its module's globals): the dropped graphs keep theirs until they go."""
    _SHARED_POOLS.clear()


def pool_scope_key(ctx: GraphContext) -> Optional[tuple]:
    """The key of the pool ``ctx``'s graph joins beyond itself (None: a pool of its own):
    with ``pool_scope="device"`` its device and the calling rank (thread ranks of torch's
    threaded process group share the process, never a pool)."""
    if ctx.config.get("aclgraph_config.pool_scope") != "device":
        return None
    device = _graph_device(ctx)
    index = device.index
    if index is None:  # the current device of a device module (CPU has none)
        module = getattr(torch, device.type, None)
        current = getattr(module, "current_device", None)
        index = current() if callable(current) and _platform.for_device(
            device.type).has_graph_capture else None
    return ("device", device.type, index, calling_rank())


def _joined(key: Optional[tuple], make: Callable[[], Any]) -> Any:
    """The pool shared under ``key``, made by ``make`` on first use (None key: a fresh one)."""
    if key is None:
        return make()
    pool = _SHARED_POOLS.get(key)
    if pool is None:
        pool = _SHARED_POOLS[key] = make()
    return pool


def device_factory(ctx: GraphContext) -> Optional[CaptureFactory]:
    """The device graph factory of ``ctx``'s device (None: its device has no graph capture)."""
    plat = _platform.for_device(graph_device_type(ctx))
    if not plat.has_graph_capture:
        return None
    custom, share = _shared_pool(ctx.config)
    if custom is not None:  # every graph given this handle shares its pool
        pool = _joined(("custom", custom), lambda: SharedPool(custom))
    elif share:
        pool = _joined(pool_scope_key(ctx), lambda: SharedPool(plat.graph_pool_handle()))
    else:
        pool = None
    handle = pool.handle if pool is not None else None
    mode = ctx.config.get("npugraphex_config.capture_error_mode")
    return CaptureFactory(lambda: DeviceGraph(plat, handle, mode), share, pool)


# -- the steps (the ``backend`` stages of the ACL rows) ------------------------------------
def codegen_step(build: AclBuild) -> AclBuild:
    """``acl_codegen``: the runner's forward: the graph's own FX forward, called boxed."""
    run_ctx = build.transport.for_runner(build.ctx)
    generated = generate_forward(run_ctx.gm, run_ctx.graph_name)

    def make_forward(c: GraphContext):
        made = generated if c.gm is run_ctx.gm else generate_forward(c.gm, c.graph_name)
        return made.fn, made.source

    return dataclasses.replace(build, run_ctx=run_ctx, make_forward=make_forward,
                               source=generated.source, opaque=False)


def dump_step(build: AclBuild) -> AclBuild:
    """``acl_dump``: the FX graph and its code (when there is one) as py/txt."""
    c = build.run_ctx or build.ctx
    dump_fx_graph(c.gm, c.config.get("debug.graph_dump.type"), c.config.get("debug.graph_dump.path"),
                  c.graph_name, c.rank, c.config.get("mode"), build.source)
    return build


def device_allows_inductor(ctx: GraphContext) -> bool:
    """Inductor generates kernels for CPU and CUDA graphs; elsewhere the option is ignored
    with a warning naming the graph's device."""
    device = graph_device_type(ctx)
    plat = _platform.for_device(device)
    if plat.device_type == device and _platform.has(plat.name, "inductor_kernels"):
        return True
    warnings.warn(f"experimental_config.inductor_kernels is ignored on {device!r} "
                  f"(graph {ctx.graph_name}): the GE path fuses there", UserWarning,
                  stacklevel=2)
    return False


def inductor_step(build: AclBuild) -> AclBuild:
    """``inductor_kernels``: inductor compiles the forward (collectives made functional for
    it); the FX forward, if any, stays only for the dump."""
    if not device_allows_inductor(build.ctx):
        return build
    from .inductor_kernels import compile_forward

    keep_schedule = bool(build.ctx.config.get("distributed_config.overlap_collectives"))
    return dataclasses.replace(build, run_ctx=build.transport.for_runner(build.ctx,
                                                                         functional=True),
                               make_forward=lambda c: (compile_forward(c, keep_schedule), None),
                               opaque=True)


def value_ints_step(build: AclBuild) -> AclBuild:
    """``value_ints``: integer inputs that only reach tensor ops as values are split out, so
    one capture serves every value of them."""
    return dataclasses.replace(build, split=split_value_ints(_runner_ctx(build).gm))


def piecewise_step(build: AclBuild) -> AclBuild:
    """``piecewise``: the capture step splits the graph at these ops (:mod:`.piecewise`)."""
    ops = tuple(build.ctx.config.get("npugraphex_config.splitting_ops") or ())
    return dataclasses.replace(build, splitting_ops=ops)


def device_capture_step(build: AclBuild) -> AclBuild:
    """``device_capture``: NPU/CUDA graphs capture a graph whose inputs live on the device."""
    return dataclasses.replace(build, factory=device_factory(_runner_ctx(build)))


def capture_step(build: AclBuild) -> AclBuild:
    """``capture``: the runner that captures per graph key and replays (a device graph's
    factory from ``device_capture``, else the CPU stand-in's; none: no runner is made)."""
    c = _runner_ctx(build)
    added = c.gm.meta.get(EVENTS_ADDED)  # the stream_order stage's count, for the report
    if added is not None:
        report.stream_events(c.graph_name, added)
    split = build.split
    if split is not None:
        log.debug("%s: integer inputs %s are fed as values (one capture for every value)",
                  c.graph_name, split.value_positions)
        values = split.gm.graph.find_nodes(op="placeholder")[-split.n_values:] \
            if split.n_values else []
        c = dataclasses.replace(c, gm=split.gm, example_inputs=list(c.example_inputs)
                                + [p.meta["val"] for p in values])
    factory = build.factory
    if factory is None and not _platform.for_device(graph_device_type(c)).has_graph_capture:
        factory = _stand_in_factory(c, build.opaque)
    if factory is None:
        return build
    runner = None
    if build.splitting_ops:
        from .piecewise import build_piecewise

        device = graph_device_type(c)
        runner = build_piecewise(c, build.make_forward, factory, build.splitting_ops, device,
                                 build.opaque, _platform.for_device(device).has_graph_capture)
    if runner is None:
        fn, source = build.make_forward(c)
        runner = AclGraphRunner(fn, c, factory)
        runner.source = source
    return dataclasses.replace(build, factory=factory,
                               runner=runner if split is None else ValueIntRunner(split, runner))


def _stand_in_factory(c: GraphContext, opaque: bool) -> Optional[CaptureFactory]:
    """The CPU stand-in's factory; with ``pool_scope="device"`` it joins the stand-in pool of
    the graph's device and rank (the first graph there starts it)."""
    _, share = _shared_pool(c.config)
    key = pool_scope_key(c) if share else None
    joined = _SHARED_POOLS.get(key) if key is not None else None
    factory = stand_ins.capture_factory(graph_device_type(c), c.gm, c.graph_name, share, opaque,
                                        pool=joined)
    if key is not None and joined is None and factory is not None and factory.pool is not None:
        _SHARED_POOLS[key] = factory.pool
    return factory


def _runner_ctx(build: AclBuild) -> GraphContext:
    if build.run_ctx is None or build.make_forward is None:
        raise RuntimeError(f"{build.ctx.graph_name}: a capture step runs before any forward "
                           f"step (acl_codegen / inductor_kernels) in the mode row")
    return build.run_ctx
