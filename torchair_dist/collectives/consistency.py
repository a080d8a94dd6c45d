"""Cross-rank consistency check of compiled graphs, and clear errors when a peer fails.

Ranks that compiled different collective sequences hang in the first collective they disagree
on. :func:`guard_first_run` prevents that: before a graph's first run each rank publishes the
*fingerprint* of its ordered collectives through the c10d store and compares it with the
fingerprints of every rank it communicates with, with a bounded wait. A difference raises
:class:`~torchair_dist.errors.CollectiveMismatchError` on every rank that sees it (all ranks
involved compare symmetrically), naming the first divergent collective and what each rank had.

Fingerprint entry (:func:`collective_fingerprint`): op, group ranks, dtype, shape with symbols
(only the dims that must agree across ranks: all_to_all sizes legitimately differ), reduce op,
root; for p2p the peer and tag. Which ops are recorded, and which argument holds what, is read
from the collectives' spec table (:mod:`.spec`). Comparison (:func:`compare`): per group, the ordered
non-p2p collectives must be equal on every member; per pair of ranks, the sends of one must
equal, in order, the receives of the other (peer, tag, dtype, shape); unmatched ones are named.

Store protocol: one key per *scope* — a group (``group:0,1``) or a p2p pair (``p2p:0,1``) —
``torchair_dist/consistency/<epoch>/<scope>/<n>/<rank>``, where ``n`` counts this rank's checks
of that scope (the calling thread's rank, not the process's: with torch's threaded process group
every thread is a rank with its own sequence); ranks sharing a scope meet there whatever else
they do (a ring of sends, TP subgroups). Once its comparisons pass, a rank *confirms* (``<key>/ok``) and waits for the
confirmations of its peers, so no rank runs a graph whose collectives a peer refused: the peer's
published failure reaches it instead. While waiting, ranks announce what they wait for and a
wait-for cycle between ranks (each holds collectives the next one's graph lacks there) is a
mismatch at once (:mod:`.waits`). A rank that publishes nothing for a scope within
``distributed_config.consistency_timeout`` seconds is named in the error. Switch:
``distributed_config.consistency_check`` (on by default).

Faults: once running, a collective that fails because a peer died or stopped (gloo/NCCL/HCCL
error or timeout, bounded by the process-group timeout) is re-raised as
:class:`CollectiveFaultError` naming the rank, the graph and its collectives, after the
transports were told (:func:`.failures.run_fault`: the shared-memory transport marks its
exchanges abandoned, so a peer arriving later fails too).
"""
from __future__ import annotations

import collections
import json
import logging
import re
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from ..errors import CollectiveFaultError, CollectiveMismatchError, TorchairDistError
from ..base.graph_context import GraphContext
from ..base.util import calling_rank, op_name, source_line
from . import failures, groups, spec
from . import waits as _waits

log = logging.getLogger("torchair_dist")

_PREFIX = "torchair_dist/consistency"


# ----------------------------------------------------------------------------- fingerprint
def _shape(node_arg, keep_dim0: bool = True) -> List[str]:
    val = node_arg.meta.get("val") if isinstance(node_arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return ["?"]
    dims = [str(d) for d in val.shape]
    return dims if keep_dim0 else ["*"] + dims[1:]


def _hint(node_arg, numel: bool = False):
    """This compile's concrete sizes (what the first run moves) — compared where one rank's size
    is symbolic and the other's is not (a rank may specialise, e.g. a received shape)."""
    from ..base.torch_support import symbolic_size_hint

    size_hint = symbolic_size_hint()

    val = node_arg.meta.get("val") if isinstance(node_arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return int(size_hint(val.numel())) if numel else [int(size_hint(d)) for d in val.shape]
    except Exception:  # noqa: BLE001 - unbacked sizes have no hint
        return None


def _numel(node_arg) -> str:
    val = node_arg.meta.get("val") if isinstance(node_arg, torch.fx.Node) else None
    return str(val.numel()) if isinstance(val, torch.Tensor) else "?"


def _dtype(node_arg) -> str:
    val = node_arg.meta.get("val") if isinstance(node_arg, torch.fx.Node) else None
    return str(val.dtype).replace("torch.", "") if isinstance(val, torch.Tensor) else "?"


# the ops the fingerprint records, their argument positions and fields: the spec table
_SPECS = spec.fingerprinted()
_P2P_KINDS = spec.p2p_kinds()


def _where(node: torch.fx.Node) -> str:
    """The user's source line of a collective (the innermost frame outside torch and us); the
    node's name when it has no stack trace."""
    where = source_line(node)
    return node.name if where == f"node {node.name}" else where


_SYMBOL = re.compile(r"\b([su]\d+)\b")


def _canonical_symbols(entries: List[Dict[str, Any]]) -> None:
    """Rename shape symbols by order of first appearance (s0, s1, ...; unbacked u0, ...).

    Dynamo names symbols after the value and source of a size, so ranks with different local
    sizes elsewhere in the program name the same dim differently; the order-based names keep
    which dims are equal and are comparable across ranks.
    """
    names: Dict[str, str] = {}

    def rename(match):
        sym = match.group(1)
        if sym not in names:
            names[sym] = f"{sym[0]}{sum(1 for v in names.values() if v[0] == sym[0])}"
        return names[sym]

    for e in entries:
        for field in ("shape", "numel"):
            if field in e:
                e[field] = json.loads(_SYMBOL.sub(rename, json.dumps(e[field])))


def collective_fingerprint(gm: torch.fx.GraphModule) -> List[Dict[str, Any]]:
    """The ordered collectives of ``gm``, one JSON-able dict each (see the module docstring)."""
    entries: List[Dict[str, Any]] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        row = _SPECS.get(op_name(node.target))
        if row is None:
            continue
        kind = row.kind
        args = list(node.args)
        tensor = args[row.tensor_arg]
        numel = None
        if kind == "all_gather_list":  # the outputs' sizes must agree, the input's may not
            shape = [_shape(t) for t in args[0]]
            numel = [_numel(t) for t in args[0]]
        else:
            shape = _shape(tensor, keep_dim0=not row.rank_varying_dim0)
            if row.by_numel:
                numel = _numel(tensor)
        entry = {"op": kind, "group": list(groups.ranks_of(args[row.group_arg])),
                 "dtype": _dtype(tensor), "shape": shape, **row.fingerprint_fields(args),
                 "where": _where(node)}
        if numel is not None:  # matched by what the transport moves: dtype + element count
            entry["numel"] = numel
            entry["hint"] = ([_hint(t, numel=True) for t in args[0]] if kind == "all_gather_list"
                             else _hint(tensor, numel=True))
        else:
            entry["hint"] = _hint(tensor)
        entries.append(entry)
    _canonical_symbols(entries)
    return entries


def _describe(entry: Optional[Dict[str, Any]]) -> str:
    if entry is None:
        return "nothing"
    fields = [f"{k}={entry[k]}" for k in ("reduce", "root", "peer", "tag", "capture_sizes")
              if k in entry]
    shape = entry["shape"]
    return (f"{entry['op']}({', '.join([entry['dtype'] + str(shape)] + fields)}) "
            f"on ranks {entry['group']} at {entry['where']}")


_SIZE_FIELDS = ("where", "peer", "shape", "numel", "hint")


def _sizes_match(a, b, hint_a, hint_b) -> bool:
    """Sizes (nested lists of dim strings) agree: equal strings, or — where one side is symbolic
    and the other is not — equal concrete hints of this compile."""
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            return False
        ha = hint_a if isinstance(hint_a, list) else [None] * len(a)
        hb = hint_b if isinstance(hint_b, list) else [None] * len(b)
        return all(_sizes_match(x, y, p, q) for x, y, p, q in zip(a, b, ha, hb))
    if a == b:
        return True
    if str(a).isdigit() and str(b).isdigit():
        return False
    if a == "*" or b == "*":
        return True
    return hint_a is not None and hint_a == hint_b


def _same(ea: Dict[str, Any], eb: Dict[str, Any], *, as_sent: bool = False) -> bool:
    """Two entries describe the same collective. Entries with ``numel`` (p2p, broadcast, list
    all-gather outputs) match by dtype and element count: the same bytes may land in another
    shape."""
    fa = {k: v for k, v in ea.items() if k not in _SIZE_FIELDS}
    fb = {k: v for k, v in eb.items() if k not in _SIZE_FIELDS}
    if as_sent:
        fa["op"] = fb["op"] = "p2p"
    if fa != fb or ("numel" in ea) != ("numel" in eb):
        return False
    field = "numel" if "numel" in ea else "shape"
    return _sizes_match(ea[field], eb[field], ea.get("hint"), eb.get("hint"))


# ------------------------------------------------------------------------------ comparison
def scopes_of(fp: Sequence[Dict[str, Any]], rank: int) -> Dict[str, Tuple[List[int], List]]:
    """The check scopes of a fingerprint: ``{scope key: (other ranks, entries)}``.

    One scope per group (its non-p2p collectives, compared with every other member) and one
    per p2p peer (the sends/receives between the two ranks). Keys are identical on the ranks
    that share the scope, so each pair of ranks meets in the store whatever else they do.
    """
    scopes: Dict[str, Tuple[List[int], List]] = {}
    for e in fp:
        if e["op"] in _P2P_KINDS:
            pair = sorted((rank, e["peer"]))
            key, others = f"p2p:{pair[0]},{pair[1]}", [e["peer"]]
        else:
            key, others = "group:" + ",".join(map(str, e["group"])), \
                [r for r in e["group"] if r != rank]
        scopes.setdefault(key, (others, []))[1].append(e)
    return {k: v for k, v in scopes.items() if v[0]}


def compare(rank: int, mine: Sequence[Dict], theirs: Dict[int, Sequence[Dict]]) -> List[str]:
    """Differences between this rank's fingerprint and each peer's (empty when consistent)."""
    problems = []
    for other, fp in sorted(theirs.items()):
        if other == rank:
            continue
        # collectives: the ordered sequence on every group both ranks are in
        for group in sorted({tuple(e["group"]) for e in list(mine) + list(fp)
                             if e["op"] not in _P2P_KINDS and rank in e["group"]
                             and other in e["group"]}):
            a = [e for e in mine if e["op"] not in _P2P_KINDS and tuple(e["group"]) == group]
            b = [e for e in fp if e["op"] not in _P2P_KINDS and tuple(e["group"]) == group]
            for i in range(max(len(a), len(b))):
                ea, eb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
                if ea is None or eb is None or not _same(ea, eb):
                    problems.append(
                        f"collective #{i} on group {list(group)}: rank {rank} has "
                        f"{_describe(ea)}; rank {other} has {_describe(eb)}")
                    break
        # p2p: my sends to `other` vs its receives from me, and the reverse
        for kind, dual in (("send", "recv"), ("recv", "send")):
            a = [e for e in mine if e["op"] == kind and e["peer"] == other]
            b = [e for e in fp if e["op"] == dual and e["peer"] == rank]
            for i in range(max(len(a), len(b))):
                ea, eb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
                if ea is None or eb is None or not _same(ea, eb, as_sent=True):
                    problems.append(
                        f"{kind} #{i} between ranks {rank} and {other} is unmatched: rank "
                        f"{rank} has {_describe(ea)}; rank {other} has {_describe(eb)}")
                    break
    return problems


# ------------------------------------------------------------------------------- exchange
# (rank, scope) -> checks of that scope the rank made: keyed by the calling rank, so thread
# ranks of one process each keep their own sequence
_check_counts: Dict[Tuple[int, str], int] = collections.defaultdict(int)


def reset_check_sequence(epoch: Optional[int] = None) -> None:
    """Start a new check sequence (and a clean failure board) for the calling rank (for every
    rank of the process when no group is initialised). After a failed check the ranks are out
    of step (the error is meant to be fatal); a program that survives one calls this on every
    rank (with the same ``epoch`` when given)."""
    rank = calling_rank()
    for key in [k for k in _check_counts if rank is None or k[0] == rank]:
        del _check_counts[key]
    failures.set_epoch(epoch)


def exchange_and_check(fp: List[Dict], graph_name: str, timeout_s: float,
                       store=None) -> float:
    """Publish ``fp`` per scope, read the peers', raise CollectiveMismatchError on a difference
    (PeerFailedError when a peer published a failure instead); then confirm and wait for every
    peer's confirmation, so that no rank runs a graph whose peers refused theirs. Any failure of
    the check is published for the peers. Returns the seconds it took."""
    t0 = time.perf_counter()
    rank = dist.get_rank()
    store = store if store is not None else dist.distributed_c10d._get_default_store()
    failures.acknowledge_after_own_failure(dist.get_world_size(), store=store)
    try:
        _exchange(fp, graph_name, timeout_s, store, rank)
    except TorchairDistError as exc:  # peers blocked on this rank learn why at once
        failures.publish(exc, "the cross-rank check", graph_name, store=store)
        raise exc from None
    return time.perf_counter() - t0


def _exchange(fp, graph_name, timeout_s, store, rank) -> None:
    deadline = time.monotonic() + timeout_s
    waits, confirms = [], []  # waits.Wait tuples: fingerprints, then confirmations
    scopes = scopes_of(fp, rank)
    epoch, bases = failures.epoch(), {}
    for scope, (others, entries) in sorted(scopes.items()):
        seq = _check_counts[(rank, scope)]
        _check_counts[(rank, scope)] += 1
        base = bases[scope] = f"{_PREFIX}/{epoch}/{scope}/{seq}"
        store.set(f"{base}/{rank}", json.dumps({"graph": graph_name, "fp": entries}))
        first = _describe(entries[0])
        waits += [(scope, seq, o, f"{base}/{o}", first, "fingerprint") for o in others]
        confirms += [(scope, seq, o, f"{base}/{o}/ok", first, "confirm") for o in others]
    _waits.announce(store, rank, graph_name, waits)
    _waits.wait_for(store, waits, rank, graph_name, deadline, timeout_s)
    problems = []
    for scope, _, other, key, _, _ in waits:
        theirs = json.loads(store.get(key))["fp"]
        problems += compare(rank, scopes[scope][1], {other: theirs})
    if problems:
        raise CollectiveMismatchError(
            f"rank {rank}: ranks compiled different collectives in {graph_name}; running it "
            f"would hang. First divergence: " + "\n  ".join(problems))
    for scope in sorted(scopes):
        store.set(f"{bases[scope]}/{rank}/ok", "1")
    _waits.announce(store, rank, graph_name, confirms)
    _waits.wait_for(store, confirms, rank, graph_name, deadline, timeout_s)


# ---------------------------------------------------------------------------------- guard
def _is_comm_failure(exc: BaseException) -> bool:
    """A transport error (gloo/NCCL/HCCL, or the shared-memory transport's own fault):
    reported with the graph's collectives. Our other errors pass through as they are."""
    if isinstance(exc, CollectiveFaultError):
        return True
    if isinstance(exc, TorchairDistError):
        return False
    if isinstance(exc, (getattr(dist, "DistError", ()),)):
        return True
    text = str(exc)
    return any(m in text for m in ("gloo", "Gloo", "NCCL", "HCCL", "Connection closed",
                                   "Timed out", "timed out", "Connection reset"))


last_check_seconds: Optional[float] = None  # cost of the latest check (for measurements)


def _add_capture_sizes(fp: List[Dict[str, Any]], config) -> None:
    """Declared capture sizes and padding decide the shapes a graph's collectives run with:
    ranks that declare other ones would pad one batch to different sizes. Each entry carries
    them, so a disagreement fails the check on every rank, naming both ranks' values."""
    if config.get("mode") not in ("npugraph_ex", "reduce-overhead"):
        return
    sizes = sorted(set(config.get("npugraphex_config.capture_sizes") or []))
    if not sizes:
        return
    declared = f"{sizes} pad={bool(config.get('npugraphex_config.pad_to_capture_size'))}"
    for entry in fp:
        entry["capture_sizes"] = declared


def guard_first_run(runner, ctx: GraphContext):
    """Wrap ``runner``: cross-rank check before its first run, clear errors on peer faults.

    Returns ``runner`` unchanged when the graph has no collectives or no process group exists.
    No check when the group has no peers to check with or a store that cannot carry keys
    (PyTorch's fake process group; :func:`.failures.no_peers_reason` logs it once). A failure of
    the check or of the first run (lazy backend compilation) is published to the peers
    (:mod:`.failures`). After the first run a call costs one frame and a ``try`` (AOT
    holds the returned callable, so it cannot be swapped for the bare runner).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return runner
    fp = collective_fingerprint(ctx.gm)
    if not fp:
        return runner
    _add_capture_sizes(fp, ctx.config)
    # a fake group or a keyless store: no check (one log line), faults still named
    check = bool(ctx.config.get("distributed_config.consistency_check")) and \
        failures.no_peers_reason() is None
    timeout_s = float(ctx.config.get("distributed_config.consistency_timeout")) if check else 0.0
    call = runner if getattr(runner, "_boxed_call", False) else (lambda args: runner(*args))
    rank = dist.get_rank()
    first = [True]

    def fault(exc):
        return CollectiveFaultError(
            f"rank {rank}: a collective of {ctx.graph_name} failed — a peer rank probably "
            f"died or stopped (the process-group timeout bounds the wait). The graph's "
            f"collectives: {'; '.join(_describe(e) for e in fp[:4])}"
            f"{' ...' if len(fp) > 4 else ''}. Cause: {exc}")

    def first_run(args):
        global last_check_seconds
        first[0] = False
        if check:
            try:
                last_check_seconds = exchange_and_check(fp, ctx.graph_name, timeout_s)
            except BaseException:
                first[0] = True  # a retried call checks again
                raise
            log.debug("rank %d: %s consistent across ranks (%d collectives, %.1f ms)", rank,
                      ctx.graph_name, len(fp), last_check_seconds * 1e3)
        try:
            return call(args)
        except (RuntimeError, TimeoutError) as exc:
            if not _is_comm_failure(exc):
                failures.publish(exc, "the first run", ctx.graph_name)
                raise
            failures.run_fault(exc)
            raise fault(exc) from exc

    def run(args):
        if first[0]:
            return first_run(args)
        try:
            return call(args)
        except (RuntimeError, TimeoutError) as exc:
            if not _is_comm_failure(exc):
                raise
            failures.run_fault(exc)
            raise fault(exc) from exc

    run._boxed_call = True
    return run
