"""Piecewise graphs (``npugraphex_config.piecewise``): capture the graph between its attention ops.

A decode step's attention reads a KV length that changes every step; captured whole, the graph
has a new key (a new capture) per length. Split at the ``splitting_ops`` (by default the
attention ops), the graph becomes pieces: each splitting op alone in a piece that runs eagerly
(its own FX code, every call), and the pieces between them, each an :class:`AclGraphRunner` of
its own that captures per *its* input shapes. The pieces around attention see the batch size,
not the length, so a decode captures once per batch size (vLLM's piecewise CUDA graphs).

* One pool: the captured pieces of one graph get graph factories of one pool (the device's
  pool handle; the CPU record stand-in's :class:`~torchair_dist.cpu.record_pool.RecordPool`), unless
  ``debug.aclgraph.disable_mempool_reuse_in_same_fx`` gives each capture its own.
* Declared ``capture_sizes``: the whole graph pads (its batch dim), once, at the top; the
  pieces then only see declared sizes, captured at the first call, largest first.
* Outputs: a piece's outputs are read by the later pieces of the same call, before that piece
  replays again; the graph's outputs are the pieces' outputs and follow their lifetime rule
  (:mod:`.outputs`: one kept across the graph's next call is preserved by a copy).
* Costs: a captured piece copies the inputs it does not own (the eager attention's output, the
  user's inputs) into its captured buffers on a device, as any captured graph does.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from ...passes.graph_info import mutated_input_indices
from ...cpu import stand_ins
from ...platform.interfaces import CaptureFactory
from ..context import GraphContext
from .runner import AclGraphRunner
from .sizes import DeclaredSizes

log = logging.getLogger("torchair_dist")


def op_name(target: Any) -> Optional[str]:
    """``aten.addmm.default`` for ``torch.ops.aten.addmm.default`` (None: not an op)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return None


def is_splitting_op(node: torch.fx.Node, names: Sequence[str]) -> bool:
    """``node`` calls an op named in ``names`` (``namespace.op`` matches every overload)."""
    if node.op != "call_function":
        return False
    name = op_name(node.target)
    if name is None:
        return False
    packet = str(node.target.overloadpacket) if isinstance(
        node.target, torch._ops.OpOverload) else name
    return name in names or packet in names


def partition(gm: torch.fx.GraphModule, names: Sequence[str]) -> Dict[torch.fx.Node, int]:
    """Each node's piece, in program order: a splitting op (and the items taken out of its
    result) alone in its piece; the nodes between two splitting ops in one piece."""
    part: Dict[torch.fx.Node, int] = {}
    piece = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if is_splitting_op(node, names):
            piece += 1
            part[node] = piece
            piece += 1
        elif (node.op == "call_function" and node.target is operator.getitem
              and isinstance(node.args[0], torch.fx.Node) and node.args[0] in part
              and is_splitting_op(node.args[0], names)):
            part[node] = part[node.args[0]]
        else:
            part[node] = piece
    return part


@dataclasses.dataclass
class Piece:
    """One piece: its graph, whether it is captured, and what runs it."""

    name: str
    gm: torch.fx.GraphModule
    captured: bool
    runner: Any = None  # the piece's AclGraphRunner (captured pieces)


def _captured_piece(runner: AclGraphRunner, single: bool) -> Callable:
    """What the split graph calls for a captured piece: its runner (boxed), as a plain
    function in the split module's ``__dict__`` (no module call on the way to a replay);
    ``single``: the piece returns one value, not a tuple (torch 2.11's split)."""
    if single:
        def piece(*args):
            return runner(list(args))[0]
    else:
        def piece(*args):
            return tuple(runner(list(args)))
    return piece


def _split(gm: torch.fx.GraphModule, part: Dict[torch.fx.Node, int]) -> torch.fx.GraphModule:
    """``split_module`` in the graph's order; pieces return tuples where torch can say so
    (``tuple_return``, torch 2.13+), else a one-output piece returns its value."""
    import inspect

    extra = {"tuple_return": True} if "tuple_return" in inspect.signature(
        split_module).parameters else {}
    return split_module(gm, None, lambda node: part[node], keep_original_order=True, **extra)


def _returns_one(gm: torch.fx.GraphModule) -> bool:
    (output,) = gm.graph.find_nodes(op="output")
    return not isinstance(output.args[0], (tuple, list))


def _piece_ctx(ctx: GraphContext, split: torch.fx.GraphModule, call: torch.fx.Node,
               gm: torch.fx.GraphModule, name: str) -> GraphContext:
    """A piece's context: its example inputs, static inputs (the graph's static inputs it
    receives) and mutated inputs (computed from its own graph)."""
    top = {node: i for i, node in enumerate(split.graph.find_nodes(op="placeholder"))}
    static = set(ctx.static_input_indices)
    placeholders = gm.graph.find_nodes(op="placeholder")
    examples = [p.meta.get("val") for p in placeholders]
    piece_static = [i for i, arg in enumerate(call.args)
                    if isinstance(arg, torch.fx.Node) and top.get(arg) in static]
    return dataclasses.replace(ctx, gm=gm, example_inputs=examples,
                               static_input_indices=piece_static,
                               mutated_input_indices=mutated_input_indices(gm),
                               graph_name=name, original_gm=None)


def _piece_factory(ctx: GraphContext, factory: CaptureFactory, device: str, opaque: bool,
                   on_device: bool) -> Optional[CaptureFactory]:
    """The piece's graph factory, in the pool of the graph's ``factory``: a device factory
    serves every piece as it is; the CPU stand-in records the piece's own graph."""
    if on_device:
        return factory
    return stand_ins.capture_factory(device, ctx.gm, ctx.graph_name, factory.shared_pool,
                                     opaque, pool=factory.pool)


def build_piecewise(ctx: GraphContext, make_forward: Callable, factory: CaptureFactory,
                    names: Sequence[str], device: str, opaque: bool,
                    on_device: bool) -> Optional["PiecewiseRunner"]:
    """The piecewise runner of ``ctx``'s graph split at the ops ``names``, or None when the
    graph holds none of them (it is then captured whole)."""
    part = partition(ctx.gm, names)
    split_ids = {part[n] for n in part if is_splitting_op(n, names)}
    if not split_ids:
        log.debug("%s: piecewise: no splitting op in the graph; captured whole", ctx.graph_name)
        return None
    split = _split(ctx.gm, part)
    pieces: List[Piece] = []
    for call in split.graph.find_nodes(op="call_module"):
        index = int(call.target.rsplit("_", 1)[1])
        sub = getattr(split, call.target)
        name = f"{ctx.graph_name}.piece_{index}"
        if index in split_ids:
            pieces.append(Piece(name, sub, False))
            continue
        _bind_free_sizes(split, call, sub)
        single = _returns_one(sub)
        if single:  # torch 2.11's split: the piece's graph returns its one value as a tuple
            (output,) = sub.graph.find_nodes(op="output")
            output.args = ((output.args[0],),)
            sub.recompile()
        pctx = _piece_ctx(ctx, split, call, sub, name)
        pfactory = _piece_factory(pctx, factory, device, opaque, on_device)
        with _piece_compile():
            forward = make_forward(pctx)[0]
        runner = AclGraphRunner(forward, pctx, pfactory, declared_sizes=False)
        delattr(split, call.target)  # the piece's module: its runner runs it now
        split.__dict__[call.target] = _captured_piece(runner, single)
        pieces.append(Piece(name, sub, True, runner))
    split.recompile()
    log.debug("%s: piecewise: %d pieces, %d run eagerly (%s)", ctx.graph_name, len(pieces),
              len(split_ids), ", ".join(p.name for p in pieces if not p.captured))
    return PiecewiseRunner(ctx, split, pieces, make_forward(ctx)[0])


@contextlib.contextmanager
def _piece_compile():
    """A piece compiled inside the whole graph's compile leaves the tracing context as it
    found it: a compiler that records its outputs' strides there (inductor) records the
    piece's for the piece alone, not as the graph's."""
    context = torch._guards.TracingContext.try_get()
    strides = getattr(context, "output_strides", None)
    if strides is None:
        yield
        return
    saved = list(strides)
    strides.clear()
    try:
        yield
    finally:
        strides[:] = saved


def _bindable(value: Any) -> set:
    """The symbols a piece can read off an input: its plain symbolic sizes (and a SymInt
    input itself)."""
    if isinstance(value, torch.SymInt):
        return {value.node.expr} if value.node.expr.is_Symbol else set()
    if not isinstance(value, torch.Tensor):
        return set()
    found = set()
    for n in list(value.shape) + list(value.stride()):
        if isinstance(n, torch.SymInt) and n.node.expr.is_Symbol:
            found.add(n.node.expr)
    return found


def _free(value: Any) -> set:
    if isinstance(value, torch.SymInt):
        return set(value.node.expr.free_symbols)
    if isinstance(value, torch.Tensor):
        return {sym for n in list(value.shape) + list(value.stride())
                if isinstance(n, torch.SymInt) for sym in n.node.expr.free_symbols}
    if isinstance(value, (list, tuple)):
        return set().union(*(_free(v) for v in value)) if value else set()
    return set()


def _bind_free_sizes(split: torch.fx.GraphModule, call: torch.fx.Node,
                     sub: torch.fx.GraphModule) -> None:
    """Give a piece the graph's size inputs its values' shapes use but none of its inputs
    carries as a size (a piece that only receives attention's output ``[1, h, t, d]`` while
    its reshape's shape is ``t * s // 16``): a compiler that binds every symbol from the
    inputs (inductor) needs them; the split graph passes them along."""
    placeholders = sub.graph.find_nodes(op="placeholder")
    bound = set().union(*(_bindable(p.meta.get("val")) for p in placeholders)) \
        if placeholders else set()
    used = set()
    for node in sub.graph.nodes:
        if node.op != "output":
            used |= _free(node.meta.get("val"))
    missing = used - bound
    if not missing:
        return
    sizes = {p.meta["val"].node.expr: p for p in split.graph.find_nodes(op="placeholder")
             if isinstance(p.meta.get("val"), torch.SymInt) and p.meta["val"].node.expr.is_Symbol}
    added = [sizes[sym] for sym in sorted(missing, key=str) if sym in sizes]
    if not added:
        return
    last = placeholders[-1] if placeholders else None
    for top in added:
        if last is not None:
            with sub.graph.inserting_after(last):
                new = sub.graph.placeholder(top.name)
        else:
            new = sub.graph.placeholder(top.name)
        new.meta["val"] = top.meta["val"]
        last = new
    sub.recompile()
    call.args = tuple(call.args) + tuple(added)


def _release_all(runners: List[AclGraphRunner]) -> None:
    for runner in runners:
        runner.release()


class PiecewiseRunner:
    """Boxed callable: the split graph, calling each captured piece's runner and running the
    splitting ops eagerly; declared batch sizes are padded here, once for all pieces."""

    _boxed_call = True

    def __init__(self, ctx: GraphContext, split: torch.fx.GraphModule, pieces: List[Piece],
                 forward: Callable):
        cfg = ctx.config
        self.name = ctx.graph_name
        self.split = split
        self._run = split.forward  # the split graph's code, without a module call around it
        self.pieces = pieces
        self.forward = forward  # the whole graph uncaptured: for sizes run eagerly
        self._mutated = sorted(set(ctx.mutated_input_indices))
        user = [i for i in range(len(ctx.example_inputs))
                if i not in set(ctx.static_input_indices) | set(self._mutated)]
        self.declared = DeclaredSizes(cfg, ctx.gm, ctx.example_inputs, user, self._mutated,
                                      self.name)
        # The pieces' runners hang off the split GraphModule, which FX's own reference cycles
        # keep until the collector runs: drop their captures (their memory) with this runner.
        weakref.finalize(self, _release_all, self.runners)

    @property
    def runners(self) -> List[AclGraphRunner]:
        return [p.runner for p in self.pieces if p.captured]

    @property
    def capture_count(self) -> int:
        return sum(r.capture_count for r in self.runners)

    def memory(self) -> Dict[str, Any]:
        """The pieces' memory summed (``pool_bytes``: the pieces' own figures added up, an
        upper bound where they share a pool)."""
        parts = [r.memory() for r in self.runners]
        pools = [m["pool_bytes"] for m in parts if m["pool_bytes"] is not None]
        return {"pool_bytes": sum(pools) if pools else None,
                "input_bytes": sum(m["input_bytes"] for m in parts),
                "captures": sum(m["captures"] for m in parts)}

    def __call__(self, args: List[Any]):
        declared = self.declared
        if declared.pending:  # each piece captures every declared size
            with declared.first_captures(args) as plan:
                for size, sized, made_up in plan:
                    try:
                        self._run(*sized)
                    except Exception as exc:  # noqa: BLE001 - a made-up one is reported
                        if not made_up:
                            raise
                        declared.not_up_front(size, exc)
        route = declared.route(args)
        if route is None:
            return list(self._run(*args))
        if route.eager:
            return self.forward(args)
        with route.restoring():
            return route.sliced(self._run(*route.args))

