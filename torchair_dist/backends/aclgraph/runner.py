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

log = logging.getLogger("torchair_dist")


class _Capture:
    """One captured graph: its static inputs, the graph, and the pointers it was made on."""

    __slots__ = ("graph", "static_inputs", "copy_indices", "pinned_ptrs", "outputs",
                 "output_alias")

    def __init__(self, graph, static_inputs, copy_indices, pinned_ptrs, outputs, output_alias):
        self.graph = graph
        self.static_inputs = static_inputs
        self.copy_indices = copy_indices      # inputs copied into static buffers per replay
        self.pinned_ptrs = pinned_ptrs        # {index: data_ptr} of inputs used in place
        self.outputs = outputs
        self.output_alias = output_alias      # per output: True if it aliases an input


class AclGraphRunner:
    """Boxed callable: ``runner(args) -> outputs``."""

    _boxed_call = True

    def __init__(self, forward: Callable, ctx: GraphContext, graph_factory: Callable[[], Any]):
        cfg = ctx.config
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

    # -- keys ---------------------------------------------------------------------------
    def capture_key(self, args: Sequence[Any]):
        key = []
        for i in self.key_shape_indices:
            a = args[i]
            key.append(a.shape if isinstance(a, torch.Tensor) else
                       (a if isinstance(a, (int, float, bool)) else None))
        for i in self.key_ptr_indices:
            a = args[i]
            key.append(a.data_ptr() if isinstance(a, torch.Tensor) else None)
        return tuple(key)

    # -- call -----------------------------------------------------------------------------
    def __call__(self, args: List[Any]):
        if self.fallback_eager:
            return self.forward(args)
        key = self.capture_key(args)
        cap = self.captures.get(key)
        if cap is None or self.force_recapture or self._moved(cap, args):
            if cap is None and len(self.captures) >= self.capture_limit:
                return self._give_up(args)
            cap, outputs = self._capture(args)
            self.captures[key] = cap
        else:
            self._copy_inputs(cap, args)
            cap.graph.replay()
            outputs = cap.outputs
        if self.clone_output:
            return [o.clone() if isinstance(o, torch.Tensor) and not alias else o
                    for o, alias in zip(outputs, cap.output_alias)]
        return list(outputs)

    def _moved(self, cap: _Capture, args) -> bool:
        for i, ptr in cap.pinned_ptrs.items():
            if args[i].data_ptr() != ptr:
                log.debug("%s: input %d moved, recapturing", self.name, i)
                return True
        return False

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
        first = graph.capture(self.forward, static_inputs)
        outputs = graph.outputs
        self.capture_count += 1
        ptrs = {a.untyped_storage().data_ptr() for a in static_inputs
                if isinstance(a, torch.Tensor)}
        alias = [isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in ptrs
                 for o in outputs]
        log.debug("%s: captured key #%d", self.name, len(self.captures) + 1)
        return _Capture(graph, static_inputs, copy_indices, pinned, outputs, alias), first

    def _give_up(self, args):
        warnings.warn(
            f"The static_capture_size_limit reached: graph {self.name} already holds "
            f"{len(self.captures)} captures (config.debug.aclgraph.static_capture_size_limit="
            f"{self.capture_limit}); it runs eagerly from now on. Raise the limit or mark "
            f"fewer dimensions dynamic.", UserWarning, stacklevel=2)
        self.captures.clear()
        self.fallback_eager = True
        return self.forward(args)
