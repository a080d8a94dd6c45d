"""Streams and events in graph mode (torchair_dist/streams): APIs, rewrite pass, CPU replay.

On CPU eager events cannot record, so the reference of every end-to-end program is the same
program without streams. The graphs are recorded with the vLLM idiom: the real pipeline runs and
``compiler.record_graphs(after=...)`` keeps the AOT graph as a stage left it.
"""
import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import pytest
import torch
import torch.fx

import torchair_dist
import torchair_dist.pipeline.route as compiler
from torchair_dist.errors import GraphValidationError
from torchair_dist.passes import overlap
from torchair_dist.streams import (StreamApiError, npu_create_tagged_event,
                                   npu_record_tagged_stream, npu_stream_switch,
                                   npu_stream_wait_stream, npu_tagged_event_record,
                                   npu_tagged_event_wait, npu_wait_tensor)
from torchair_dist.streams import ops
from torchair_dist.streams import api as stream_api
from torchair_dist.passes.stream_rewrite import rewrite_streams

ACL_MODES = ["npugraph_ex", "reduce-overhead"]
NS = "torchair_dist_streams"


@pytest.fixture
def recorded():
    torch._dynamo.reset()
    with compiler.record_graphs(after="view_to_reshape") as graphs:  # custom_post_pass: unset
        yield graphs
    torch._dynamo.reset()
    stream_api._forget_tagged_events()


def _compile(fn, mode):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _stream_ops(gm):
    return [(str(n.target).split(".")[1], n.args) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith(NS)]


def _check_clean(gm):
    targets = _targets(gm)
    assert not any(t.startswith("streams.") for t in targets), targets
    assert not any("get_external_object" in t for t in targets), targets
    assert not any("control_deps" in t for t in targets), targets


# -- programs: with streams, and the same program without them (the reference) -----------------
def switch_and_wait(x, w):
    h = x @ w
    with npu_stream_switch("side", priority=1):
        npu_wait_tensor(x, h)
        y = torch.relu(x) * 2
        npu_record_tagged_stream(y, "side")
    npu_stream_wait_stream(None, "side")
    return h + y


def switch_and_wait_ref(x, w):
    return x @ w + torch.relu(x) * 2


def tagged_events(x, w):
    h = x @ w
    npu_tagged_event_record("ev_h")                 # on the current stream
    with npu_stream_switch("side"):
        npu_tagged_event_wait("ev_h")
        y = torch.tanh(h) + 1
        npu_tagged_event_record("ev_y", "side")     # on a given stream
    npu_tagged_event_wait("ev_y")
    return y * x


def tagged_events_ref(x, w):
    return (torch.tanh(x @ w) + 1) * x


S1 = torch.Stream(device="cpu")
S2 = torch.Stream(device="cpu")
E1 = torch.Event("cpu")
E2 = torch.Event("cpu")


def torch_streams(x, w):
    with S1:
        h = x @ w
        E1.record(S1)
    S2.wait_event(E1)
    with S2:
        y = torch.relu(h) - x
    E2.record(S2)
    E2.wait(S1)
    S1.wait_stream(S2)
    with S1:
        z = y * 3
    return z


def torch_streams_ref(x, w):
    return (torch.relu(x @ w) - x) * 3


def torch_stream_created_inside(x, w):
    s = torch.Stream(device="cpu")
    with s:
        h = x @ w
    s.synchronize()
    return h + 1


def torch_stream_created_inside_ref(x, w):
    return x @ w + 1


PROGRAMS = [(torch_stream_created_inside, torch_stream_created_inside_ref),
            (switch_and_wait, switch_and_wait_ref), (tagged_events, tagged_events_ref),
            (torch_streams, torch_streams_ref)]


@pytest.mark.parametrize("mode", ACL_MODES)
@pytest.mark.parametrize("program,reference", PROGRAMS, ids=lambda f: getattr(f, "__name__", ""))
def test_compiled_equals_program_without_streams(recorded, mode, program, reference):
    x, w = torch.randn(6, 6), torch.randn(6, 6)
    fn = _compile(program, mode)
    for _ in range(2):
        torch.testing.assert_close(fn(x, w), reference(x, w))
    assert len(recorded) == 1
    _check_clean(recorded[0])
    names = [name for name, _ in _stream_ops(recorded[0])]
    assert names[0] == "fork" and names[-1] == "join"
    assert names.count("stream_enter") == names.count("stream_exit") >= 1


def test_eager_apis_are_ordering_only_on_cpu():
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(switch_and_wait(x, w), switch_and_wait_ref(x, w))
    torch.testing.assert_close(tagged_events(x, w), tagged_events_ref(x, w))


def test_ops_survive_aot_in_program_order(recorded):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    _compile(switch_and_wait, "npugraph_ex")(x, w)
    got = _stream_ops(recorded[0])
    assert [n for n, _ in got] == ["fork", "event_record", "stream_enter", "wait_tensor",
                                   "record_stream", "stream_exit", "stream_wait_stream", "join"]
    enter = dict(got)["stream_enter"]
    assert enter == ("side", 1)
    # wait_tensor got the event recorded right after its dependency's producer (the mm)
    order = _targets(recorded[0])
    rec = order.index(f"{NS}.event_record.default")
    assert order[rec - 1] == "aten.mm.default"
    wait_args = dict(got)["wait_tensor"]
    assert wait_args[2] == dict(got)["event_record"][0]


def test_torch_stream_names_are_stable_and_ordered(recorded):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    _compile(torch_streams, "npugraph_ex")(x, w)
    got = _stream_ops(recorded[0])
    enters = [a[0] for n, a in got if n == "stream_enter"]
    prefix = enters[0].split("_")[0]
    s1, s2 = f"{prefix}_stream0", f"{prefix}_stream1"
    assert enters == [s1, s2, s1]
    assert (f"{prefix}_event0", s1) in [a for n, a in got if n == "event_record"]
    assert ("event_wait", (f"{prefix}_event0", s2)) in got
    assert ("event_wait", (f"{prefix}_event1", s1)) in got
    assert ("stream_wait_stream", (s1, s2)) in got
    assert dict(got)["fork"] == ([s1, s2],)


def test_emulated_capture_replays_with_streams(recorded, monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "emulate")
    fn = _compile(tagged_events, "npugraph_ex")
    for _ in range(3):
        x, w = torch.randn(5, 5), torch.randn(5, 5)
        torch.testing.assert_close(fn(x, w), tagged_events_ref(x, w))


def test_stream_ops_are_side_effect_barriers_for_overlap():
    g = torch.fx.Graph()
    g.call_function(ops.stream_enter.default, ("s", 0))
    for node in g.nodes:
        assert node.is_impure()
        assert overlap.node_kind(node) == overlap.BARRIER


def test_graph_without_streams_untouched():
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    code = gm.code
    assert rewrite_streams(gm, None).code == code


# -- errors ------------------------------------------------------------------------------------
def _graph(*calls):
    """A Dynamo-like graph: placeholder x, then (target, args) calls, output x."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    nodes = []
    for i, (target, args) in enumerate(calls):
        n = g.call_function(target, args)
        n.meta["stack_trace"] = (f'  File "/user/model.py", line {10 + i}, in forward\n'
                                 f"    call_{i}()\n")
        nodes.append(n)
    g.output(x)
    return torch.fx.GraphModule(torch.nn.Module(), g), nodes


def test_unbalanced_switch_names_the_line():
    gm, _ = _graph((ops.stream_enter.default, ("a", 0)), (torch.ops.aten.relu.default, ()))
    with pytest.raises(GraphValidationError, match=r"'a'.*line 10.*end of the graph"):
        rewrite_streams(gm, None)


def test_mismatched_exit_names_the_line():
    gm, _ = _graph((ops.stream_enter.default, ("a", 0)), (ops.stream_enter.default, ("b", 0)),
                   (ops.stream_exit.default, ("a",)), (ops.stream_exit.default, ("b",)))
    with pytest.raises(GraphValidationError, match=r"leaving stream 'a'.*line 12.*'b'"):
        rewrite_streams(gm, None)


def _lookup_graph(objs, *calls):
    from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index

    g = torch.fx.Graph()
    x = g.placeholder("x")
    for i, obj in enumerate(objs):
        n = g.call_function(get_external_object_by_index, (i,))
        n.meta["example_value"] = obj
    for i, (target, args) in enumerate(calls):
        n = g.call_function(target, args)
        n.meta["stack_trace"] = f'  File "/user/model.py", line {20 + i}, in forward\n    s()\n'
    g.output(x)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_unknown_stream_is_an_error():
    gm = _lookup_graph([torch.Event("cpu")], (torch.ops.streams.record_event.default, (0, 7)))
    with pytest.raises(GraphValidationError, match=r"unknown stream.*index 7.*line 20"):
        rewrite_streams(gm, None)


def test_set_stream_left_on_side_stream_is_an_error():
    s = torch.Stream(device="cpu")
    gm = _lookup_graph([s, torch.Stream(device="cpu")], (torch.ops.streams.fork.default, (1, 0)))
    with pytest.raises(GraphValidationError, match=r"leaves stream 'g\d+_stream0' current"):
        rewrite_streams(gm, None)


def test_set_stream_stack_is_replayed(monkeypatch):
    from torchair_dist.passes import stream_rewrite as rw

    class _Stream(torch.Stream):  # CPU streams all compare equal; compare by identity
        __eq__ = object.__eq__
        __hash__ = object.__hash__

    default, a, b = (_Stream(device="cpu") for _ in range(3))
    monkeypatch.setattr(rw, "_default_stream", lambda: default)
    fork, join = torch.ops.streams.fork.default, torch.ops.streams.join.default
    # default -> a -> b -> back to a -> back to default; then a -> b -> straight to default
    gm = _lookup_graph([default, a, b], (fork, (0, 1)), (fork, (1, 2)), (join, (2, 1)),
                       (join, (1, 0)), (fork, (0, 1)), (fork, (1, 2)), (join, (2, 0)))
    rewrite_streams(gm, None)
    got = _stream_ops(gm)
    sa, sb = got[1][1][0], got[2][1][0]
    assert got == [("fork", ([sa, sb],)),
                   ("stream_enter", (sa, 0)), ("stream_enter", (sb, 0)), ("stream_exit", (sb,)),
                   ("stream_exit", (sa,)),
                   ("stream_enter", (sa, 0)), ("stream_enter", (sb, 0)), ("stream_exit", (sb,)),
                   ("stream_exit", (sa,)), ("join", ([sa, sb],))]
    _check_clean(gm)


def test_duplicate_tagged_event_and_bad_tags():
    try:
        npu_create_tagged_event("dup_tag")
        with pytest.raises(StreamApiError, match="already exists"):
            npu_create_tagged_event("dup_tag")
    finally:
        stream_api._forget_tagged_events()
    with pytest.raises(StreamApiError):
        npu_stream_switch("")
    with pytest.raises(StreamApiError):
        npu_stream_switch("s", priority="high")


def test_graph_break_inside_switch_is_an_error(recorded):
    def f(x):
        with npu_stream_switch("a"):
            y = x + 1
            torch._dynamo.graph_break()
            z = y * 2
        return z

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    fn = torch.compile(f, backend=torchair_dist.get_npu_backend(compiler_config=cfg))
    with pytest.raises(Exception, match="unbalanced stream switch.*'a'.*end of the graph"):
        fn(torch.ones(2))
