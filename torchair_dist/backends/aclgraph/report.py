"""The capture report: per graph and graph key, how often it was captured, replayed and
recaptured, and why.

Events are counted per process and logged at DEBUG on the ``torchair_dist`` logger, one line
per event, containing "capture" / "replay". ``torch._dynamo.reset()`` (which drops the compiled
graphs) clears the counts too, through the backend's ``reset`` hook (``util.on_dynamo_reset``),
when Dynamo compiled with this backend since its last reset; counts of graphs that
``cache_compile`` loaded without Dynamo are cleared by :func:`reset_capture_report`.

Public API (re-exported as ``torchair_dist.capture_report`` / ``reset_capture_report``)::

    >>> torchair_dist.capture_report()
    {'graph_0': {'[(4, 8)]': {'captures': 2, 'replays': 9, 'recaptures': 1,
                              'capture_reasons': {'first capture': 1,
                                                  'moved mutated input 1': 1}}},
     'graph_1': {'*': {'uncaptured_runs': 3, 'uncaptured_reason': 'aten.nonzero.default ...'}}}

Keys: ``captures`` (first captures and recaptures), ``replays``, ``recaptures`` (captures of
a key that was captured before), ``capture_reasons`` (per reason: "first capture", "new shape"
for a later key of the same graph, "new parameters" for a key whose shapes were captured
with other parameter addresses: another layer's weights through the same code, or replaced
weights; and the recapture reasons "moved mutated input <i>", "force_recapture"),
``capture_limit`` (calls of a new key past ``static_capture_size_limit``, which ran eagerly),
``capture_time_s`` (seconds spent capturing the key) and ``capture_bytes`` (the bytes its graph
takes in the pool: the CPU record stand-in's model of a device pool, a device's allocator), for
a graph that uses side streams ``stream_events_added`` (the events the ``stream_order`` stage
added to it: one per cross-stream read nothing in the program ordered, each recorded once and
waited on by each stream that needs it), and for a graph that breaks a device-graph rule the
``*`` key with ``uncaptured_runs`` and ``uncaptured_reason``. :func:`capture_summary` gives
each graph's memory (pool and input buffers) and how its batch sizes were served (padded,
eager).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ...base.util import on_dynamo_reset

log = logging.getLogger("torchair_dist")

_counts: Dict[tuple, int] = {}
_reasons: Dict[tuple, str] = {}  # (graph, "*") -> why the graph is not captured
_cells: Dict[tuple, List[int]] = {}  # (graph, key) -> [replays] (replay_cell)
_values: Dict[tuple, Any] = {}  # (graph, key, what) -> a measured value (time, bytes)
_summary: Dict[str, Dict[str, Any]] = {}  # graph -> memory and batch-size counts
_events_added: Dict[str, int] = {}  # graph -> events the stream_order stage added


def _bump(graph: str, key: str, what: str) -> None:
    counts = _counts
    counts[(graph, key, what)] = counts.get((graph, key, what), 0) + 1


def captured(graph: str, key: str, reason: str, recapture: bool, seconds: float = 0.0,
             nbytes: Optional[int] = None) -> None:
    """A capture of ``key``: the first ("first capture", "new shape") or a recapture; how long
    it took and how many bytes its graph takes in the pool (None: not measured)."""
    _bump(graph, key, "captures")
    _bump(graph, key, "reason:" + reason)
    _values[(graph, key, "capture_time_s")] = round(
        _values.get((graph, key, "capture_time_s"), 0.0) + seconds, 6)
    if nbytes is not None:
        _values[(graph, key, "capture_bytes")] = nbytes
    if recapture:
        _bump(graph, key, "recaptures")
        log.debug("%s: recapture of key %s (%s)", graph, key, reason)
    else:
        log.debug("%s: capture of key %s (%s)", graph, key, reason)


def replay_cell(graph: str, key: str) -> List[int]:
    """The replay counter of ``key``, a one-item list a runner bumps itself on each replay
    (``cell[0] += 1`` on its hot path instead of a call); zeroed in place on reset."""
    cell = _cells.get((graph, key))
    if cell is None:
        cell = _cells[(graph, key)] = [0]
    return cell


def pool(graph: str, memory: Dict[str, Any]) -> None:
    """The graph's memory after a capture (``AclGraphRunner.memory``)."""
    row = _summary.setdefault(graph, {})
    row.update({k: v for k, v in memory.items() if v is not None})
    row.setdefault("output_copies", 0)
    row.setdefault("output_copy_bytes", 0)


def output_copy(graph: str, nbytes: int) -> None:
    """An output the caller still held was moved onto a copy of ``nbytes`` before a replay
    overwrote its memory (:mod:`.outputs`)."""
    row = _summary.setdefault(graph, {})
    row["output_copies"] = row.get("output_copies", 0) + 1
    row["output_copy_bytes"] = row.get("output_copy_bytes", 0) + nbytes
    log.debug("%s: an output still held was copied (%d bytes) before a replay reused its "
              "memory", graph, nbytes)


def padded(graph: str, n: int, size: int) -> None:
    """A call of batch size ``n`` padded up to the declared size ``size``."""
    calls = _summary.setdefault(graph, {}).setdefault("padded", {})
    calls[f"{n}->{size}"] = calls.get(f"{n}->{size}", 0) + 1


def eager_call(graph: str, n: int, why: str) -> None:
    """A call of batch size ``n`` that ran eagerly (not a declared size; ``why``)."""
    calls = _summary.setdefault(graph, {}).setdefault("eager", {})
    calls[f"{n}: {why}"] = calls.get(f"{n}: {why}", 0) + 1
    log.debug("%s: batch size %d runs eagerly (%s)", graph, n, why)


def capture_summary() -> Dict[str, Dict[str, Any]]:
    """Per ACL graph: its memory and how its batch sizes were served, since the last reset.

    ``pool_bytes`` (captures that share one pool take the largest one's blocks, each in a pool
    of its own the sum; on CPU the record stand-in's model of a device pool, on a device what
    the captures added to the allocator's reserve), ``input_bytes`` (the copied inputs'
    buffers: one per input, sized for the largest capture), ``captures``,
    ``capture_time_s`` (all captures), ``output_copies`` / ``output_copy_bytes`` (outputs the
    caller still held when a replay was about to reuse their memory, preserved by a copy:
    zero when outputs are dropped before the next call), and with declared
    ``npugraphex_config.capture_sizes``: ``batch_dim`` (where the batch was found: "dim 1 of
    input 2 (s0)"), ``declared_sizes`` (those this graph captures), ``declared_later`` (declared
    sizes not captured up front, captured at their first call), ``padded`` (``"n->size"``:
    calls padded up) and ``eager`` (``"n: why"``: calls of a batch size that ran eagerly)."""
    out: Dict[str, Dict[str, Any]] = {}
    for graph, entry in _summary.items():
        out[graph] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in entry.items()}
    for (graph, _key, what), value in _values.items():
        if what == "capture_time_s":
            row = out.setdefault(graph, {})
            row["capture_time_s"] = round(row.get("capture_time_s", 0.0) + value, 6)
    return out


def capture_limit(graph: str, key: str, limit: int) -> None:
    _bump(graph, key, "capture_limit")
    log.debug("%s: no capture of key %s: static_capture_size_limit=%d reached, running "
              "eagerly", graph, key, limit)


def stream_events(graph: str, added: int) -> None:
    """The ``stream_order`` stage added ``added`` events to ``graph`` (shown on its keys)."""
    _events_added[graph] = added
    log.debug("%s: %d stream events added by the stream_order stage", graph, added)


def uncaptured(graph: str, reason: str) -> None:
    _reasons.setdefault((graph, "*"), reason)
    _bump(graph, "*", "uncaptured_runs")
    log.debug("%s: uncaptured run, not a capture or replay (%s)", graph, reason)


def capture_report() -> Dict[str, Dict[str, Dict[str, Any]]]:
    """{graph name: {graph key: counts}} for every ACL graph since the last reset."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    table = dict(_counts)
    table.update({(graph, key, "replays"): cell[0] for (graph, key), cell in _cells.items()
                  if cell[0]})
    table.update(_values)
    for (graph, key, what), n in sorted(table.items(), key=lambda kv: str(kv[0])):
        entry = out.setdefault(graph, {}).setdefault(key, {})
        if what.startswith("reason:"):
            entry.setdefault("capture_reasons", {})[what[len("reason:"):]] = n
        else:
            entry[what] = n
        if key == "*":
            entry["uncaptured_reason"] = _reasons.get((graph, key), "")
    for keys in out.values():
        for key, entry in keys.items():
            if key != "*":
                for name in ("captures", "replays", "recaptures"):
                    entry.setdefault(name, 0)
    for graph, added in _events_added.items():
        for entry in out.get(graph, {}).values():
            entry["stream_events_added"] = added
    return out


@on_dynamo_reset
def reset_capture_report() -> None:
    """Forget every count (``torch._dynamo.reset()`` does this too)."""
    _counts.clear()
    _reasons.clear()
    _values.clear()
    _summary.clear()
    _events_added.clear()
    for cell in _cells.values():  # runners hold them: zero in place
        cell[0] = 0


def batch_dim(graph: str, where: str, sizes) -> None:
    """Where the graph's declared ``capture_sizes`` were found, and the sizes it captures."""
    row = _summary.setdefault(graph, {})
    row["batch_dim"] = where
    row["declared_sizes"] = sorted(sizes)


def declared_later(graph: str, size: int) -> None:
    """A declared size that could not be captured up front (made-up inputs did not fit)."""
    later = _summary.setdefault(graph, {}).setdefault("declared_later", [])
    if size not in later:
        later.append(size)


def pad_unchecked(graph: str, ops) -> None:
    """Ops a padded graph relies on through ``npugraphex_config.pad_unchecked_ops``."""
    _summary.setdefault(graph, {})["pad_unchecked"] = list(ops)
