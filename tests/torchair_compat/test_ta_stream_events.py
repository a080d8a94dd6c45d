"""The stream ops in a compiled graph, counted as TorchAir's aclgraph smoke behaviours count them
(``test_event_wait_with_stream``, ``test_event_record_with_stream``, ``test_stream_wait_event``,
``test_stream_record_event_with_event``: exactly one record and one wait node for the user's one
event). A program that orders its cross-stream read with one user event record/wait pair
compiles to exactly that pair: the ``stream_order`` stage adds no event of its own. The
``record_stream`` ops are the allocator's (a tensor used on another stream than its
allocation's), not events. Results equal the program without streams (eager CPU events cannot
record), under every CPU stream order (the tests are named *stream*: conftest reruns them).

TorchAir's own smoke programs record the event *before* the producer (they check the op
rewrite, not the ordering): such a wait does not order the read, and the stage adds the one
event that does."""
import pytest
import torch

import torchair_dist as torchair
from torchair_dist.base.torch_support import torch_at_least
from torchair_dist.pipeline.route import record_graphs

NS = "torchair_dist_streams"
S1 = torch.Stream(device="cpu")
S2 = torch.Stream(device="cpu")
EVENT = torch.Event("cpu")
TAGGED = torchair.ops.npu_create_tagged_event("ta_stream_events_ev")


def _stream_ops(gm):
    return [(str(n.target).split(".")[1], n.args) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith(NS)]


def _compiled_ops(fn, plain):
    """Compile ``fn`` (npugraph_ex), check capture and replays against ``plain``, return the
    stream ops of the graph the backend received."""
    with record_graphs() as graphs:
        opt = torch.compile(fn, backend="npugraph_ex", fullgraph=True, dynamic=False)
        for i in range(3):
            t = torch.randn(4, 4, generator=torch.Generator().manual_seed(i))
            torch.testing.assert_close(opt(t), plain(t), rtol=0, atol=0)
    assert len(graphs) == 1
    return _stream_ops(graphs[0].gm)


def _plain(t):
    return (t + 1) + 2


def _names(ops):
    return [name for name, _ in ops]


# one user pair between two side streams, recorded inside S1's scope: the allocator's
# record_stream of the input on S1, of tmp on S2 and of the output on the graph's stream; the
# output itself is ordered by the join
SIDE_TO_SIDE = ["fork", "stream_enter", "record_stream", "event_record", "stream_exit",
                "event_wait", "stream_enter", "record_stream", "stream_exit", "join",
                "record_stream"]


def _user_pair(ops):
    """The one record and the one wait are the user's event (not a tag the stage made)."""
    (rec,) = [a for n, a in ops if n == "event_record"]
    (wait,) = [a for n, a in ops if n == "event_wait"]
    assert rec[0] == wait[0] and not rec[0].startswith("x"), ops
    return rec, wait


def test_event_record_with_stream_and_event_wait_with_stream():
    def f(t):
        with S1:
            tmp = t + 1
        EVENT.record(S1)
        EVENT.wait(S2)
        with S2:
            r = tmp + 2
        return r

    ops = _compiled_ops(f, _plain)
    assert _names(ops) == ["fork", "stream_enter", "record_stream", "stream_exit",
                           "event_record", "event_wait", "stream_enter", "record_stream",
                           "stream_exit", "join", "record_stream"]
    (_, s1), (_, s2) = _user_pair(ops)
    assert s1 != s2 and s1 and s2


def test_stream_wait_event():
    def f(t):
        with S1:
            tmp = t + 1
            EVENT.record()
        S2.wait_event(EVENT)
        with S2:
            r = tmp + 2
        return r

    ops = _compiled_ops(f, _plain)
    assert _names(ops) == SIDE_TO_SIDE
    _user_pair(ops)


@pytest.mark.skipif(not torch_at_least(2, 13), reason="torch 2.11's Dynamo cannot run "
                    "stream.record_event(event) on fake tensors")
def test_stream_record_event_with_event():
    def f(t):
        with S1:
            tmp = t + 1
            S1.record_event(EVENT)
        with S2:
            EVENT.wait()
            r = tmp + 2
        return r

    ops = _compiled_ops(f, _plain)
    assert _names(ops) == ["fork", "stream_enter", "record_stream", "event_record",
                           "stream_exit", "stream_enter", "event_wait", "record_stream",
                           "stream_exit", "join", "record_stream"]
    _user_pair(ops)


def test_tagged_event_recorded_on_a_side_stream_waited_on_the_main_stream():
    def f(t):
        with torchair.scope.npu_stream_switch("side"):
            tmp = t + 1
            torchair.ops.npu_tagged_event_record(TAGGED)
        torchair.ops.npu_tagged_event_wait(TAGGED)
        return tmp + 2

    ops = _compiled_ops(f, _plain)
    assert _names(ops) == ["fork", "stream_enter", "record_stream", "event_record",
                           "stream_exit", "event_wait", "record_stream", "join"]
    _user_pair(ops)


def test_a_wait_on_an_event_recorded_before_the_producer_gets_the_streams_event():
    def f(t):  # TorchAir's smoke order: e1.record() then the add, on s1
        with S1:
            EVENT.record()
            tmp = t + 1
        S2.wait_event(EVENT)
        with S2:
            r = tmp + 2
        return r

    ops = _compiled_ops(f, _plain)
    records = [a for n, a in ops if n == "event_record"]
    waits = [a for n, a in ops if n == "event_wait"]
    assert len(records) == len(waits) == 2
    added = [a for a in records if a[0].startswith("x")]
    assert len(added) == 1 and added[0][0] in [a[0] for a in waits]
