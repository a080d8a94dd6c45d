"""Capture per graph key, then replay: the ACL-graph runner.

Input policy (as in TorchAir's ACL graph):
- parameters/buffers (static inputs) are used in place, never copied;
- mutated user inputs are used in place too (the graph writes them, so they are "written
  back" by construction); if one arrives at a new address the key is recaptured;
- other user inputs are copied into the captured buffers before each replay (``clone_input``);
  with ``clone_input=False`` the graph is captured on the caller's tensors and only inputs
  that arrive at a new address are copied.
Outputs live in the graph's pool and are handed out without copies, valid until a replay is
about to reuse their memory; one the caller still holds then is moved onto a copy first
(:mod:`.outputs`), unless ``enable_output_clone`` copies every output. Captures of one graph
share one pool; a copied input has one buffer per position, sized for the largest capture and
viewed by every smaller one (sizes met smallest first each keep their own: one warning).
Past ``static_capture_size_limit`` keys a new key runs eagerly (that call only, one warning);
the keys captured keep replaying. Declared ``capture_sizes`` are captured at
the first call, largest first, and other batch sizes padded up or run eagerly (:mod:`.sizes`).
Each capture's time and bytes go to the capture report.
"""
from __future__ import annotations

import logging
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional

import torch

from ...base.layout import clone_keeping_views, copy_into, written_part
from ...platform import for_device
from ...platform.interfaces import CaptureFactory
from ..context import GraphContext
from . import report
from .entry_code import key_and_entry
from . import outputs as outputs_module
from .outputs import PoolOutputs, capture_outputs, hand_out, pool_outputs_of
from .sizes import DeclaredSizes
from .rules import CaptureSkipped, find_uncapturable, skip_message

log = logging.getLogger("torchair_dist")

# input buffers held beyond this multiple of the largest capture's: one warning per graph
INPUT_BYTES_RATIO = 1.25


class _Capture:
    """One captured graph: its static inputs, the graph, and the pointers it was made on."""

    __slots__ = ("graph", "static_inputs", "copy_indices", "pinned_ptrs", "outputs",
                 "output_alias", "reads_caller_inputs", "replays", "fast", "pool_positions",
                 "seconds", "bytes", "held", "watch", "pool", "params")

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
        # outputs in the pool (tensors not aliasing an input): handed out fresh per replay
        self.pool_positions = tuple(i for i, (o, a) in enumerate(zip(outputs, output_alias))
                                    if isinstance(o, torch.Tensor) and not a)
        self.seconds = 0.0
        self.bytes: Optional[int] = None
        self.held: list = []   # its pool outputs' storages (outputs.Held)
        self.watch: list = []  # what its replay checks first (outputs.PoolOutputs)
        self.pool: Optional[PoolOutputs] = None
        self.params: tuple = ()  # (weakref, data_ptr) of each parameter it was captured on


def _params_moved(cap: "_Capture") -> bool:
    """Whether a parameter ``cap`` was captured on now has other storage (``p.data = ...``), or
    is gone."""
    for ref, ptr in cap.params or ():
        param = ref()
        if param is None or param.data_ptr() != ptr:
            return True
    return False


class AclGraphRunner:
    """Boxed callable: ``runner(args) -> outputs``."""

    _boxed_call = True

    def __init__(self, forward: Callable, ctx: GraphContext, graph_factory: CaptureFactory,
                 declared_sizes: bool = True):
        """``declared_sizes=False``: ``capture_sizes`` are served by the caller (a piece of a
        piecewise graph: the whole graph pads); this runner captures the shapes it is given."""
        cfg = ctx.config
        self.shared_pool = graph_factory.shared_pool
        self.uncapturable = find_uncapturable(ctx.gm)  # a device rule the graph breaks
        self._warned_uncaptured = False
        self._all_mutated = sorted(set(ctx.mutated_input_indices))
        self.forward = forward
        self.name = ctx.graph_name
        self.graph_factory = graph_factory
        self.clone_input = cfg.get("debug.aclgraph.clone_input")
        self.clone_output = cfg.get("debug.aclgraph.enable_output_clone")
        if not self.clone_output and not outputs_module.CAN_PRESERVE and any(
                isinstance(x, torch.Tensor) and not for_device(x.device.type).uses_stand_ins
                for x in ctx.example_inputs):
            warnings.warn(outputs_module.NO_PRESERVE_MESSAGE, UserWarning, stacklevel=2)
            self.clone_output = True
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
        self.fallback_eager = False  # kept for callers; the limit no longer turns it on
        self._warned_limit = False
        # the captures of the graph's pool and their outputs (shared with the other pieces
        # of a piecewise graph); a capture in a pool of its own gets its own
        self.pool_outputs = pool_outputs_of(graph_factory) if self.shared_pool else None
        self._input_storage: Dict[int, Any] = {}  # copied input -> its shared buffer storage
        self._input_dtypes: Dict[int, Any] = {}
        self._warned_inputs = False  # _check_input_bytes
        # declared capture sizes (npugraphex_config.capture_sizes): padding, eager calls
        self.declared = DeclaredSizes(cfg, ctx.gm, ctx.example_inputs, self.user_indices,
                                      self._all_mutated, self.name, declared_sizes)
        self.capture_count = 0  # captures made, recaptures included (tests and stats)
        self._shape_keys: Dict[Any, str] = {}  # shape part of a key -> its report name
        # key -> the ``fast`` tuple of a capture that needs no check per call (_install_fast)
        self._fast: Dict[Any, tuple] = {}
        self._first_direct: Optional[Callable] = None  # direct_call: the first call's route
        self.capture_key, self.entry, self._replay, self._make_direct = key_and_entry(
            self.key_shape_indices, self.key_ptr_indices, ctx.example_inputs, self._fast,
            self._call)

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
        return self._make_direct(self._direct_slow)

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
        declared = self.declared
        if declared.pending:
            declared.capture(args, self._capture_declared)
        if declared.batch is not None:
            routed = declared.route(args, self._call, self.forward)
            if routed is not None:
                return routed
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
            return self._past_limit(args)
        # A recapture redoes a key's capture: forced, a mutated input moved, or a parameter
        # of an earlier capture of these shapes was given new storage (TorchAir recaptures
        # then). Shapes captured with other parameters that are all still in place are a key
        # of their own: one code object serves every layer of a model Dynamo splits per layer.
        recapture = cap is not None
        if cap is None:
            same = [c for k, c in self.captures.items() if k[0] == key[0]]
            recapture = any(_params_moved(c) for c in same)
            reason = ("moved parameter" if recapture else "new parameters" if same else
                      "new shape" if self.captures else "first capture")
        started = time.perf_counter()
        try:
            cap, outputs = self._capture(args)
        except CaptureSkipped as skip:
            self.uncapturable = skip.found
            return self._uncaptured(args)
        cap.seconds = time.perf_counter() - started
        cap.params = tuple((weakref.ref(args[i]), args[i].data_ptr()) for i in self.key_ptr_indices
                           if isinstance(args[i], torch.Tensor))
        cap.bytes = cap.graph.pool_bytes()
        was_alone = len(self.captures) == 1
        old = self.captures.get(key)
        if old is not None and old.pool is not None:
            old.pool.remove(old.held)  # dropped: the memory a caller holds stays theirs
        cap.pool = self.pool_outputs if self.shared_pool else PoolOutputs()
        cap.held = capture_outputs(self.name, cap.outputs, cap.pool_positions)
        cap.watch = cap.pool.add(cap.held)
        self.captures[key] = cap
        key_name = self.report_key(key)
        cap.replays = report.replay_cell(self.name, key_name)
        report.captured(self.name, key_name, reason, recapture, cap.seconds, cap.bytes)
        memory = self.memory()
        report.pool(self.name, memory)
        self._check_input_bytes(memory["input_bytes"])
        expanded = tuple(i for i in cap.copy_indices
                         if written_part(cap.static_inputs[i]) is not cap.static_inputs[i])
        cap.fast = (cap.reads_caller_inputs, cap.static_inputs,
                    tuple(i for i in cap.copy_indices if i not in expanded),
                    tuple((i, written_part) for i in expanded), self.clone_input,
                    cap.graph.replay, cap.outputs, cap.replays, self.name,
                    key_name, cap.watch, cap.pool_positions)
        if was_alone and self.shared_pool:  # the first capture no longer has the pool alone
            for other_key, other in self.captures.items():
                self._install_fast(other_key, other)
        self._install_fast(key, cap)
        return self._returned(cap, outputs)

    def _install_fast(self, key, cap: _Capture) -> None:
        """Give ``key`` a replay function that skips the per-call checks of :meth:`_call`
        where none applies: no forced recapture, no input pinned by address, no output
        clones, one capture in a shared pool (a second one drops every fast replay)."""
        self._fast.pop(key, None)
        if self.force_recapture or cap.pinned_ptrs or self.clone_output:
            return
        if cap.reads_caller_inputs and not (self.shared_pool and len(self.captures) > 1):
            # The graph's own replay from the caller's inputs: alone in its pool, there is no
            # later capture whose outputs a replay must overwrite.
            self._fast[key] = cap.fast[:5] + (cap.graph.replay_sole,) + cap.fast[6:]
        else:
            self._fast[key] = cap.fast

    def _returned(self, cap: _Capture, outputs):
        if self.clone_output:
            return clone_keeping_views(outputs, cap.output_alias)
        return hand_out(outputs, cap.pool_positions)

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
                static_inputs[i] = self._input_buffer(i, args[i])
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

    def _past_limit(self, args):
        """A new key past ``static_capture_size_limit``: this call runs eagerly; the keys
        captured before keep replaying (TorchAir turns the whole graph eager here)."""
        if not self._warned_limit:
            self._warned_limit = True
            warnings.warn(
                f"The static_capture_size_limit reached: graph {self.name} already holds "
                f"{len(self.captures)} captures (config.debug.aclgraph.static_capture_size_limit="
                f"{self.capture_limit}); calls with a new graph key run eagerly, the captured "
                f"keys keep replaying. Raise the limit, declare npugraphex_config.capture_sizes "
                f"with pad_to_capture_size, or mark fewer dimensions dynamic.", UserWarning,
                stacklevel=3)
        return self.forward(args)

    # -- declared sizes ---------------------------------------------------------------------
    def _capture_declared(self, sized: List[Any], size: int) -> bool:
        """One declared size's capture (DeclaredSizes.capture); False: not captured here."""
        key = self.capture_key(sized)
        if key in self.captures or len(self.captures) >= self.capture_limit:
            return False
        self._capture_call(sized, key, None)
        return True

    # -- memory -----------------------------------------------------------------------------
    def _input_buffer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Position ``i``'s captured buffer for ``x``: a view, with ``x``'s layout, of one
        storage per position, grown only when a larger capture needs it (largest first: one)."""
        extent = 0 if x.numel() == 0 else 1 + sum(
            (n - 1) * st for n, st in zip(x.size(), x.stride()))
        need = (x.storage_offset() + extent) * x.element_size()
        storage = self._input_storage.get(i)
        if (storage is None or storage.nbytes() < need or storage.device != x.device
                or self._input_dtypes.get(i) != x.dtype):
            storage = torch.empty(max(need // x.element_size(), 1), dtype=x.dtype,
                                  device=x.device).untyped_storage()
            self._input_storage[i] = storage
            self._input_dtypes[i] = x.dtype
        buf = torch.empty((0,), dtype=x.dtype, device=x.device).set_(
            storage, x.storage_offset(), x.size(), x.stride())
        if torch._debug_has_internal_overlap(written_part(buf)) == 1:
            buf = torch.empty_like(x, memory_format=torch.contiguous_format)
        copy_into(buf, x)
        return buf

    def release(self) -> None:
        """Drop every capture and input buffer (their memory is freed now, wherever the runner
        object itself is still referenced); a later call captures again."""
        for cap in self.captures.values():
            if cap.pool is not None:
                cap.pool.remove(cap.held)
        self.captures.clear()
        self._fast.clear()
        self._input_storage.clear()
        self._input_dtypes.clear()

    def _check_input_bytes(self, held: int) -> None:
        """Warn once when the captures' input buffers hold more than 1.25x what the largest
        capture's alone take: batch sizes met smallest first each keep the buffer they were
        captured on (a capture is bound to its buffers' addresses)."""
        largest = sum(s.nbytes() for s in self._input_storage.values())
        if self._warned_inputs or not largest or held <= INPUT_BYTES_RATIO * largest:
            return
        self._warned_inputs = True
        warnings.warn(
            f"graph {self.name}: the input buffers of its {len(self.captures)} captures hold "
            f"{held} bytes, {held / largest:.2f}x the {largest} bytes the largest capture's "
            f"alone take: batch sizes met smallest first each keep the buffer they were "
            f"captured on. Declare npugraphex_config.capture_sizes (captured largest first at "
            f"the first call, every capture viewing one buffer per input), or call the largest "
            f"size first.", UserWarning, stacklevel=4)

    def memory(self) -> Dict[str, Any]:
        """The graph's memory as the capture graphs report it: ``pool_bytes`` (captures sharing
        one pool take the largest capture's blocks; each its own pool: the sum),
        ``input_bytes`` (the copied inputs' shared buffers), ``captures``."""
        sizes = [c.bytes for c in self.captures.values() if c.bytes is not None]
        incremental = any(c.graph.pool_bytes_incremental for c in self.captures.values())
        pool = (max(sizes) if self.shared_pool and not incremental else sum(sizes)) \
            if sizes else None
        held = {}
        for cap in self.captures.values():
            for i in cap.copy_indices:
                buf = cap.static_inputs[i]
                if isinstance(buf, torch.Tensor) and self.clone_input:
                    storage = buf.untyped_storage()
                    held[storage.data_ptr()] = storage.nbytes()
        return {"pool_bytes": pool, "input_bytes": sum(held.values()),
                "captures": len(self.captures)}
