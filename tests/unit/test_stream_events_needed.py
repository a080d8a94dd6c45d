"""Issue 39: the ``stream_order`` stage adds only the events a graph needs.

* The events added per program of ``tests/stream_programs.py`` (the capture report's
  ``stream_events_added``), against the counts before the stage read the one order model
  (one event per (producer, reading stream), whatever the program ordered itself).
* Every event the stage adds is needed: removing any one of its waits leaves a cross-stream
  read the happens-before check names, and the CPU model of concurrency computes wrong replays
  under an adversarial order (a planted removal is still caught).
* A user pair program's own event is the needed one: removing it is caught likewise.
"""
import os
import sys

import pytest
import torch

import torchair_dist
from torchair_dist.cpu.record import RecordGraph
from torchair_dist.platform.interfaces import InputFeed
from torchair_dist.errors import GraphValidationError
from torchair_dist.passes import happens_before as hb
from torchair_dist.pipeline.route import record_graphs
from torchair_dist.streams import api as stream_api
from torchair_dist.streams import npu_stream_switch, npu_tagged_event_record
from torchair_dist.streams import npu_tagged_event_wait

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stream_programs as sp  # noqa: E402

ORDER_ENV = "TORCHAIR_DIST_CPU_STREAM_ORDER"

# program: (events added before issue 39, events added now); the racy user-stream program's
# second read on the main stream is implied by the event of its first (s1 -> s2 -> main)
EVENTS = {"side_reads_main": (2, 1), "side_matmul": (2, 1), "side_output": (2, 0),
          "two_side_streams": (3, 1), "moe_shared_expert": (1, 1), "nested_scopes": (4, 2),
          "tagged_event_two_graphs": (2, 0), "user_streams_ordered": (2, 0),
          "user_streams_racy": (3, 2)}


@pytest.fixture(autouse=True)
def _clean(fresh_dynamo):
    yield
    stream_api._forget_tagged_events()


def _compile(program):
    """The parts of ``program`` compiled in npugraph_ex, run twice; the graphs received."""
    with record_graphs() as graphs:
        parts = [torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False)
                 for f in program.build("cpu")]
        for call in range(2):
            program.call(parts, *program.inputs(16, "cpu", call))
    return graphs


def _added_waits(gm):
    return [n for n in gm.graph.nodes if sp.stream_op_name(n) == "event_wait"
            and n.args[0].startswith("x")]


def test_events_added_per_program():
    got = {}
    for name, program in sp.PROGRAMS.items():
        torch._dynamo.reset()
        torchair_dist.reset_capture_report()
        graphs = _compile(program)
        report = torchair_dist.capture_report()
        reported = sum(next(iter(keys.values())).get("stream_events_added", 0)
                       for keys in report.values())
        records = sum(1 for g in graphs for n in g.gm.graph.nodes
                      if sp.stream_op_name(n) == "event_record" and n.args[0].startswith("x"))
        assert reported == records, (name, report)
        got[name] = reported
    assert got == {name: now for name, (_, now) in EVENTS.items()}
    assert sum(now for _, now in EVENTS.values()) == 8       # 21 before


@pytest.mark.parametrize("name", [n for n, (_, now) in EVENTS.items() if now])
def test_removing_any_added_event_is_caught_by_the_happens_before_check(name):
    graphs = _compile(sp.PROGRAMS[name])
    planted = 0
    for ctx in graphs:
        for k in range(len(_added_waits(ctx.gm))):
            gm = torch.fx.GraphModule(ctx.gm, ctx.gm.graph.__deepcopy__())  # a fresh copy
            assert hb.unordered_edges(gm.graph) == []
            gm.graph.erase_node(_added_waits(gm)[k])
            assert hb.unordered_edges(gm.graph), f"wait {k} of {name} was not needed"
            planted += 1
    assert planted == EVENTS[name][1]


def _replay_errors(gm, program, n=3):
    """Capture on the record stand-in, then the max abs error of each replay (NaN: inf)."""
    graph = RecordGraph(gm)
    first = list(program.inputs(16, "cpu", 0))
    graph.capture(None, first, InputFeed.of_all(first))
    errors = []
    for i in range(1, n + 1):
        args = list(program.inputs(16, "cpu", i))
        graph.replay(args)
        want = program.reference("cpu", *args)
        want = want if isinstance(want, tuple) else (want,)
        errors.append(max(float(torch.nan_to_num((a - b).abs(), nan=float("inf")).max())
                          for a, b in zip(graph.outputs, want)))
    return errors


@pytest.mark.parametrize("name", ["side_reads_main", "two_side_streams", "nested_scopes"])
def test_a_planted_removal_is_wrong_under_the_late_cpu_order(monkeypatch, name):
    program = sp.PROGRAMS[name]
    (ctx,) = _compile(program)
    monkeypatch.setenv(ORDER_ENV, "late")
    assert _replay_errors(ctx.gm, program) == [0.0] * 3   # the stage's events: right
    gm = ctx.gm
    for wait in _added_waits(gm):
        gm.graph.erase_node(wait)
    gm.recompile()
    cfg = torchair_dist.CompilerConfig()
    cfg.debug.check_stream_order = True
    with pytest.raises(GraphValidationError, match="crosses streams"):
        hb.check_stream_order(gm, [], cfg)
    assert all(e > 0 for e in _replay_errors(gm, program)), "the CPU order did not catch it"


def _user_pair(x, w):
    with npu_stream_switch("side"):
        y = torch.relu(x @ w) * 2
        npu_tagged_event_record("needed_ev")
    npu_tagged_event_wait("needed_ev")
    return y + x


def test_removing_a_user_pairs_own_event_is_caught():
    with record_graphs() as graphs:
        fn = torch.compile(_user_pair, backend="npugraph_ex", fullgraph=True, dynamic=False)
        fn(*sp.square_inputs(8))
    gm = graphs[0].gm
    waits = [n for n in gm.graph.nodes if sp.stream_op_name(n) == "event_wait"]
    assert [n.args[0] for n in waits] == ["needed_ev"]   # no event of the stage's own
    assert hb.unordered_edges(gm.graph) == []
    gm.graph.erase_node(waits[0])
    (edge,) = hb.unordered_edges(gm.graph)
    assert "on stream 'side'" in edge and "on stream 'main'" in edge
