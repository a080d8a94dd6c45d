"""Capture per graph key, then replay: the ACL-graph runner.

Input policy (as in TorchAir's ACL graph):
- parameters/buffers (static inputs) are used in place, never copied;
- mutated user inputs are used in place too (the graph writes them, so they are "written
  back" by construction); if one arrives at a new address the key is recaptured;
- other user inputs are copied into the captured buffers before each replay (``clone_input``);
  with ``clone_input=False`` the graph is captured on the caller's tensors and only inputs
  that arrive at a new address are copied.
Outputs are the captured buffers, overwritten by the next replay, unless
``enable_output_clone`` clones them. Past ``static_capture_size_limit`` keys the runner warns
once, drops every capture and runs the forward eagerly from then on.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from ..context import GraphContext
from . import report
from .rules import CaptureSkipped, find_uncapturable, skip_message

log = logging.getLogger("torchair_dist")


class _Capture:
    """One captured graph: its static inputs, the graph, and the pointers it was made on."""

    __slots__ = ("graph", "static_inputs", "copy_indices", "pinned_ptrs", "outputs",
                 "output_alias", "reads_caller_inputs", "replay_count_key")

    def __init__(self, graph, static_inputs, copy_indices, pinned_ptrs, outputs, output_alias,
                 private_buffers: bool):
        self.graph = graph
        self.static_inputs = static_inputs
        self.copy_indices = copy_indices      # inputs copied into static buffers per replay
        self.pinned_ptrs = pinned_ptrs        # {index: data_ptr} of inputs used in place
        self.outputs = outputs
        self.output_alias = output_alias      # per output: True if it aliases an input
        # The CPU record stand-in can read copied inputs where the caller holds them: the same
        # values as private buffers (clone_input) hold, without the copy. Not without
        # clone_input: then the buffer is the caller's first tensor and the copy is visible.
        self.reads_caller_inputs = private_buffers and bool(
            getattr(graph, "reads_caller_inputs", False))
        self.replay_count_key: tuple = ()  # the capture report's counter of its replays


class AclGraphRunner:
    """Boxed callable: ``runner(args) -> outputs``."""

    _boxed_call = True

    def __init__(self, forward: Callable, ctx: GraphContext, graph_factory: Callable[[], Any]):
        cfg = ctx.config
        self.shared_pool = bool(getattr(graph_factory, "shared_pool", False))
        self.uncapturable = find_uncapturable(ctx.gm)  # a device rule the graph breaks
        self._warned_uncaptured = False
        self._warned_pool = False
        self._all_mutated = sorted(set(ctx.mutated_input_indices))
        aclg = cfg.debug.aclgraph
        self.forward = forward
        self.name = ctx.graph_name
        self.graph_factory = graph_factory
        self.clone_input = aclg.clone_input.raw
        self.clone_output = aclg.enable_output_clone.raw
        self.capture_limit = aclg.static_capture_size_limit.raw
        self.force_recapture = cfg.npugraphex_config.force_recapture.raw
        frozen = cfg.experimental_config.frozen_parameter.raw
        n = len(ctx.example_inputs)
        self.static_indices = sorted(set(ctx.static_input_indices))
        self.mutated_indices = sorted(set(ctx.mutated_input_indices) - set(self.static_indices))
        in_place = set(self.static_indices) | set(self.mutated_indices)
        self.user_indices = [i for i in range(n) if i not in in_place]
        # Parameters re-key the capture when they move, unless the user froze them.
        self.key_ptr_indices = [] if frozen else self.static_indices
        self.key_shape_indices = sorted(self.user_indices + self.mutated_indices)
        self.captures: Dict[Any, _Capture] = {}
        self.fallback_eager = False
        self.capture_count = 0  # captures made, recaptures included (tests and stats)
        self._shape_keys: Dict[Any, str] = {}  # shape part of a key -> its report name

    # -- keys ---------------------------------------------------------------------------
    def capture_key(self, args: Sequence[Any]):
        """(shapes of the non-static inputs, addresses of the parameters)."""
        shapes = []
        for i in self.key_shape_indices:
            a = args[i]
            if isinstance(a, torch.Tensor):
                shapes.append(a.shape)  # a torch.Size: a hashable tuple
            else:
                shapes.append(a if isinstance(a, (int, float, bool)) else None)
        if not self.key_ptr_indices:
            return tuple(shapes), ()
        ptrs = tuple(args[i].data_ptr() if isinstance(args[i], torch.Tensor) else None
                     for i in self.key_ptr_indices)
        return tuple(shapes), ptrs

    def report_key(self, key) -> str:
        name = self._shape_keys.get(key[0])
        if name is None:
            name = self._shape_keys[key[0]] = str(
                [tuple(s) if isinstance(s, torch.Size) else s for s in key[0]])
        return name

    # -- call -----------------------------------------------------------------------------
    def __call__(self, args: List[Any]):
        if self.fallback_eager:
            return self.forward(args)
        if self.uncapturable is not None:
            return self._uncaptured(args)
        key = self.capture_key(args)
        cap = self.captures.get(key)
        if cap is None or self.force_recapture or (cap.pinned_ptrs and
                                                   self._recapture_reason(cap, args)):
            return self._capture_call(args, key, cap)
        # replay: the hot path, kept short (one call's overhead is measured in benchmarks)
        if cap.reads_caller_inputs:
            feed = cap.static_inputs.copy()
            for i in cap.copy_indices:
                feed[i] = args[i]
            cap.graph.replay(feed)
        else:
            self._copy_inputs(cap, args)
            cap.graph.replay()
        counts = report.counts()
        counts[cap.replay_count_key] = counts.get(cap.replay_count_key, 0) + 1
        log.debug("%s: replay of key %s", self.name, cap.replay_count_key[1])
        return self._returned(cap, cap.outputs)

    def _capture_call(self, args: List[Any], key, cap: Optional[_Capture]):
        reason = self._recapture_reason(cap, args)
        if cap is None and len(self.captures) >= self.capture_limit:
            report.capture_limit(self.name, self.report_key(key), self.capture_limit)
            return self._give_up(args)
        recapture = cap is not None or key[0] in {k[0] for k in self.captures}
        if cap is None:
            reason = ("moved parameter" if recapture else
                      "new shape" if self.captures else "first capture")
        try:
            cap, outputs = self._capture(args)
        except CaptureSkipped as skip:
            self.uncapturable = skip.found
            return self._uncaptured(args)
        self.captures[key] = cap
        cap.replay_count_key = report.replay_key(self.name, self.report_key(key))
        report.captured(self.name, self.report_key(key), reason, recapture)
        return self._returned(cap, outputs)

    def _returned(self, cap: _Capture, outputs):
        if self.clone_output or self._pool_shared_by_several():
            return [o.clone() if isinstance(o, torch.Tensor) and not alias else o
                    for o, alias in zip(outputs, cap.output_alias)]
        return list(outputs)

    def _recapture_reason(self, cap: Optional[_Capture], args) -> str:
        """Why the capture of this key is made again ("" for none)."""
        if cap is None:
            return ""
        if self.force_recapture:
            return "force_recapture"
        for i, ptr in cap.pinned_ptrs.items():
            if args[i].data_ptr() != ptr:
                return f"moved mutated input {i}"
        return ""

    def _pool_shared_by_several(self) -> bool:
        """Captures sharing one pool: a replay may overwrite outputs kept from another key's
        replay (its intermediates can reuse their blocks), so outputs are returned as copies."""
        if not (self.shared_pool and len(self.captures) > 1):
            return False
        if not self._warned_pool:
            self._warned_pool = True
            warnings.warn(
                f"graph {self.name} now holds {len(self.captures)} captures (graph keys) that "
                f"share one memory pool: a replay of one key can overwrite the outputs kept "
                f"from another key's replay, so its outputs are returned as copies from now on. "
                f"Set config.debug.aclgraph.disable_mempool_reuse_in_same_fx=True to give each "
                f"capture its own pool (no copies, more memory).", UserWarning, stacklevel=3)
        return True

    def _uncaptured(self, args):
        if not self._warned_uncaptured:
            self._warned_uncaptured = True
            warnings.warn(skip_message(self.name, self.uncapturable), UserWarning, stacklevel=3)
        found = self.uncapturable
        report.uncaptured(self.name, f"{found.op} {found.why} at {found.where}")
        return self.forward(args)

    def _copy_inputs(self, cap: _Capture, args) -> None:
        static = cap.static_inputs
        if self.clone_input:
            for i in cap.copy_indices:
                static[i].copy_(args[i])
        else:
            for i in cap.copy_indices:
                if args[i].data_ptr() != static[i].data_ptr():
                    static[i].copy_(args[i])

    def _capture(self, args):
        """Capture a graph for ``args``; returns (capture, outputs of this call)."""
        static_inputs = list(args)
        copy_indices = [i for i in self.user_indices if isinstance(args[i], torch.Tensor)]
        if self.clone_input:
            for i in copy_indices:
                buf = torch.empty_like(args[i], memory_format=torch.contiguous_format)
                buf.copy_(args[i])
                static_inputs[i] = buf
        pinned = {i: args[i].data_ptr() for i in self.mutated_indices
                  if isinstance(args[i], torch.Tensor)}
        graph = self.graph_factory()
        if getattr(graph, "executes_capture", False):
            first = self._capture_restorable(graph, static_inputs, args)
        else:
            first = graph.capture(self.forward, static_inputs)
        outputs = graph.outputs
        self.capture_count += 1
        ptrs = {a.untyped_storage().data_ptr() for a in static_inputs
                if isinstance(a, torch.Tensor)}
        alias = [isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in ptrs
                 for o in outputs]
        return _Capture(graph, static_inputs, copy_indices, pinned, outputs, alias,
                        self.clone_input), first

    def _capture_restorable(self, graph, static_inputs, args):
        """A stand-in capture really runs the graph: if it stops half way (a host-side call),
        undo its input mutations so the uncaptured run applies them exactly once."""
        saved = {i: args[i].clone() for i in self._all_mutated
                 if isinstance(args[i], torch.Tensor)}
        try:
            return graph.capture(self.forward, static_inputs)
        except CaptureSkipped:
            with torch.no_grad():
                for i, value in saved.items():
                    args[i].copy_(value)
            raise

    def _give_up(self, args):
        warnings.warn(
            f"The static_capture_size_limit reached: graph {self.name} already holds "
            f"{len(self.captures)} captures (config.debug.aclgraph.static_capture_size_limit="
            f"{self.capture_limit}); it runs eagerly from now on. Raise the limit or mark "
            f"fewer dimensions dynamic.", UserWarning, stacklevel=2)
        self.captures.clear()
        self.fallback_eager = True
        return self.forward(args)
