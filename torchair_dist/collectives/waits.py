"""The bounded waits of the cross-rank check, and wait-for cycles between ranks.

A rank in the check waits for store keys its peers publish (their fingerprints, then their
confirmations). Before it waits it *announces* what it waits for under
``torchair_dist/consistency/<epoch>/waiting/<rank>``:
``{"graph", "waits": [[peer, key, scope, phase, check number], ...]}``.
While waiting (:func:`wait_for`) it raises

* :class:`~torchair_dist.errors.PeerFailedError` as soon as a peer whose key is missing has
  published a failure record (:mod:`.failures`) — or ``CollectiveMismatchError`` when every such
  record is itself a mismatch: the cause is the program's, not a crash. The other peers still
  missing get up to ``FAILED_GRACE_S`` (0.5 s) to publish theirs, so the error names every rank
  that failed together;
* :class:`~torchair_dist.errors.CollectiveMismatchError` as soon as it finds a *wait-for cycle*:
  this rank waits for a key of rank ``p1``, ``p1`` announced it waits for a missing key of
  ``p2``, ..., and the last one waits for a key of this rank. Ranks in the check publish all of
  their keys of that check before they wait, so a missing key of a rank blocked in the check
  stays missing; the cycle can never resolve (e.g. one rank holds a collective on a subgroup,
  or a send, that its peer's graph lacks at that point). The cycle is confirmed twice, a poll
  apart, so a peer that just failed is reported by its failure record instead. The error names
  each hop as it is: which rank, in which graph, waits for which rank's fingerprint or
  confirmation of which scope and check number — ranks at different check numbers of one scope
  are out of step (one checked more graphs there), not holding different collectives;
* ``CollectiveMismatchError`` after the timeout, naming the ranks that published nothing.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import CollectiveMismatchError, PeerFailedError
from . import failures

log = logging.getLogger("torchair_dist")

CYCLE_AFTER_S = 0.3  # look for wait-for cycles once a wait has lasted this long

# a wait: (scope, check number, peer rank, store key, this rank's first entry there, phase)
Wait = Tuple[str, int, int, str, str, str]


def _key(rank: int) -> str:
    return f"{failures.PREFIX}/{failures.epoch()}/waiting/{rank}"


def announce(store, rank: int, graph_name: str, waits: Sequence[Wait]) -> None:
    store.set(_key(rank), json.dumps({"graph": graph_name,
                                      "waits": [[w[2], w[3], w[0], w[5], w[1]] for w in waits]}))


def _announced(store, rank: int) -> Optional[dict]:
    key = _key(rank)
    if not store.check([key]):
        return None
    try:
        return json.loads(store.get(key))
    except Exception:  # noqa: BLE001 - unreadable: no edge
        return None


# one blocked wait of a cycle: (waiting rank, the rank it waits for, scope, check number,
# phase "fingerprint" | "confirm", the waiting rank's graph; None for this rank's own)
Hop = Tuple[int, int, str, int, str, Optional[str]]


def find_cycle(store, rank: int, pending: Sequence[Wait]) -> Optional[List[Hop]]:
    """A chain of blocked waits from this rank back to itself, each waiting for a missing key
    of the next: ``[(rank, p1, ...), (p1, p2, ...), ..., (pn, rank, ...)]`` (:data:`Hop`);
    None if there is none."""
    missing: Dict[str, bool] = {}

    def is_missing(key):
        if key not in missing:
            missing[key] = not store.check([key])
        return missing[key]

    stack = [(w[2], [(rank, w[2], w[0], w[1], w[5], None)]) for w in pending]
    seen = set()
    while stack:
        peer, chain = stack.pop()
        if peer in seen:
            continue
        seen.add(peer)
        if failures.failed_peers([peer], store=store, all_records=True):
            continue  # not blocked: it failed (its announcement is stale); reported as such
        record = _announced(store, peer) or {}
        for other, key, scope, phase, *seq in record.get("waits", []):
            if not is_missing(key):
                continue
            hop = (peer, other, scope, seq[0] if seq else -1, phase, record.get("graph", "?"))
            if other == rank:
                return chain + [hop]
            if other not in seen:
                stack.append((other, chain + [hop]))
    return None


def _peer_failed(rank: int, graph_name: str, failed: Dict[int, dict]) -> Exception:
    text = failures.describe(failed)
    if all(rec.get("kind") == "CollectiveMismatchError" for rec in failed.values()):
        return CollectiveMismatchError(
            f"rank {rank}: cannot run {graph_name}: the ranks compiled different collectives; "
            f"{text}")
    return PeerFailedError(
        f"rank {rank}: cannot run {graph_name}: {text}. This rank compiled fine; the failed "
        f"rank(s) never reached the cross-rank check, so the collectives they share with this "
        f"rank would hang.")


FAILED_GRACE_S = 0.5  # after a first failure record: how long the other pending peers get


def _all_failed(store, pending: Sequence[Wait], failed: Dict[int, dict]) -> Dict[int, dict]:
    """``failed`` plus the failure records of the other pending peers that publish one within
    :data:`FAILED_GRACE_S`, so an error names every rank that failed together, not only the
    first one this rank saw. Returns early once every pending peer failed or published."""
    end = time.monotonic() + FAILED_GRACE_S
    while True:
        open_ = [w for w in pending if w[2] not in failed and not store.check([w[3]])]
        if not open_ or time.monotonic() >= end:
            return failed
        time.sleep(0.02)
        failed = {**failed, **failures.failed_peers({w[2] for w in open_}, store=store)}


def _describe_hop(hop: Hop, graph_name: str) -> str:
    waiter, peer, scope, seq, phase, graph = hop
    what = "fingerprint" if phase == "fingerprint" else "confirmation"
    number = f" check #{seq}" if seq >= 0 else ""
    graph = graph_name if graph is None else graph  # None: this rank's own wait
    return f"rank {waiter} ({graph}) waits for rank {peer}'s {what} of {scope}{number}"


def _cycle_error(rank: int, graph_name: str, chain: List[Hop],
                 pending: Sequence[Wait]) -> Exception:
    first = next((w for w in pending if w[2] == chain[0][1]), pending[0])
    hops = "; ".join(_describe_hop(h, graph_name) for h in chain)
    scopes, numbers = {h[2] for h in chain}, {h[3] for h in chain}
    if len(scopes) == 1 and len(numbers) > 1:
        what = (f"the ranks' checks of {first[0]} are out of step: one checked more graphs "
                f"with collectives there than the others (a graph only some ranks compiled or "
                f"ran, or reset_check_sequence() called on some ranks only)")
    else:
        what = (f"ranks compiled different collectives in {graph_name}: each waits for "
                f"collectives the next one's graph does not have at this point")
    return CollectiveMismatchError(
        f"rank {rank}: {what}; running it would hang: the ranks wait for each other in the "
        f"cross-rank check, in a cycle: {hops}. This rank's first collective on {first[0]}: "
        f"{first[4]}.")


def wait_for(store, waits: Sequence[Wait], rank: int, graph_name: str, deadline: float,
             timeout_s: float) -> None:
    """Wait until every key of ``waits`` exists (see the module docstring for the errors)."""
    pending = list(waits)
    start = time.monotonic()
    suspect, pause = None, 0.001  # polls start fast (peers usually publish within ms)
    while pending:
        # store.check, not short store.wait()s: a timed-out wait logs c10d socket warnings
        pending = [w for w in pending if not store.check([w[3]])]
        if not pending:
            return
        failed = failures.failed_peers({w[2] for w in pending}, store=store)
        if failed:
            raise _peer_failed(rank, graph_name, _all_failed(store, pending, failed))
        if time.monotonic() - start >= CYCLE_AFTER_S:
            chain = find_cycle(store, rank, pending)
            if chain is not None and chain == suspect:
                raise _cycle_error(rank, graph_name, chain, pending)
            suspect = chain
        if time.monotonic() >= deadline:
            what = "published no collectives" if pending[0][5] == "fingerprint" else \
                "did not confirm their check"
            raise CollectiveMismatchError(
                f"rank {rank}: cross-rank check of {graph_name} timed out after {timeout_s:g}s: "
                f"rank(s) {sorted({w[2] for w in pending})} {what} for "
                f"{', '.join(sorted({f'{w[0]} (check #{w[1]})' for w in pending}))} — they "
                f"compiled a graph with other collectives or groups, took a path without them, "
                f"or died. This rank's first collective there: {pending[0][4]}. Raise "
                f"distributed_config.consistency_timeout if those ranks are just slow.")
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(failures.POLL_S, pause * 2)
