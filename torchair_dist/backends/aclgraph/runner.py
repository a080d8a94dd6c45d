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
from typing import Any, Callable, Dict, List, Optional

import torch

from ...base.layout import clone_keeping_views, same_layout_copy, written_part
from ...platform.interfaces import CaptureFactory
from ..context import GraphContext
from . import report
from .rules import CaptureSkipped, find_uncapturable, skip_message

log = logging.getLogger("torchair_dist")


class _Capture:
    """One captured graph: its static inputs, the graph, and the pointers it was made on."""

    __slots__ = ("graph", "static_inputs", "copy_indices", "pinned_ptrs", "outputs",
                 "output_alias", "reads_caller_inputs", "replays", "fast")

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
        self.reads_caller_inputs = private_buffers and graph.reads_caller_inputs
        self.replays: List[int] = [0]  # the capture report's counter of its replays
        self.fast: tuple = ()  # what the runner's generated replay reads (_REPLAY_BODY)


class AclGraphRunner:
    """Boxed callable: ``runner(args) -> outputs``."""

    _boxed_call = True

    def __init__(self, forward: Callable, ctx: GraphContext, graph_factory: CaptureFactory):
        cfg = ctx.config
        self.shared_pool = graph_factory.shared_pool
        self.uncapturable = find_uncapturable(ctx.gm)  # a device rule the graph breaks
        self._warned_uncaptured = False
        self._warned_pool = False
        self._all_mutated = sorted(set(ctx.mutated_input_indices))
        self.forward = forward
        self.name = ctx.graph_name
        self.graph_factory = graph_factory
        self.clone_input = cfg.get("debug.aclgraph.clone_input")
        self.clone_output = cfg.get("debug.aclgraph.enable_output_clone")
        self.capture_limit = cfg.get("debug.aclgraph.static_capture_size_limit")
        self.force_recapture = cfg.get("npugraphex_config.force_recapture")
        frozen = cfg.get("experimental_config.frozen_parameter")
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
        # key -> the ``fast`` tuple of a capture that needs no check per call (_install_fast)
        self._fast: Dict[Any, tuple] = {}
        self._first_direct: Optional[Callable] = None  # direct_call: the first call's route
        self.capture_key, self.entry, self._replay, self._direct = _key_and_entry(
            self.key_shape_indices, self.key_ptr_indices, ctx.example_inputs, self._fast,
            self._call, self._direct_slow)

    # -- keys ---------------------------------------------------------------------------
    def report_key(self, key) -> str:
        name = self._shape_keys.get(key[0])
        if name is None:
            name = self._shape_keys[key[0]] = str(
                [tuple(s) if isinstance(s, torch.Size) else s for s in key[0]])
        return name

    # -- call -----------------------------------------------------------------------------
    def __call__(self, args: List[Any]):
        return self.entry(args)

    def direct_call(self, first: Callable) -> Callable:
        """``forward(*args)`` for Dynamo, in place of AOT's forward ``first`` when AOT's runtime
        wrapper has nothing to do (:mod:`torchair_dist.pipeline.aot`): the first call goes
        through ``first``; later ones replay in one generated frame where they can, else run
        this runner with grad mode off, as AOT's wrapper would."""
        self._first_direct = first
        return self._direct

    def _direct_slow(self, args):
        """``direct``'s calls the fast table does not answer: the first one (through AOT's
        forward), then :meth:`_call` with grad mode off."""
        first = self._first_direct
        if first is not None:
            self._first_direct = None
            return first(*args)
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            return self._call(list(args))
        finally:
            if grad:
                torch._C._set_grad_enabled(True)

    def _call(self, args: List[Any]):
        """Every call the fast table does not answer: the first of a key, eager fallbacks,
        captures whose replay checks something per call (moved inputs, copies of outputs)."""
        if self.fallback_eager:
            return self.forward(args)
        if self.uncapturable is not None:
            return self._uncaptured(args)
        key = self.capture_key(args)
        cap = self.captures.get(key)
        if cap is None or self.force_recapture or (cap.pinned_ptrs and
                                                   self._recapture_reason(cap, args)):
            return self._capture_call(args, key, cap)
        self._replay(args, cap.fast)  # a pinned input at its captured address
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
        key_name = self.report_key(key)
        cap.replays = report.replay_cell(self.name, key_name)
        report.captured(self.name, key_name, reason, recapture)
        expanded = tuple(i for i in cap.copy_indices
                         if written_part(cap.static_inputs[i]) is not cap.static_inputs[i])
        cap.fast = (cap.reads_caller_inputs, cap.static_inputs,
                    tuple(i for i in cap.copy_indices if i not in expanded),
                    tuple((i, written_part) for i in expanded), self.clone_input,
                    cap.graph.replay, cap.outputs, cap.replays, self.name,
                    key_name)
        self._install_fast(key, cap)
        return self._returned(cap, outputs)

    def _install_fast(self, key, cap: _Capture) -> None:
        """Give ``key`` a replay function that skips the per-call checks of :meth:`_call`
        where none applies: no forced recapture, no input pinned by address, no output
        clones, one capture in a shared pool (a second one drops every fast replay)."""
        self._fast.pop(key, None)
        if self.shared_pool and len(self.captures) > 1:
            self._fast.clear()
            return
        if self.force_recapture or cap.pinned_ptrs or self.clone_output:
            return
        if cap.reads_caller_inputs:
            # The graph's own replay from the caller's inputs: with at most one capture in the
            # pool (above) there is no later capture whose outputs a replay must overwrite.
            self._fast[key] = cap.fast[:5] + (cap.graph.replay_sole,) + cap.fast[6:]
        else:
            self._fast[key] = cap.fast

    def _returned(self, cap: _Capture, outputs):
        if self.clone_output or self._pool_shared_by_several():
            return clone_keeping_views(outputs, cap.output_alias)
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

    def _capture(self, args):
        """Capture a graph for ``args``; returns (capture, outputs of this call)."""
        static_inputs = list(args)
        copy_indices = [i for i in self.user_indices if isinstance(args[i], torch.Tensor)]
        if self.clone_input:
            for i in copy_indices:
                static_inputs[i] = same_layout_copy(args[i])
        pinned = {i: args[i].data_ptr() for i in self.mutated_indices
                  if isinstance(args[i], torch.Tensor)}
        graph = self.graph_factory()
        graph.feed(copy_indices)
        if graph.executes_capture:
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
        self._fast.clear()
        self.fallback_eager = True
        return self.forward(args)


_SCALARS = (int, float, bool)

# One replay of a capture without the runner's per-call checks, as source: ``C`` is the
# capture's _Capture.fast tuple and ``A`` the caller's inputs. Inputs are fed (the record
# stand-in's replay reads the copied inputs from A itself; otherwise they are copied into the
# captured buffers), the graph is replayed, the replay
# counted and logged at DEBUG (the logger's level cache answers without a call) and the
# captured outputs returned. Both ``replay(A, C)`` and the body of ``entry`` are this text.
_REPLAY_BODY = """\
    reads, static, indices, narrowed, clone, replay, outputs, replays, name, key_name = C
    if reads:
        replay(A)
    else:
        for i in indices:
            if clone or A[i].data_ptr() != static[i].data_ptr():
                static[i].copy_(A[i])
        for i, part in narrowed:
            part(static[i]).copy_(part(A[i]))
        replay()
    replays[0] += 1
    if level_cache.get(10) is not False and log.isEnabledFor(10):
        log.debug("%s: replay of key %s", name, key_name)
    return list(outputs)
"""


_GRAD_OFF_REPLAY = """\
        grad = is_grad()
        if grad:
            set_grad(False)
        try:
            return replay_capture(A, C)  # ``replay`` is a local of the body below
        finally:
            if grad:
                set_grad(True)
"""


def _key_and_entry(shape_indices, ptr_indices, examples, fast, slow, slow_direct):
    """``capture_key(A)``, ``entry(A)``, ``replay(A, C)`` and ``direct(*A)`` generated for
    one graph's inputs.

    The key is (shapes of the non-static inputs, addresses of the parameters) as one
    expression; ``entry`` looks it up in ``fast`` (key -> a capture's ``fast`` tuple) and
    replays that capture in its own frame, else calls ``slow``; ``replay`` is that replay
    for the runner's other paths; ``direct`` is ``entry`` unboxed for a caller that leaves
    grad mode alone (:meth:`AclGraphRunner.direct_call`), with ``slow_direct(A)`` for keys
    the fast table does not answer."""
    shapes = []
    for i in shape_indices:
        example = examples[i]
        if isinstance(example, torch.Tensor) and example.numel() == 0 and example.dim() == 1:
            # maybe an effect token (side-effect ops such as _linalg_check_errors): traced as
            # an empty tensor, fed as None at run time
            shapes.append(f"(A[{i}].shape if A[{i}] is not None else None)")
        elif isinstance(example, torch.Tensor):  # AOT feeds a tensor where it traced one
            shapes.append(f"A[{i}].shape")
        else:
            shapes.append(f"(A[{i}] if isinstance(A[{i}], _SCALARS) else None)")
    ptrs = [f"(A[{i}].data_ptr() if isinstance(A[{i}], _Tensor) else None)" for i in ptr_indices]
    key = f"(({''.join(p + ', ' for p in shapes)}), ({''.join(p + ', ' for p in ptrs)}))"
    source = (f"def capture_key(A):\n    return {key}\n\n"
              f"def replay(A, C):\n{_REPLAY_BODY}\n"
              f"def entry(A):\n    C = fast_get({key})\n"
              f"    if C is None:\n        return slow(A)\n{_REPLAY_BODY}\n"
              # unboxed, grad mode as the caller has it: a replay that reads the caller's
              # inputs (the record stand-in, which turns grad off itself) runs the body; any
              # other replay runs ``replay`` with grad off, as AOT's wrapper would
              f"def direct(*A):\n    C = fast_get({key})\n"
              f"    if C is None:\n        return slow_direct(A)\n"
              f"    if not C[0]:\n{_GRAD_OFF_REPLAY}{_REPLAY_BODY}")
    scope = {"_SCALARS": _SCALARS, "_Tensor": torch.Tensor, "fast_get": fast.get, "slow": slow,
             "slow_direct": slow_direct, "log": log, "is_grad": torch.is_grad_enabled,
             "set_grad": torch._C._set_grad_enabled,
             "level_cache": getattr(log, "_cache", {})}  # cleared on every level change
    exec(compile(source, "<torchair_dist runner entry>", "exec"), scope)  # noqa: S102
    scope["replay_capture"] = scope["replay"]
    scope["entry"]._boxed_call = True
    return scope["capture_key"], scope["entry"], scope["replay"], scope["direct"]
