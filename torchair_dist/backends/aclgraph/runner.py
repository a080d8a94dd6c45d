"""Capture per graph key, then replay: the ACL-graph runner.

The runner puts together one object per policy and reads top to bottom:

- :class:`~.keys.CaptureKey`: which calls share a capture, and when one is made again;
- :class:`~.inputs.InputBuffers`: which inputs are copied into captured buffers, and the
  buffers (one per input position, sized for the largest capture);
- :class:`~.outputs.OutputLifetime`: outputs handed out without copies, preserved when a replay
  is about to reuse memory a caller still holds (or copied on every call);
- :class:`~.limit.CaptureLimit`: ``static_capture_size_limit``;
- :class:`~.sizes.DeclaredSizes`: declared ``capture_sizes``, captured at the first call,
  largest first, other sizes padded up or run eagerly.

A call whose key was captured, and whose capture needs no check per call, replays its
:class:`~.entry.CaptureEntry` directly (one dictionary lookup: :meth:`AclGraphRunner.__call__`);
every other call takes :meth:`AclGraphRunner._call`. Captures of one graph share one memory
pool unless ``debug.aclgraph.disable_mempool_reuse_in_same_fx``. Each capture's time and bytes
go to the capture report (:mod:`.report`).
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Dict, List

import torch

from ...platform.interfaces import CaptureFactory
from ..context import GraphContext
from . import report
from .entry import CaptureEntry
from .inputs import InputBuffers
from .keys import CaptureKey
from .limit import CaptureLimit
from .outputs import OutputLifetime, pool_outputs_of
from .rules import CaptureSkipped, find_uncapturable, skip_message
from .sizes import DeclaredSizes

_is_grad = torch.is_grad_enabled
_set_grad = torch._C._set_grad_enabled


class AclGraphRunner:
    """Boxed callable: ``runner(args) -> outputs``."""

    _boxed_call = True

    def __init__(self, forward: Callable, ctx: GraphContext, graph_factory: CaptureFactory,
                 declared_sizes: bool = True):
        """``declared_sizes=False``: ``capture_sizes`` are served by the caller (a piece of a
        piecewise graph: the whole graph pads); this runner captures the shapes it is given."""
        cfg = ctx.config
        self.name = ctx.graph_name
        self.forward = forward
        self.graph_factory = graph_factory
        self.shared_pool = graph_factory.shared_pool
        self.uncapturable = find_uncapturable(ctx.gm)  # a device rule the graph breaks
        self._warned_uncaptured = False
        n = len(ctx.example_inputs)
        self.static_indices = sorted(set(ctx.static_input_indices))
        self.mutated_indices = sorted(set(ctx.mutated_input_indices) - set(self.static_indices))
        in_place = set(self.static_indices) | set(self.mutated_indices)
        self.user_indices = [i for i in range(n) if i not in in_place]
        # parameters re-key the capture when they move, unless the user froze them
        frozen = cfg.get("experimental_config.frozen_parameter")
        self.keys = CaptureKey(sorted(self.user_indices + self.mutated_indices),
                               [] if frozen else self.static_indices, ctx.example_inputs,
                               bool(cfg.get("npugraphex_config.force_recapture")))
        self.inputs = InputBuffers(self.name, self.user_indices,
                                   cfg.get("debug.aclgraph.clone_input"))
        self.outputs = OutputLifetime(
            self.name, cfg.get("debug.aclgraph.enable_output_clone"), ctx.example_inputs,
            pool_outputs_of(graph_factory) if self.shared_pool else None)
        self.limit = CaptureLimit(self.name, cfg.get("debug.aclgraph.static_capture_size_limit"))
        self.declared = DeclaredSizes(cfg, ctx.gm, ctx.example_inputs, self.user_indices,
                                      sorted(set(ctx.mutated_input_indices)), self.name,
                                      declared_sizes)
        self.captures: Dict[Any, CaptureEntry] = {}
        # the captures a call may replay without the checks of _call (no forced recapture, no
        # input pinned by address, no output copies)
        self._fast: Dict[Any, CaptureEntry] = {}
        self._key = self.keys.key
        self._fast_get = self._fast.get
        self.capture_count = 0  # captures made, recaptures included (tests and stats)

    # -- call -------------------------------------------------------------------------------
    def __call__(self, args: List[Any]):
        entry = self._fast_get(self._key(args))
        if entry is None:
            return self._call(args)
        return entry.replay(args)

    def direct_call(self, first: Callable) -> Callable:
        """``forward(*args)`` for Dynamo, in place of AOT's forward ``first`` when AOT's runtime
        wrapper has nothing to do (:mod:`torchair_dist.pipeline.aot`): the first call goes
        through ``first``; later ones run with grad mode off, as AOT's wrapper would (a
        replay turns it off itself: :class:`~torchair_dist.platform.interfaces.CaptureGraph`)."""
        key, fast_get, slow = self._key, self._fast_get, self._call
        pending = [first]

        def direct(*args):
            if pending:
                return pending.pop()(*args)
            entry = fast_get(key(args))
            if entry is not None:  # a graph's replay runs with grad mode off by itself
                return entry.replay(args)
            grad = _is_grad()
            if grad:
                _set_grad(False)
            try:
                return slow(list(args))
            finally:
                if grad:
                    _set_grad(True)

        return direct

    def _call(self, args: List[Any]):
        """Every call the fast table does not answer: the first of a key, uncaptured graphs,
        declared sizes, captures whose replay checks something per call."""
        if self.uncapturable is not None:
            return self._uncaptured(args)
        declared = self.declared
        if declared.pending:
            with declared.first_captures(args) as plan:
                for size, sized, made_up in plan:
                    try:
                        self._capture_declared(sized)
                    except Exception as exc:  # noqa: BLE001 - a made-up one is reported
                        if not made_up:
                            raise
                        declared.not_up_front(size, exc)
        route = declared.route(args)
        if route is not None:
            if route.eager:
                return self.forward(args)
            with route.restoring():
                return route.sliced(self._call(route.args))
        key = self._key(args)
        entry = self.captures.get(key)
        if entry is None:
            return self._capture_call(args, key)
        reason = self.keys.recapture_reason(entry.pinned, args)
        if reason:
            return self._capture_call(args, key, entry, reason)
        handed = entry.replay(args)
        return self.outputs.returned(entry, entry.outputs) if self.outputs.copies else handed

    # -- capture ----------------------------------------------------------------------------
    @torch.compiler.disable  # a capture is never Dynamo's to trace (route.NpuFxCompiler)
    def _capture_call(self, args: List[Any], key, old: CaptureEntry = None, reason: str = ""):
        """Capture ``key`` (again, replacing ``old``, for ``reason``) and return this call's
        outputs."""
        recapture = old is not None
        if old is None:
            if not self.limit.allows(len(self.captures)):
                return self.limit.past(self.keys.name(key), len(self.captures), self.forward,
                                       args)
            reason, recapture = CaptureKey.first_reason(key, self.captures,
                                                        lambda entry: entry.params)
        started = time.perf_counter()
        try:
            entry, first = self._capture(args, key)
        except CaptureSkipped as skip:
            self.uncapturable = skip.found
            return self._uncaptured(args)
        entry.seconds = time.perf_counter() - started
        entry.bytes = entry.graph.pool_bytes()
        if old is not None:
            self.outputs.drop(old)
        self.outputs.adopt(entry)
        self.captures[key] = entry
        entry.replays = report.replay_cell(self.name, entry.name)
        report.captured(self.name, entry.name, reason, recapture, entry.seconds, entry.bytes)
        memory = self.memory()
        report.pool(self.name, memory)
        self.inputs.check(memory["input_bytes"], len(self.captures))
        if self.keys.force_recapture or entry.pinned or self.outputs.copies:
            self._fast.pop(key, None)
        else:
            self._fast[key] = entry
        return self.outputs.returned(entry, first)

    def _capture(self, args: List[Any], key):
        """Capture a graph for ``args``; returns (its entry, the outputs of this call)."""
        feed = self.inputs.for_capture(args)
        pinned = {i: args[i].data_ptr() for i in self.mutated_indices
                  if isinstance(args[i], torch.Tensor)}
        graph = self.graph_factory()
        first = graph.capture(self.forward, feed.buffers, feed)
        self.capture_count += 1
        outputs = graph.outputs
        ptrs = {a.untyped_storage().data_ptr() for a in feed.buffers
                if isinstance(a, torch.Tensor)}
        alias = tuple(isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in ptrs
                      for o in outputs)
        pool_positions = tuple(i for i, (o, a) in enumerate(zip(outputs, alias))
                               if isinstance(o, torch.Tensor) and not a)
        entry = CaptureEntry(key, self.keys.name(key), graph, feed, outputs, alias,
                             pool_positions, pinned, self.keys.params_of(args),
                             graph_name=self.name)
        return entry, first

    def _capture_declared(self, sized: List[Any]) -> None:
        """One declared size's capture at the first call (a key captured already, or past the
        capture limit: none)."""
        key = self._key(sized)
        if key not in self.captures and self.limit.allows(len(self.captures)):
            self._capture_call(sized, key)

    def _uncaptured(self, args):
        if not self._warned_uncaptured:
            self._warned_uncaptured = True
            warnings.warn(skip_message(self.name, self.uncapturable), UserWarning, stacklevel=3)
        found = self.uncapturable
        report.uncaptured(self.name, f"{found.op} {found.why} at {found.where}")
        return self.forward(args)

    # -- memory -----------------------------------------------------------------------------
    def release(self) -> None:
        """Drop every capture and input buffer (their memory is freed now, wherever the runner
        object itself is still referenced); a later call captures again."""
        for entry in self.captures.values():
            self.outputs.drop(entry)
        self.captures.clear()
        self._fast.clear()
        self.inputs.release()

    def memory(self) -> Dict[str, Any]:
        """The graph's memory as its captures report it: ``pool_bytes`` (what each capture
        added to its pool, summed: captures sharing one pool take about the largest one's
        blocks), ``input_bytes`` (the copied inputs' buffers), ``captures``."""
        sizes = [e.bytes for e in self.captures.values() if e.bytes is not None]
        return {"pool_bytes": sum(sizes) if sizes else None,
                "input_bytes": self.inputs.held_bytes([e.feed for e in self.captures.values()]),
                "captures": len(self.captures)}
