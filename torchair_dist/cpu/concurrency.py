"""The CPU model of device concurrency (``TORCHAIR_DIST_CPU_STREAM_ORDER``).

A device runs each stream's work concurrently; only the graph's orderings (program order within a
stream, events, stream waits, fork/join, collective waits: the one order model,
:class:`~torchair_dist.streams.order_model.Timeline`) bind it. The CPU stand-ins run in one
thread, so they pick *one* order those orderings allow:

* ``program`` (default): program order, as before;
* ``early``: whenever a side stream's work is ready it runs first (side streams as early as
  the graph allows); ``late``: the main stream runs first, a side stream only when the main
  stream waits for it (as late as allowed); ``random:<seed>``: a seeded choice among the ready
  streams at every step (every rank makes the same choices for the same graph).

Data edges are not orderings: a consumer may be scheduled before its producer, and then reads
what the producer's buffer holds (the record stand-in keeps every value in a slot that
survives replays: last replay's value, or poison — NaN, ``-12345`` (a narrow integer type's
largest value), ``True`` — on the first).
With a non-program order the record stand-in also

* poisons a captured intermediate's memory where the capture frees it (on its allocation
  stream, right after its last use in program order; a ``record_stream`` on another stream
  delays that until the stream's work issued so far is done), so a read the graph does not
  order before the free reads poison;
* gives an asynchronous collective's output (a value a ``_c10d_functional.wait_tensor`` waits
  for) as poison until that wait: reading it earlier reads poison.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..base.envvars import env_stream_order
from ..streams.order_model import MAIN, Timeline

ORDER_ENV = "TORCHAIR_DIST_CPU_STREAM_ORDER"
_WAIT = "_c10d_functional::wait_tensor"


@dataclasses.dataclass(frozen=True)
class StreamOrder:
    kind: str                 # program | early | late | random
    seed: Optional[int] = None

    @property
    def reorders(self) -> bool:
        return self.kind != "program"

    def __str__(self) -> str:
        return f"random:{self.seed}" if self.kind == "random" else self.kind


def stream_order() -> StreamOrder:
    """The order the CPU stand-ins run streams in (``ConfigError`` naming the variable)."""
    return StreamOrder(*env_stream_order(ORDER_ENV))


def schedule(streams: Sequence[str], preds: Sequence[Any], order: StreamOrder) -> List[int]:
    """A topological order of the items (``preds[i]``: the items that must come before ``i``)
    chosen by ``order``; ``streams[i]``: item ``i``'s stream (``""`` = main)."""
    n = len(streams)
    if not order.reorders:
        return list(range(n))
    users: List[List[int]] = [[] for _ in range(n)]
    waits = [0] * n
    for i, ps in enumerate(preds):
        for p in set(ps):
            users[p].append(i)
            waits[i] += 1
    out = reorder(streams, waits, users, order)
    if len(out) != n:  # the orderings come from program order: they cannot form a cycle
        raise RuntimeError("stream orderings form a cycle")
    return out


def reorder(streams: Sequence[str], waits: List[int], users: Sequence[Sequence[int]],
            order: StreamOrder) -> List[int]:
    """Like :func:`schedule`, from predecessor counts and user lists (consumed); stops early
    (a shorter list) where the edges form a cycle."""
    ready = {i for i, n in enumerate(waits) if n == 0}
    rng = random.Random(order.seed)
    out: List[int] = []
    while ready:
        if order.kind == "early":
            i = min(ready, key=lambda j: (streams[j] == MAIN, j))
        elif order.kind == "late":
            i = min(ready, key=lambda j: (streams[j] != MAIN, j))
        elif order.kind == "random":
            i = rng.choice(sorted(ready))
        else:
            i = min(ready)
        ready.discard(i)
        out.append(i)
        for u in users[i]:
            waits[u] -= 1
            if waits[u] == 0:
                ready.add(u)
    return out


def poison(value: Any) -> None:
    """Fill a tensor (or the tensors of a list) with the poison of its dtype, in place."""
    if isinstance(value, (list, tuple)):
        for v in value:
            poison(v)
        return
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return
    with torch.no_grad():
        value.fill_(poison_value(value.dtype))


def poison_value(dtype: torch.dtype):
    """What poisoned memory of ``dtype`` holds: NaN, ``True``, ``-12345`` (an integer type too
    narrow for it: its largest value)."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    return -12345 if info.min <= -12345 else info.max


def poisoned_like(value: Any) -> Any:
    """A new tensor (list) shaped like ``value``, holding poison."""
    if isinstance(value, (list, tuple)):
        return type(value)(poisoned_like(v) for v in value)
    if not isinstance(value, torch.Tensor):
        return value
    fresh = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                device=value.device) if value.numel() else value.new_empty(value.shape)
    poison(fresh)
    return fresh


def _tensors(value) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _storage(t: torch.Tensor) -> Optional[int]:
    try:
        if t.untyped_storage().nbytes() == 0:
            return None
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (a wrapper subclass)
        return None


def _is_wait(func) -> bool:
    return isinstance(func, torch._ops.OpOverload) and func._schema.name == _WAIT


def reordered_body(gen, entries, inputs, outputs, order: StreamOrder) -> Optional[List[str]]:
    """The replay body (lines, before the output copies) for ``order``, or None when the record
    has neither side streams nor asynchronous collectives (program order is the only order).

    ``gen`` is the record's code generator: values live in slots (a constant list) that survive
    replays, so a consumer run before its producer reads the previous replay's value, or the
    poison the slots start with."""
    from .bindings import fast_call

    tl = Timeline()
    items: List[int] = []
    collectives = set()  # the op that last made each tensor a wait_tensor waits for
    made_by: Dict[int, int] = {}
    for k, (func, args, _, out) in enumerate(entries):
        if _is_wait(func):  # the wait's stream goes on after the collective completes
            waited = {made_by[id(a)] for a in _tensors(args) if id(a) in made_by}
            collectives.update(waited)
            items.append(tl.add(func, args, after=[items[j] for j in sorted(waited)]))
            continue
        items.append(tl.add(func, args))
        for t in _tensors(out):
            made_by[id(t)] = k
    if not tl.uses_side_streams() and not collectives:
        return None
    slots: List[Any] = [poisoned_like(out) for _, _, _, out in entries]
    hidden: List[Any] = [None] * len(entries)
    S, H = gen.const(slots), gen.const(hidden)
    gen.consts.append(poisoned_like)
    fresh = f"K[{len(gen.consts) - 1}]"
    gen.consts.append(poison)
    spoil = f"K[{len(gen.consts) - 1}]"
    lines: Dict[int, List[str]] = {}
    real: Dict[int, str] = {}  # id(collective output) -> the hidden slot holding its real value
    produced_as: Dict[int, tuple] = {}  # storage -> (entry, the name its producer bound)
    for k, (func, args, kwargs, out) in enumerate(entries):
        if _is_wait(func):
            for t in _tensors(args):
                if id(t) in real:
                    gen.names[id(t)] = real[id(t)]
        call, args = fast_call(func, args, kwargs)
        expr = gen._call(call, args, kwargs)
        if k in collectives:
            lines[items[k]] = [f"{H}[{k}] = {expr}", f"{S}[{k}] = {fresh}({H}[{k}])"]
            gen.bind(out, f"{H}[{k}]")
            for t in _tensors(out):
                real[id(t)] = gen.names[id(t)]
        else:
            lines[items[k]] = [f"{S}[{k}] = {expr}"]
        gen.bind(out, f"{S}[{k}]")
        for t in _tensors(out):
            st = _storage(t)
            if st is not None and st not in produced_as:
                produced_as[st] = (k, real.get(id(t), gen.names[id(t)]))  # the real buffer
    _add_frees(tl, entries, items, inputs, outputs, produced_as, lines, spoil)
    body: List[str] = []
    for i in schedule(tl.streams, tl.preds, order):
        body.extend(f"    {line}" for line in lines.get(i, ()))
    return body


def _add_frees(tl: Timeline, entries, items, inputs, outputs, produced_as, lines, spoil) -> None:
    """Free items: a captured intermediate's storage is freed after its last use in program
    order and poisoned just before the next allocation on its allocation stream (which the
    capture's pool may give that block), after the work the streams a ``record_stream`` named
    had issued by the free. A free with no later allocation on its stream is not reused in
    the graph."""
    kept = {_storage(t) for t in _tensors(list(inputs)) + _tensors(list(outputs))}
    allocates = {k for k, _ in produced_as.values()}
    last: Dict[int, int] = {}
    recorded: Dict[int, List[str]] = {}
    for k, (func, args, kwargs, out) in enumerate(entries):
        for t in _tensors((args, kwargs)) + _tensors(out):
            st = _storage(t)
            if st in produced_as and st not in kept:
                last[st] = k
        for s in tl.recorded_on.get(items[k], ()):
            for t in _tensors(args):
                recorded.setdefault(_storage(t), []).append(s)
    by_last: Dict[int, List[int]] = {}
    for st, k in last.items():
        by_last.setdefault(k, []).append(st)
    position: Dict[str, int] = {}  # stream -> its latest item so far in program order
    for k in range(len(entries)):
        position[tl.streams[items[k]]] = items[k]
        for st in by_last.get(k, ()):
            producer, name = produced_as[st]
            stream = tl.streams[items[producer]]
            reuse = next((j for j in range(k + 1, len(entries)) if j in allocates
                          and tl.streams[items[j]] == stream), None)
            if reuse is None:
                continue
            after = {position[s] for s in recorded.get(st, ()) if s in position}
            after |= {p for p in tl.preds[items[reuse]]}
            i = len(tl.streams)
            tl.streams.append(stream)
            tl.preds.append(after)
            tl.clocks.append({})
            tl.preds[items[reuse]].add(i)
            lines[i] = [f"{spoil}({name})"]
