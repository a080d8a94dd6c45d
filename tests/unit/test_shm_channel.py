"""The shared-memory transport (``torchair_dist.cpu.shm``) in one process: two
:class:`Channel` objects over one anonymous mapping play two ranks on two threads; a peer that
has exited or never arrives is named; the graph rewrite points exactly the covered collectives
at the transport."""
import mmap
import os
import subprocess
import sys
import threading

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import pytest
import torch

from torchair_dist.cpu import shm, shm_graph, shm_segment
from torchair_dist.errors import CollectiveFaultError


def _pair(world=2, slot=256, pids=None):
    mm = mmap.mmap(-1, shm_segment.segment_bytes(world, slot))
    chans = [shm.Channel(mm, r, world, list(range(world)), "test", slot) for r in range(world)]
    for r, pid in enumerate(pids or [os.getpid()] * world):
        chans[0]._words[chans[0]._pid_at[r]] = pid
    return chans


def _on_threads(fns):
    out, errors = [None] * len(fns), []

    def run(i):
        try:
            out[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("numel", [5, 64, 1000], ids=["tiny", "one-slot", "chunked"])
def test_all_reduce_equals_the_sum_on_both_ranks(dtype, numel):
    chans = _pair(slot=256)
    xs = [torch.arange(numel).to(dtype) * (r + 1) - 3 for r in range(2)]
    want = xs[0] + xs[1]
    outs = _on_threads([lambda r=r: chans[r].all_reduce_(xs[r].clone(), "sum")
                        for r in range(2)])
    for out in outs:
        assert torch.equal(out, want)
    assert chans[0].seq == chans[1].seq == -(-numel * xs[0].element_size() // 256)


def test_max_and_a_non_contiguous_input_written_back():
    chans = _pair()
    base = [torch.randn(6, 4, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    views = [b.t() for b in base]                       # non-contiguous
    want = torch.maximum(views[0], views[1])
    _on_threads([lambda r=r: chans[r].all_reduce_(views[r], "max") for r in range(2)])
    for v in views:
        assert torch.equal(v, want)                      # written into the caller's tensor


@pytest.mark.parametrize("rows", [4, 200], ids=["one-exchange", "chunked"])
def test_all_to_all_equal_pieces(rows):
    chans = _pair(slot=256)
    xs = [torch.arange(rows * 3, dtype=torch.float32).view(rows, 3) + 1000 * r for r in range(2)]
    outs = _on_threads([lambda r=r: chans[r].all_to_all(xs[r], True) for r in range(2)])
    half = rows // 2
    for r, out in enumerate(outs):
        assert torch.equal(out, torch.cat([xs[0][r * half:(r + 1) * half],
                                           xs[1][r * half:(r + 1) * half]]))


def test_all_to_all_vote_sends_every_rank_to_gloo():
    """One rank not eligible: both get None (both callers then use gloo)."""
    chans = _pair()
    xs = [torch.ones(4, 2), torch.ones(4, 2)]
    outs = _on_threads([lambda: chans[0].all_to_all(xs[0], True),
                        lambda: chans[1].all_to_all(xs[1], False)])
    assert outs == [None, None]
    # and the next exchange still works
    outs = _on_threads([lambda r=r: chans[r].all_reduce_(torch.ones(3), "sum") for r in range(2)])
    assert all(torch.equal(o, torch.full((3,), 2.0)) for o in outs)


def test_a_peer_whose_process_exited_is_named_at_once():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    chans = _pair(pids=[os.getpid(), dead.pid])
    with pytest.raises(CollectiveFaultError, match=rf"rank 1 .*pid {dead.pid}\) has exited"):
        chans[0].all_reduce_(torch.ones(4), "sum")


def test_a_peer_that_never_arrives_is_named_after_the_timeout():
    chans = _pair()
    chans[0].timeout = 0.3
    with pytest.raises(CollectiveFaultError, match=r"rank 1 never reached it: it did not "
                                                   r"arrive within 0.3 s"):
        chans[0].all_reduce_(torch.ones(4), "sum")


# -- the graph rewrite -----------------------------------------------------------------------
def _graph(reduce_op="sum", device="cpu"):
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.fx.Graph()
    x = g.placeholder("x")
    with FakeTensorMode() as mode:
        x.meta["val"] = mode.from_tensor(torch.empty(4, device=device))
    c10d = torch.ops._c10d_functional
    ar = g.call_function(c10d.all_reduce_.default, (x, reduce_op, "0"))
    w = g.call_function(c10d.wait_tensor.default, (ar,))
    g.output(g.call_function(torch.ops.aten.add.Tensor, (w, 1)))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_rewrite_points_the_all_reduce_at_the_transport_and_drops_its_wait():
    gm = _graph()
    assert shm_graph.rewrite_graph(gm) == 1
    assert _targets(gm) == ["torchair_dist.shm_all_reduce_.default", "aten.add.Tensor"]


def test_rewrite_leaves_what_the_transport_does_not_cover():
    gm = _graph(reduce_op="avg")
    assert shm_graph.rewrite_graph(gm) == 0
    assert "_c10d_functional.wait_tensor.default" in _targets(gm)
    gm = _graph(device="meta")
    assert shm_graph.rewrite_graph(gm) == 0


def test_a_vote_is_read_as_cast_even_when_the_peer_already_votes_on_the_next_exchange():
    """Rank 0 finishes an eligible all_to_all and votes "no" on the next one while rank 1 is
    still between publishing and reading the first vote: rank 1 must still see "yes"."""
    import time

    chans = _pair()
    slow = chans[1]._publish_and_wait

    def late_reader():
        bank = slow()
        time.sleep(0.3)   # rank 0 meanwhile votes on the next exchange
        return bank
    chans[1]._publish_and_wait = late_reader
    xs = [torch.arange(4.0) + 10 * r for r in range(2)]
    outs = _on_threads([
        lambda: (chans[0].all_to_all(xs[0], True), chans[0].all_to_all(xs[0], False)),
        lambda: (chans[1].all_to_all(xs[1], True), chans[1].all_to_all(xs[1], True))])
    assert torch.equal(outs[0][0], torch.tensor([0.0, 1.0, 10.0, 11.0]))
    assert torch.equal(outs[1][0], torch.tensor([2.0, 3.0, 12.0, 13.0]))
    assert outs[0][1] is None and outs[1][1] is None


def test_a_peer_outside_this_pid_namespace_is_only_timed_out():
    """A peer whose pid was not visible at setup is not declared dead by its pid."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mm = mmap.mmap(-1, shm_segment.segment_bytes(2, 256))
    ch = shm.Channel(mm, 0, 2, [0, 1], "test", 256, timeout=0.3, watch=[True, False])
    ch._words[ch._pid_at[1]] = dead.pid
    with pytest.raises(CollectiveFaultError, match="did not arrive within 0.3 s"):
        ch.all_reduce_(torch.ones(4), "sum")


# -- an abandoned exchange (issue 33) ---------------------------------------------------------
def test_a_rank_arriving_after_its_peer_gave_up_fails_naming_it():
    """Rank 0 times out waiting for rank 1 and raises; rank 1 arrives later and finds rank 0's
    sequence number published and its data in the slot: it must fail naming rank 0, not
    finish the exchange alone."""
    chans = _pair()
    chans[0].timeout = 0.3
    assert torch.equal(_on_threads([lambda r=r: chans[r].all_reduce_(torch.ones(4), "sum")
                                    for r in range(2)])[0], torch.full((4,), 2.0))
    with pytest.raises(CollectiveFaultError, match="rank 1 never reached it"):
        chans[0].all_reduce_(torch.ones(4), "sum")
    late = torch.full((4,), 5.0)
    with pytest.raises(CollectiveFaultError,
                       match=r"#2 of group test: rank 0 gave up on exchange #2 while waiting "
                             r"for this rank, which did not arrive within the group timeout\. "
                             r"This rank arrived after that"):
        chans[1].all_reduce_(late, "sum")
    assert torch.equal(late, torch.full((4,), 5.0))   # nothing of the abandoned exchange
    # the channel stays poisoned on every rank, the one that gave up included
    for r, who in ((0, "this rank gave up"), (1, "rank 0 gave up")):
        with pytest.raises(CollectiveFaultError, match=who):
            chans[r].all_to_all(torch.arange(4.0), True)


def test_a_late_all_to_all_fails_before_it_votes_or_reads():
    chans = _pair()
    chans[0].timeout = 0.3
    with pytest.raises(CollectiveFaultError, match="rank 1 never reached it"):
        chans[0].all_to_all(torch.arange(4.0), True)
    with pytest.raises(CollectiveFaultError, match="rank 0 gave up on exchange #1"):
        chans[1].all_to_all(torch.arange(4.0) + 10, True)


def test_a_waiter_stops_waiting_when_another_waiter_gave_up():
    """Three ranks: 0 and 1 wait for 2; 0 gives up after 0.3 s; 1 (a 60 s timeout) raises at
    once, naming rank 0 and the rank it waited for."""
    import time

    mm = mmap.mmap(-1, shm_segment.segment_bytes(3, 256))
    chans = [shm.Channel(mm, r, 3, [0, 1, 2], "test", 256, timeout=0.3 if r == 0 else 60)
             for r in range(3)]
    for r in range(3):
        chans[0]._words[chans[0]._pid_at[r]] = os.getpid()
    errors = [None, None]

    def wait(r):
        t0 = time.monotonic()
        try:
            chans[r].all_reduce_(torch.ones(2), "sum")
        except CollectiveFaultError as exc:
            errors[r] = (str(exc), time.monotonic() - t0)
    threads = [threading.Thread(target=wait, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "rank 2 never reached it" in errors[0][0]
    assert "rank 0 gave up on exchange #1 while waiting for rank 2" in errors[1][0], errors[1]
    assert errors[1][1] < 5, errors[1]
    with pytest.raises(CollectiveFaultError, match="rank 0 gave up on exchange #1"):
        chans[2].all_reduce_(torch.ones(2), "sum")


def test_a_run_time_fault_elsewhere_abandons_the_next_exchange(monkeypatch):
    """failures.run_fault (a graph's collective failed on any transport, gloo included) marks
    the next exchange of every channel: the peer fails there at once, naming this rank."""
    from torchair_dist.collectives import failures

    chans = _pair()
    monkeypatch.setattr(shm, "_by_group", {("test", 0): (None, chans[0])})
    _on_threads([lambda r=r: chans[r].all_reduce_(torch.ones(4), "sum") for r in range(2)])
    failures.run_fault(RuntimeError("gloo: timed out"))
    with pytest.raises(CollectiveFaultError,
                       match=r"collective #2 of group test: rank 0 gave up on exchange #2 "
                             r"\(one of its graph.s collectives failed"):
        chans[1].all_reduce_(torch.ones(4), "sum")
