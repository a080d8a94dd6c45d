"""``TORCHAIR_DIST_CPU_CAPTURE=record``: a CPU stand-in for a device graph that really records.

Capture runs the FX graph once under a ``TorchDispatchMode`` that records every dispatched op
with its tensors: aten ops, torch's ``_c10d_functional`` collectives, the ``torchair_dist::``
collectives and the stream ops. Replay re-issues exactly those ops, in order, without running
Python or FX: a function is generated from the record (one line per op), whose inputs are the
captured buffers (the runner's static inputs, used in place) and whose results land in the
captured output tensors: an op that makes an output writes it there through its ``out=``
overload, any other output is copied in. So, as on a device:

* a replay reads the *captured* input buffers: a parameter swapped for another tensor, or an
  input the runner did not copy in, is not seen. (The inputs a device runner copies into its
  static buffers are read where the caller holds them instead: the same values, without the
  copy, since nothing on the CPU is bound to an address);
* shapes, Python control flow and host values are frozen at capture;
* outputs are the same tensors every replay, overwritten by the next one;
* collectives are re-issued on every replay, in the captured order;
* a graph that breaks a device rule (``backends/aclgraph/rules.py``, and a host-side call
  inside an opaque kernel: :class:`HostCallGuard`) is not captured.

With ``TORCHAIR_DIST_CPU_STREAM_ORDER`` other than ``program``, a replay runs the streams' work
in another order the graph's orderings allow, keeps every value in a slot that outlives the
replay (a reader run before its writer reads stale or poisoned data), poisons freed blocks
before their reuse and asynchronous collective outputs until their wait (:mod:`.concurrency`).

Captures of one runner that share a memory pool model the worst case of a real pool: a replay
overwrites the outputs of the graphs captured after it in the same pool (as a device graph's
intermediates may reuse blocks those outputs later took) (:mod:`.record_pool`). The runner
preserves the ones a caller still holds before such a replay, as on a device
(:mod:`torchair_dist.backends.aclgraph.outputs`).
"""
from __future__ import annotations

import contextlib
import itertools
import re
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from ..base.envvars import env_choice
from ..base.layout import copy_into
from ..platform.interfaces import CaptureGraph, CaptureSkipped, Uncapturable
from ..passes.stream_rewrite import where
from ..base.util import without_function_modes
from ..passes.graph_info import mutated_input_indices
from .bindings import fast_call as _fast_call
from .concurrency import reordered_body, stream_order
from .out_forms import kernel_out_overload, out_overload as _out_overload
from .record_pool import RecordPool, peak_bytes
from .record_static import Arena, StaticPlan, plan as static_plan


_HOST_CALLS = ("barrier", "monitored_barrier")


class HostCallGuard:
    """While active, the host-side ``torch.distributed`` calls that a device graph cannot
    hold (``dist.barrier``: it synchronizes the host) raise :class:`CaptureSkipped` instead
    of running. ``where()`` gives the current user source line."""

    def __init__(self, where_fn):
        self.where_fn = where_fn

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        saved = {name: getattr(dist, name) for name in _HOST_CALLS}

        def refuse(name):
            def call(*args, **kwargs):
                raise CaptureSkipped(Uncapturable(
                    f"torch.distributed.{name}", "is a host-side call (it synchronizes the "
                    "host, which a device graph cannot capture)", self.where_fn()))
            return call

        for name in _HOST_CALLS:
            setattr(dist, name, refuse(name))
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(dist, name, fn)


class _Recorder(TorchDispatchMode):
    """Records (op, args, kwargs, outputs) of every dispatched op."""

    def __init__(self):
        super().__init__()
        self.entries: List[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.entries.append((func, args, kwargs, out))
        return out


def _record_with_effects(mode, token, op, *args, **kwargs):
    """AOT wraps side-effect ops (``_linalg_check_errors`` of linalg.inv/solve/cholesky, ...)
    in ``with_effects(token, op, ...)``; the token only orders them. Record the op itself
    (re-entering the recorder, which a mode rule runs without) and hand back a fresh token."""
    from torch._higher_order_ops.effects import new_token_tensor

    with mode:
        out = op(*args, **kwargs)
    return (new_token_tensor(), *out) if isinstance(out, tuple) else (new_token_tensor(), out)


def _install_effects_rule() -> None:
    from torch._higher_order_ops.effects import with_effects

    if _Recorder not in with_effects.python_key_table:
        with_effects.py_impl(_Recorder)(_record_with_effects)


_install_effects_rule()


class _NodeTracker(torch.fx.Interpreter):
    """Runs the graph node by node, remembering the current node (for source lines)."""

    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=False)
        self.current: Optional[torch.fx.Node] = None

    def run_node(self, n):
        self.current = n
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        # A custom op with a mutable argument is a functionalization HOP in the AOT graph
        # (auto_functionalized[_v2]); the recording mode has no rule for HOPs. Run its eager
        # (dense) form instead, so what is recorded is the clones and the mutable op itself,
        # plain dispatched ops that a replay re-issues.
        dense = _dense_hops().get(target)
        if dense is not None:
            return dense(*args, **kwargs)
        return super().call_function(target, args, kwargs)

    def where(self) -> str:
        return where(self.current) if self.current is not None else "<graph input>"


def _dense_hops() -> Dict[Any, Callable]:
    """The functionalization HOPs a recorded graph may hold -> their eager implementations."""
    from torch._higher_order_ops import auto_functionalize as af

    return {af.auto_functionalized: af.auto_functionalized_dense,
            af.auto_functionalized_v2: af.auto_functionalized_v2_dense}


class _Codegen:
    """Turns a record into the body of ``replay(A)``: one line per op.

    ``A`` is the list of graph inputs a replay gets. Only the inputs at ``fed`` (None: all)
    are read from it; every other input is the captured buffer itself, bound as a constant."""

    def __init__(self, inputs: Sequence[Any], fed: Optional[Sequence[int]] = None):
        self.lines: List[str] = []
        self.consts: List[Any] = []
        self.names: Dict[int, str] = {}
        fed = None if fed is None else set(fed)
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and id(x) not in self.names:
                self.names[id(x)] = f"A[{i}]" if fed is None or i in fed else self.const(x)

    def const(self, value) -> str:
        self.consts.append(value)
        return f"K[{len(self.consts) - 1}]"

    def is_const(self, expr: str, value) -> bool:
        """``expr`` is the constant holding ``value`` itself."""
        found = _CONST.fullmatch(expr)
        return found is not None and self.consts[int(found.group(1))] is value

    def expr(self, value) -> str:
        if isinstance(value, torch.Tensor):
            return self.names.get(id(value)) or self.const(value)
        if isinstance(value, (list, tuple)):
            inner = ", ".join(self.expr(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if value else ''})"
        if isinstance(value, (bool, int, str, type(None))):
            return repr(value)
        if isinstance(value, float) and value == value and abs(value) != float("inf"):
            return repr(value)
        return self.const(value)  # dtypes, devices, SymInts frozen at capture, nan/inf ...

    def bind(self, value, name: str) -> None:
        if isinstance(value, torch.Tensor):
            self.names[id(value)] = name
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self.bind(v, f"{name}[{i}]")

    def emit(self, counter, func, args, kwargs, out, into: Optional[set] = None) -> None:
        """One line per op; where the op makes a tensor in ``into`` (ids of the captured
        outputs) and has an ``out=`` overload, it writes that tensor in place instead."""
        out_op = _out_overload(func, out) if into and id(out) in into else None
        if out_op is not None:
            into.discard(id(out))
            self.names[id(out)] = self.const(out)  # the captured output, written in place
            kwargs = {**kwargs, "out": out}
            call, args = _fast_call(out_op, args, kwargs)
            self.lines.append(f"    {self._call(call, args, kwargs)}")
            return
        name = f"v{next(counter)}"
        call, args = _fast_call(func, args, kwargs)
        self.lines.append(f"    {name} = {self._call(call, args, kwargs)}")
        self.bind(out, name)

    def emit_placed(self, func, args, kwargs, out, target: torch.Tensor) -> None:
        """The op that makes ``out``, writing ``target`` (placed at capture) through its
        ``out=`` overload (:mod:`.record_static`)."""
        name = self.names[id(target)] = self.const(target)
        self.names[id(out)] = name
        kwargs = {**kwargs, "out": target}
        call, args = _fast_call(_out_overload(func, out), args, kwargs)
        self.lines.append(f"    {self._call(call, args, kwargs)}")

    def _call(self, call, args, kwargs) -> str:
        parts = [self.expr(a) for a in args]
        parts += [f"{k}={self.expr(v)}" for k, v in kwargs.items()]
        return f"{self.const(call)}({', '.join(parts)})"


class RecordGraph(CaptureGraph):
    """Capture by recording dispatched ops; replay re-issues them on the captured buffers.

    The feed's positions (:class:`~torchair_dist.platform.interfaces.InputFeed`) are the inputs
    a replay reads from the caller's list when the buffers are the runner's own (the same
    values, without the copy); otherwise the feed copies them into the buffers first, as on a
    device. Every other input is read from its captured buffer."""

    def __init__(self, gm: torch.fx.GraphModule, pool: Optional[RecordPool] = None,
                 name: str = "graph"):
        self.gm = gm
        self.pool = pool
        self.feed = None
        self.outputs: Sequence[Any] = ()
        self.pool_outputs: List[torch.Tensor] = []
        self.source = ""
        self.ops: List[Any] = []
        self.stream_order = "program"  # the order replays run the streams in (see .concurrency)
        self.run: Optional[Callable[[List[Any]], None]] = None
        self.peak_bytes: Optional[int] = None
        self.added_bytes: Optional[int] = None
        self.reads_caller = False
        self.name = name
        self.arena_bytes = 0  # the bytes of the arena its placed intermediates use
        self._arena: Optional[Arena] = None
        self._buffers: List[Any] = []
        self._consts: List[Any] = []

    def capture(self, fn: Callable, inputs: List[Any], feed) -> Sequence[Any]:
        """Run the graph once on ``inputs`` (the captured buffers), recording its ops; returns
        this call's outputs, which are also the captured output tensors. A host-side call
        stops it with :class:`CaptureSkipped`, the inputs it wrote restored first (a device
        capture runs nothing, so the caller's uncaptured run applies them once)."""
        self.feed = feed
        self.reads_caller = feed.private
        mutated = [i for i in mutated_input_indices(self.gm)
                   if i < len(inputs) and isinstance(inputs[i], torch.Tensor)]
        saved = {i: inputs[i].clone() for i in mutated}
        tracker = _NodeTracker(self.gm)
        recorder = _Recorder()
        try:
            with HostCallGuard(tracker.where).active(), recorder, torch.no_grad():
                outputs = tracker.run(*inputs)
        except CaptureSkipped:
            with torch.no_grad():
                for i, value in saved.items():
                    inputs[i].copy_(value)
            raise
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        self._build(inputs, recorder.entries, outputs, feed.positions)
        self.outputs = outputs
        self._buffers = list(inputs)
        self.added_bytes = self.peak_bytes if self.pool is None else \
            self.pool.add(self, self.peak_bytes)
        if self.reads_caller and self.pool is None:
            # nothing to do around the recorded ops: a replay is the generated function
            # itself (one frame fewer per call; it holds no reference back to this graph)
            self.replay = self.run
        return outputs

    def _build(self, inputs, entries, outputs, fed) -> None:
        """Generate ``run(A)``: the recorded ops, then each captured output that no op wrote
        in place refreshed from its new value, all with grad mode off; ``A``'s positions
        ``fed`` are read from it, the other inputs are the captured buffers."""
        gen = _Codegen(inputs, fed)
        counter = itertools.count()
        storages = {x.untyped_storage().data_ptr() for x in inputs
                    if isinstance(x, torch.Tensor)}
        into = {id(o) for o in outputs if isinstance(o, torch.Tensor)
                and o.untyped_storage().data_ptr() not in storages}
        order = stream_order()
        reordered = reordered_body(gen, entries, inputs, outputs, order) \
            if order.reorders else None
        placed = None
        if reordered is not None:
            gen.lines = reordered
        else:
            placed = self._placed(entries, inputs, outputs, fed)
            for k, (func, args, kwargs, out) in enumerate(entries):
                if placed is not None and self._emit_placed(gen, placed, k, func, args, kwargs):
                    continue
                gen.emit(counter, func, args, kwargs, out, into)
        self.stream_order = str(order) if reordered is not None else "program"
        self.pool_outputs = []
        sync = []
        for o in outputs:
            if not isinstance(o, torch.Tensor):
                continue
            if o.untyped_storage().data_ptr() not in storages:
                self.pool_outputs.append(o)
            new = gen.expr(o)
            if not gen.is_const(new, o):  # a fresh value each replay: copied into the captured one
                static = gen.const(o)
                sync.append(f"    if {new} is not {static} and not same_view({static}, {new}):")
                sync.append(f"        copy_into({static}, {new})")
        body = _free_dead_values(gen.lines + sync)
        arena = None
        if placed is not None and placed.arena_bytes:
            arena = (gen.const(self.arena), gen.const(self.arena.lock.acquire),
                     gen.const(self.arena.lock.release))
            self.arena_bytes = placed.arena_bytes
        name = gen.const(self.name)
        self.source = _closure_source(len(gen.consts), body, arena, name)
        namespace: Dict[str, Any] = {"is_grad": torch.is_grad_enabled,
                                     "set_grad": torch._C._set_grad_enabled,
                                     "same_view": _same_view, "copy_into": copy_into,
                                     "modes_on": torch._C._is_torch_function_mode_enabled,
                                     "weak": weakref.ref,
                                     "without_modes": without_function_modes}
        exec(compile(self.source, "<torchair_dist record replay>", "exec"), namespace)  # noqa: S102
        # ``make`` is taken out of its globals, and the replay reaches itself through a weak
        # reference: no reference cycle keeps a dropped graph's buffers until the collector
        self.run = namespace.pop("make")(gen.consts)
        self._consts = gen.consts
        self.peak_bytes = peak_bytes(entries, inputs, outputs)
        self.ops = [entry[0] for entry in entries]  # what a replay issues, in order

    @property
    def arena(self) -> Arena:
        """The arena this graph's intermediates are placed in: its pool's, else its own."""
        if self.pool is not None:
            return self.pool.arena
        if self._arena is None:
            self._arena = Arena()
        return self._arena

    def _placed(self, entries, inputs, outputs, fed) -> Optional[StaticPlan]:
        """The record's placement (:mod:`.record_static`) over this graph's arena."""
        if env_choice("TORCHAIR_DIST_CPU_PLACE", ("0", "1"), "1") == "0":
            return None
        found = static_plan(entries, inputs, outputs, fed, kernel_out_overload)
        if found is None:
            return None
        storage = self.arena.storage_for(found.arena_bytes) if found.arena_bytes else None
        return found.bound(storage)

    @staticmethod
    def _emit_placed(gen: "_Codegen", placed: StaticPlan, k: int, func, args, kwargs) -> bool:
        """Emit (or, for a view made at capture, bind) the record's op ``k`` by the placement;
        False: the op is re-issued as recorded."""
        views = placed.views.get(k)
        if views is not None:
            for recorded, view in views:
                gen.names[id(recorded)] = gen.const(view)
            return True
        target = placed.targets.get(k)
        if target is not None:
            gen.emit_placed(func, args, kwargs, *target)
            return True
        return False

    def pool_bytes(self) -> Optional[int]:
        """The model of what this capture added to a device pool: the most bytes its recorded
        ops hold at once (each allocation live from the op that makes it to its last reader;
        the outputs to the end), inputs excluded, less what its pool already held."""
        return self.added_bytes

    def replay(self, args: Sequence[Any]) -> None:
        """Re-issue the recorded ops: reading the caller's ``args`` at the fed positions when
        the buffers are the runner's own, else on the buffers after the feed copied them."""
        if self.reads_caller:
            self.run(args)
        else:
            with torch.no_grad():  # the feed's copies are not autograd's
                self.feed(args)
            self.run(self._buffers)
        pool = self.pool
        if pool is not None:
            pool.replayed(self)


_VALUE = re.compile(r"\bv\d+\b")


def _free_dead_values(lines: List[str]) -> List[str]:
    """Insert ``del`` after each value's last use, as FX's code does, so a replay's
    intermediates are freed as early as the forward frees them."""
    last: Dict[str, int] = {}
    for i, line in enumerate(lines):
        for name in _VALUE.findall(line):
            last[name] = i
    out: List[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        dead = sorted(n for n, at in last.items() if at == i)
        if dead and not line.startswith("    if "):
            out.append(f"    del {', '.join(dead)}")
    return out


def _closure_source(n_consts: int, body: List[str], arena: Optional[tuple] = None,
                    name: str = "'graph'") -> str:
    """``make(K)`` binds the constants to locals K0..Kn and returns ``replay(A)``, which runs
    ``body`` with grad mode off and no torch-function mode (see :mod:`.bindings`); ``arena``:
    the constants holding an :class:`~.record_static.Arena`, its lock's acquire and release:
    the lock is held while the body runs (held already: ``ArenaBusy``)."""
    def local(expr: str) -> str:
        return _CONST.sub(lambda m: f"K{m.group(1)}", expr)

    head = ["def make(K):"] + [f"    K{i} = K[{i}]" for i in range(n_consts)]
    head += ["    me = []",
             "    def replay(A):",
             "        if modes_on():",
             "            return without_modes(me[0](), A)"]
    if arena is not None:  # (the arena, its lock's acquire, release)
        head += [f"        if not {local(arena[1])}(False):",
                 f"            raise {local(arena[0])}.busy_error({local(name)})"]
    head += ["        grad = is_grad()",
             "        if grad:",
             "            set_grad(False)",
             "        try:"]
    code = [local("        " + line) for line in body]
    tail = ["            pass",  # an empty record
            "        finally:"]
    if arena is not None:
        tail += [f"            {local(arena[2])}()"]
    tail += ["            if grad:",
             "                set_grad(True)",
             "    me.append(weak(replay))",
             "    return replay", ""]
    return "\n".join(head + code + tail)


_CONST = re.compile(r"\bK\[(\d+)\]")


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape
                      and a.stride() == b.stride())
