"""Waits of the cross-rank check (collectives/waits.py) on a HashStore, one process: peers are
simulated by writing their keys and announcements. A wait-for cycle is a mismatch at once; a
peer's published failure ends the wait with its class; a stale announcement is no cycle."""
import json
import threading
import time

import pytest
import torch.distributed as dist

from torchair_dist.collectives import failures, waits
from torchair_dist.errors import CollectiveMismatchError, PeerFailedError


@pytest.fixture
def store():
    failures.set_epoch(4242)
    yield dist.HashStore()
    failures.set_epoch(0)


def _key(scope, rank):
    return f"{failures.PREFIX}/{failures.epoch()}/{scope}/0/{rank}"


def _wait(scope, peer):
    return (scope, 0, peer, _key(scope, peer), "all_reduce(float32[4]) on ranks [0, 1]",
            "fingerprint")


def _publish(store, rank, kind, error, stage, **extra):
    """A failure record of ``rank`` as ``failures`` publishes it."""
    rec = {"rank": rank, "kind": kind, "error": error, "stage": stage, **extra}
    store.set(f"{failures.PREFIX}/{failures.epoch()}/failed/{rank}", json.dumps(rec))


def _run(store, rank, pending, timeout_s=20.0):
    t0 = time.monotonic()
    waits.announce(store, rank, "graph_t", pending)
    try:
        waits.wait_for(store, pending, rank, "graph_t", time.monotonic() + timeout_s, timeout_s)
    finally:
        elapsed = time.monotonic() - t0
    return elapsed


def test_two_rank_cycle_is_a_mismatch_at_once(store):
    # rank 1 waits for rank 0 on a subgroup scope rank 0 never reaches; rank 0 waits for rank 1
    # on the world scope rank 1's graph does not have
    waits.announce(store, 1, "graph_1", [_wait("group:0,1", 0)])
    t0 = time.monotonic()
    with pytest.raises(CollectiveMismatchError) as info:
        _run(store, 0, [_wait("group:0,1,2", 1)])
    # each hop names what that rank waits for, in which graph, at which check
    text = str(info.value)
    assert "ranks compiled different collectives in graph_t" in text, text
    assert ("in a cycle: rank 0 (graph_t) waits for rank 1's fingerprint of group:0,1,2 check "
            "#0; rank 1 (graph_1) waits for rank 0's fingerprint of group:0,1 check #0.") in text
    assert time.monotonic() - t0 < 10  # far below the 20 s timeout


def test_ranks_at_different_checks_of_one_scope_are_out_of_step(store):
    # rank 1 waits at check #0 of the world scope, rank 0 at check #1: the same collectives,
    # one rank checked one graph more there; the error says so and names both waits
    ahead = ("group:0,1", 1, 1, _key("group:0,1", 1).replace("/0/1", "/1/1"),
             "all_reduce(float32[4]) on ranks [0, 1]", "fingerprint")
    waits.announce(store, 1, "graph_0", [_wait("group:0,1", 0)])
    with pytest.raises(CollectiveMismatchError) as info:
        _run(store, 0, [ahead])
    text = str(info.value)
    assert ("rank 0 (graph_t) waits for rank 1's fingerprint of group:0,1 check #1; rank 1 "
            "(graph_0) waits for rank 0's fingerprint of group:0,1 check #0") in text, text
    assert "checks of group:0,1 are out of step" in text and "different collectives" not in text


def test_three_rank_cycle(store):
    waits.announce(store, 1, "g", [_wait("p2p:1,2", 2)])
    waits.announce(store, 2, "g", [_wait("p2p:0,2", 0)])
    with pytest.raises(CollectiveMismatchError, match="rank 1 .* rank 2 .* rank 0"):
        _run(store, 0, [_wait("p2p:0,1", 1)])


def test_cycle_not_through_this_rank_is_left_to_its_ranks(store):
    waits.announce(store, 1, "g", [_wait("p2p:1,2", 2)])
    waits.announce(store, 2, "g", [_wait("p2p:1,2", 1)])
    assert waits.find_cycle(store, 0, [_wait("group:0,1", 1)]) is None
    # once they fail (mismatch), this rank fails with their class, naming them
    _publish(store, 1, "CollectiveMismatchError", "CollectiveMismatchError: x",
             "the cross-rank check", graph="g")
    with pytest.raises(CollectiveMismatchError, match="rank 1 failed in the cross-rank check"):
        _run(store, 0, [_wait("group:0,1", 1)])


def test_peer_compile_failure_is_peer_failed(store):
    _publish(store, 1, "UnsupportedOpError", "UnsupportedOpError: logcumsumexp", "compile",
             graph="")
    with pytest.raises(PeerFailedError, match="rank 1 failed in compile.*logcumsumexp"):
        _run(store, 0, [_wait("group:0,1", 1)])


def test_stale_announcement_is_no_cycle(store):
    # rank 1's announcement names a key of rank 0 that exists: rank 1 left that check
    store.set(_key("group:0,1", 0), "{}")
    waits.announce(store, 1, "g", [_wait("group:0,1", 0)])
    late = _key("group:0,1,2", 1)
    threading.Timer(1.0, lambda: store.set(late, "{}")).start()
    assert 0.9 < _run(store, 0, [_wait("group:0,1,2", 1)]) < 10  # waited for the key, no error


def test_timeout_names_the_silent_rank(store):
    with pytest.raises(CollectiveMismatchError, match=r"rank\(s\) \[1\] published no"):
        _run(store, 0, [_wait("group:0,1", 1)], timeout_s=0.5)


def test_failed_rank_is_no_link_of_a_cycle(store):
    # rank 2 failed in its check: its announcement still names rank 0's missing key
    waits.announce(store, 1, "g", [_wait("p2p:1,2", 2)])
    waits.announce(store, 2, "g", [_wait("p2p:0,2", 0)])
    _publish(store, 2, "UnsupportedOpError", "x", "compile")
    assert waits.find_cycle(store, 0, [_wait("p2p:0,1", 1)]) is None


def test_records_of_an_episode_this_rank_failed_in_are_acknowledged(store):
    # a program caught its check error and compiles on without reset_check_sequence(): the
    # peer's record of that same episode must not fail its next check; a later one does
    key = f"{failures.PREFIX}/{failures.epoch()}/failed/1"
    store.set(key, json.dumps({"rank": 1, "kind": "CollectiveMismatchError", "error": "old",
                               "stage": "the cross-rank check", "time": 1.0}))
    failures._published.add(None)  # this rank (no group: None) failed and published then
    failures.acknowledge_after_own_failure(2, store=store)
    assert failures.failed_peers([1], store=store) == {}
    assert 1 in failures.failed_peers([1], store=store, all_records=True)
    store.set(key, json.dumps({"rank": 1, "kind": "UnsupportedOpError", "error": "new",
                               "stage": "compile", "time": 2.0}))
    with pytest.raises(PeerFailedError, match="rank 1 failed in compile: new"):
        _run(store, 0, [_wait("group:0,1", 1)])


def test_peers_that_fail_together_are_all_named(store):
    # rank 2 waits for ranks 0, 1 and 3; rank 0 has failed, rank 1 publishes its key, rank 3
    # fails a moment later: the error names both failed ranks, not only the first one seen
    _publish(store, 0, "UnsupportedOpError", "no converter for A", "compile")
    store.set(_key("world", 1), "fp")

    def late():
        time.sleep(0.15)
        _publish(store, 3, "UnsupportedOpError", "no converter for B", "compile")

    thread = threading.Thread(target=late)
    thread.start()
    try:
        with pytest.raises(PeerFailedError) as info:
            _run(store, 2, [_wait("world", 0), _wait("world", 1), _wait("world", 3)])
    finally:
        thread.join()
    assert "rank 0 failed" in str(info.value) and "rank 3 failed" in str(info.value)
    assert "converter for A" in str(info.value) and "converter for B" in str(info.value)


def test_a_slow_healthy_peer_delays_the_error_by_the_grace_only(store):
    _publish(store, 0, "UnsupportedOpError", "no converter", "compile")
    t0 = time.monotonic()
    with pytest.raises(PeerFailedError, match="rank 0 failed") as info:
        _run(store, 2, [_wait("world", 0), _wait("world", 1)])  # rank 1 never publishes
    assert "rank 1" not in str(info.value)
    assert time.monotonic() - t0 < waits.FAILED_GRACE_S + 5  # not the 20 s timeout


def test_a_peer_failure_names_the_stage_and_graph_it_failed_in():
    """A run-time fault is not reported as a compile failure ("failed in the run while
    compiling graph_3" before)."""
    from torchair_dist.collectives import failures

    text = failures.describe({1: {"stage": "the run", "graph": "graph_3", "error": "boom"},
                              2: {"stage": "compile", "graph": "", "error": "bad op"}})
    assert text == "rank 1 failed in the run of graph_3: boom; rank 2 failed in compile: bad op"
