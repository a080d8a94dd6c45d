"""Ranks fail together: a rank's compile failure is published to its peers through the c10d store.

A rank that fails while compiling (Dynamo's trace, our backend entry, AOT, the graph passes,
validation, conversion, or the cross-rank check itself) writes a *failure record* —
``{"rank", "kind", "error", "stage", "graph", "time"}`` (``kind``: the error's class name) — under
``torchair_dist/consistency/<epoch>/failed/<rank>`` of the default c10d store. A rank waiting in
the cross-rank check for a peer's fingerprint polls for that peer's record at short intervals
(:data:`POLL_S`) and raises :class:`~torchair_dist.errors.PeerFailedError` naming the failed
rank(s) and their messages as soon as it finds one, instead of waiting out the consistency
timeout. A record is only consulted while the fingerprint it would replace is missing, so a rank
that recovered and published is never blamed.

Dynamo-level failures are caught by :func:`install_trace_hook`, which wraps Dynamo's per-frame
``_compile``: an exception that leaves it is published unless Dynamo will recover from it (a
graph break of a frame compiled without ``fullgraph=True``, or ``suppress_errors``).

Records live in the check *epoch* of :mod:`.consistency`: a program (or test) that survives a
failure calls ``consistency.reset_check_sequence()`` on every rank to start clean.

Every piece of this board's state is the calling rank's (:func:`~torchair_dist.base.util.
calling_rank`), not the process's: with torch's threaded process group the ranks are threads of
one process, and each keeps its own epoch, its own published flag and its own acknowledgements.

At run time a rank that leaves a step because one of its graph's collectives failed (a peer died
or stopped: :class:`~torchair_dist.errors.CollectiveFaultError`) tells the transports that keep
their own state (:func:`on_run_fault` listeners, :func:`run_fault`): the shared-memory transport
marks its exchanges abandoned, so a peer that arrives later fails naming this rank instead of
finishing an exchange this rank will never join.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch.distributed as dist

from ..base.util import calling_rank

log = logging.getLogger("torchair_dist")

POLL_S = 0.1  # how often a waiting rank looks for a peer's failure record
PREFIX = "torchair_dist/consistency"
# per calling rank (None: no process group yet, the process's default); see the docstring
_epochs: Dict[Optional[int], int] = {}  # the current check epoch (reset_check_sequence bumps it)
# (acknowledging rank, failed rank, time) of the records that rank no longer reports (see below)
_acknowledged: Set[Tuple[Optional[int], int, object]] = set()
_published: Set[Optional[int]] = set()  # ranks that published a failure since they acknowledged
_run_fault_listeners: List[Callable[[BaseException], None]] = []  # see on_run_fault


def _store():
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    if no_peers_reason() is not None:
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store (threaded PGs): nothing to publish to
        return None


_probed = [None, None]  # (the last store probed, why it cannot carry the records, or None)


def no_peers_reason(store=None) -> Optional[str]:
    """Why the cross-rank machinery (failure records, the consistency check, the shared-memory
    transport's set-up) cannot run on the default group, or None when it can.

    Two cases: the default group is PyTorch's *fake* process group (``init_process_group("fake",
    store=FakeStore())``, used by torch's tests and dry-run tools: one real process plays a
    rank, so there are no peers to agree with or to exchange with), and a store that cannot
    carry keys (``check`` raises, as a bare ``dist.Store`` subclass such as ``FakeStore`` does:
    "Not implemented"). The store is probed once; the first time it is found unusable one INFO
    line says so, and callers step aside.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    if store is None:
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 - no store: the callers have their own fallback
            store = None
    if store is not None and _probed[0] is store:
        return _probed[1]
    reason = None
    try:
        backend = str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a group without a backend name
        backend = ""
    if backend == "fake":
        reason = ("the default process group is the fake one (one process stands in for a "
                  "rank: there are no peers to check against or exchange with)")
    elif store is not None:
        try:
            store.check([f"{PREFIX}/probe"])
        except Exception as exc:  # noqa: BLE001 - whatever the store raises, it cannot carry
            text = str(exc).strip()
            reason = (f"the process group's store ({type(store).__name__}) cannot carry keys "
                      f"({text.splitlines()[-1][:120] if text else type(exc).__name__})")
    if store is not None:
        _probed[:] = [store, reason]
    if reason is not None:
        log.info("the cross-rank consistency check, failure records and "
                 "shared-memory collectives step aside: %s", reason)
    return reason


def _key(rank: int) -> str:
    return f"{PREFIX}/{epoch()}/failed/{rank}"


def publish(exc: BaseException, stage: str, graph: str = "", store=None) -> bool:
    """Publish this rank's failure so that peers waiting for it raise at once. True if written.

    Never raises: publishing is best effort on a path that is already failing.
    """
    store = store if store is not None else _store()
    if store is None:
        return False
    rank = dist.get_rank()
    message = f"{type(exc).__name__}: {exc}".strip()
    if len(message) > 2000:
        message = message[:2000] + " ..."
    record = {"rank": rank, "kind": type(exc).__name__, "error": message, "stage": stage,
              "graph": graph,
              "time": time.time()}
    try:
        store.set(_key(rank), json.dumps(record))
    except Exception as err:  # noqa: BLE001
        log.warning("rank %d: could not publish its failure to the peers: %s", rank, err)
        return False
    _published.add(rank)
    log.debug("rank %d: published failure (%s): %s", rank, stage, message[:200])
    return True


def failed_peers(ranks: Iterable[int], store=None, *, all_records: bool = False
                 ) -> Dict[int, dict]:
    """The failure records of those of ``ranks`` that published one in this epoch (and that
    the calling rank has not acknowledged, unless ``all_records``)."""
    store = store if store is not None else _store()
    found: Dict[int, dict] = {}
    if store is None:
        return found
    me = calling_rank()
    for r in sorted(set(ranks)):
        key = _key(r)
        if store.check([key]):
            try:
                found[r] = json.loads(store.get(key))
            except Exception:  # noqa: BLE001 - a malformed record still names the rank
                found[r] = {"rank": r, "error": "(unreadable failure record)", "stage": "?"}
            if not all_records and (me, r, found[r].get("time")) in _acknowledged:
                del found[r]
    return found


def acknowledge_after_own_failure(world_size: int, store=None) -> None:
    """Called as a check starts. If the calling rank failed (and published) since the last
    call, the records its peers published in the same episode are old news to it: a program
    that caught the error and compiles on without ``reset_check_sequence()`` must not be failed
    again by them. Records published later are reported as usual."""
    me = calling_rank()
    if me not in _published:
        return
    _published.discard(me)
    records = failed_peers(range(world_size), store=store)
    _acknowledged.update((me, r, rec.get("time")) for r, rec in records.items())


def describe(records: Dict[int, dict]) -> str:
    parts = []
    for r, rec in sorted(records.items()):
        where = f" of {rec['graph']}" if rec.get("graph") else ""
        parts.append(f"rank {r} failed in {rec.get('stage', '?')}{where}: {rec.get('error')}")
    return "; ".join(parts)


# ------------------------------------------------------------------------ run-time faults
def on_run_fault(listener: Callable[[BaseException], None]) -> None:
    """Have ``listener(exc)`` called by :func:`run_fault` (once per listener, however often
    registered)."""
    if listener not in _run_fault_listeners:
        _run_fault_listeners.append(listener)


def run_fault(exc: BaseException) -> None:
    """A compiled graph of this process failed at run time with a collective fault ``exc``:
    call every listener. Never raises (the caller is already failing); a listener's error is
    logged."""
    for listener in list(_run_fault_listeners):
        try:
            listener(exc)
        except Exception as err:  # noqa: BLE001 - best effort on a failing path
            log.warning("a run-time fault listener (%s) failed: %s",
                        getattr(listener, "__qualname__", listener), err)


# ------------------------------------------------------------------- Dynamo-level failures
def _recoverable(exc: BaseException, one_graph: bool) -> bool:
    """Dynamo handles this itself (the frame falls back to eager / a graph break)."""
    import torch._dynamo

    if torch._dynamo.config.suppress_errors:
        return True
    from torch._dynamo.exc import Unsupported

    return isinstance(exc, Unsupported) and not one_graph and \
        not getattr(torch._dynamo.config, "error_on_graph_break", False)


_hook_installed = [False]


def install_trace_hook() -> bool:
    """Wrap Dynamo's per-frame ``_compile`` so that a failure that reaches the user is published
    (stage ``"compile"``). Idempotent; False when this torch has no such function."""
    if _hook_installed[0]:
        return True
    try:
        from torch._dynamo import convert_frame
    except ImportError:
        return False
    original = getattr(convert_frame, "_compile", None)
    if original is None or getattr(original, "_torchair_dist_hook", False):
        _hook_installed[0] = original is not None
        return _hook_installed[0]

    def _compile(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            one_graph = kwargs.get("one_graph", args[6] if len(args) > 6 else False)
            if not isinstance(exc, (KeyboardInterrupt, SystemExit)) and \
                    not _recoverable(exc, bool(one_graph)):
                publish(_root_cause(exc), "compile")
            raise

    _compile._torchair_dist_hook = True
    _compile.__wrapped__ = original
    convert_frame._compile = _compile
    _hook_installed[0] = True
    return True


def _root_cause(exc: BaseException) -> BaseException:
    """Our own error inside Dynamo's wrappers (BackendCompilerFailed, ...) when there is one."""
    seen = exc
    for _ in range(8):
        inner = getattr(seen, "inner_exception", None) or seen.__cause__
        if inner is None:
            break
        seen = inner
        if type(seen).__module__.startswith("torchair_dist"):
            return seen
    return exc


def epoch() -> int:
    """The calling rank's check epoch (the process's default where no group is initialised)."""
    rank = calling_rank()
    return _epochs.get(rank, _epochs.get(None, 0))


def set_epoch(value: Optional[int] = None) -> int:
    """Start the calling rank's next epoch (``value``, else the current one plus one) with a
    clean board. Called without a process group it sets the process's default, for every rank
    this process plays."""
    rank = calling_rank()
    new = epoch() + 1 if value is None else int(value)
    if rank is None:
        _epochs.clear()
        _acknowledged.clear()
        _published.clear()
    else:
        _acknowledged.difference_update({a for a in _acknowledged if a[0] == rank})
        _published.discard(rank)
    _epochs[rank] = new
    return new
