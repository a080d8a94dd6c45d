"""Issue 29: every cross-stream data dependency ordered, in every mode (passes/stream_ordering.py).

Each program of ``tests/stream_programs.py`` is compiled in npugraph_ex, reduce-overhead and
max-autotune, static and dynamic, and run at sizes 16 and 1024: call 0 and replays 1, 2 (new
inputs each call) equal the program-order result (the parts run uncompiled: TorchAir's eager
meaning). The graph the backend receives is checked structurally, independently of the
ordering code: every value read on a stream other than its producer's is ordered after its
producer by a path of the device's orderings (events, waits, fork/join, stream waits) spelt out
node by node (``stream_programs.device_orderings``).

On CPU every stream runs in program order, so the numeric half of these tests passes without
the events too; the structural half is what fails when a needed event is removed (and the CPU
stream-order model, ``TORCHAIR_DIST_CPU_STREAM_ORDER``, makes the numeric half fail too).
"""
import logging
import os
import sys

import pytest
import torch
import torch.fx

import torchair_dist
from torchair_dist.passes import stream_ordering as ordering
from torchair_dist.pipeline.route import record_graphs
from torchair_dist.streams import api as stream_api
from torchair_dist.streams import npu_stream_switch, npu_tagged_event_record, npu_wait_tensor
from torchair_dist.streams import runtime
from torchair_dist.streams.stream_ops import ops

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stream_programs as sp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]


@pytest.fixture(autouse=True)
def clean():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    stream_api._forget_tagged_events()


def _compile(fn, mode, dynamic):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True, dynamic=dynamic)


_name, _scan, cross_reads = sp.stream_op_name, sp.scan_streams, sp.cross_reads
assert_every_cross_read_is_ordered = sp.assert_every_cross_read_is_ordered


def _match_cross(expected, reads):
    """The (producer stream, reader stream) pairs ``reads`` has cover ``expected``
    ("*": any side stream)."""
    got = {(s, t) for _, _, s, t in reads}

    def fits(want, have):
        return want == have or (want == "*" and have != "")

    for es, et in expected:
        assert any(fits(es, s) and fits(et, t) for s, t in got), (es, et, got)


def _inputs(program, size, call):
    return program.inputs(size, "cpu", 100 * size + call)


def _check(got, want, mode):
    if mode == "max-autotune":  # the GE reference executor: its own kernels
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:  # the same aten ops in the same order on CPU: exact
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(sp.PROGRAMS))
def test_program_equals_program_order_and_every_cross_read_is_ordered(name, mode, dynamic,
                                                                       caplog):
    program = sp.PROGRAMS[name]
    caplog.set_level(logging.WARNING, logger="torchair_dist")
    with record_graphs() as graphs:
        parts = [_compile(f, mode, dynamic) for f in program.build("cpu")]
        for size in sp.SIZES:
            for call in range(3):  # call 0, replays 1 and 2, each with new inputs
                args = _inputs(program, size, call)
                _check(program.call(parts, *args), program.reference("cpu", *args), mode)
    assert graphs, "nothing was compiled"
    reads = []
    for ctx in graphs:
        reads += assert_every_cross_read_is_ordered(ctx.gm)
    _match_cross(program.cross, reads)
    races = [r.getMessage() for r in caplog.records if "stream race" in r.getMessage()]
    if program.races:
        assert races and len(races) == len(graphs), races  # one warning per compiled graph
        assert all("stream_programs.py" in m and "line" in m for m in races), races
    else:
        assert not races, races


# -- the stage itself on hand-made graphs -----------------------------------------------------------
def _graph_side_reads_main():
    """h = x*2 on main; side: y = h+1; main: h+y; side streams forked/joined."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4)
    g.call_function(ops.fork.default, (["s"],))
    h = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    g.call_function(ops.stream_enter.default, ("s", 0))
    y = g.call_function(torch.ops.aten.add.Tensor, (h, 1))
    g.call_function(ops.stream_exit.default, ("s",))
    z = g.call_function(torch.ops.aten.add.Tensor, (h, y))
    g.call_function(ops.join.default, (["s"],))
    g.output(z)
    for n in (h, y, z):
        n.meta["val"] = torch.empty(4)
    return torch.fx.GraphModule(torch.nn.Module(), g), (x, h, y, z)


def test_order_streams_events_both_directions_and_protects_memory():
    gm, (x, h, y, z) = _graph_side_reads_main()
    before = ordering.cross_stream_reads(gm.graph)
    assert [(p, r, s, t, o) for p, r, s, t, o in before] == [
        (h, y, "", "s", False), (y, z, "s", "", False)]
    ordering.order_streams(gm)
    assert_every_cross_read_is_ordered(gm)
    assert all(o for *_, o in ordering.cross_stream_reads(gm.graph))
    recorded = {(n.args[0], n.args[1]) for n in gm.graph.nodes
                if n.target is ops.record_stream.default}
    # h used on s; y (made on s) used on the main stream; input x is not read on a side stream
    assert recorded == {(h, "s"), (y, "")}
    assert gm(torch.ones(4)).tolist() == [5.0] * 4


def test_a_side_output_is_ordered_by_the_join_and_protected():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(ops.fork.default, (["s"],))
    g.call_function(ops.stream_enter.default, ("s", 0))
    y = g.call_function(torch.ops.aten.relu.default, (x,))
    g.call_function(ops.stream_exit.default, ("s",))
    g.call_function(ops.join.default, (["s"],))
    g.output(y)
    x.meta["val"] = y.meta["val"] = torch.empty(3)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    ordering.order_streams(gm)
    names = [_name(n) or n.op for n in gm.graph.nodes]
    # the join already orders the output after the side stream: no event, the memory kept
    assert names[-3:] == ["join", "record_stream", "output"], names
    assert "event_record" not in names and gm.meta[ordering.EVENTS_ADDED] == 0
    reads = assert_every_cross_read_is_ordered(gm)
    assert [(s, t) for *_, s, t in reads] == [("s", "")]
    # the input read on the side stream is protected on it
    assert any(n.target is ops.record_stream.default and n.args == (x, "s")
               for n in gm.graph.nodes)


def test_programs_own_ordering_is_kept_and_only_added_to():
    """The tagged-event program orders its reads itself: nothing is warned, every wait and
    record of the program is still there, in the same order."""
    with record_graphs(after="custom_post_pass") as before, record_graphs() as after:
        parts = [_compile(f, "npugraph_ex", False) for f in sp.PROGRAMS[
            "tagged_event_two_graphs"].build("cpu")]
        sp.PROGRAMS["tagged_event_two_graphs"].call(parts, *sp.square_inputs(8))
    for b, a in zip(before, after):
        mine = [(_name(n), n.args) for n in b.graph.nodes if _name(n)]
        kept = [(_name(n), n.args) for n in a.gm.graph.nodes
                if _name(n) and not (_name(n) in ("event_record", "event_wait")
                                     and n.args[0].startswith("x"))
                and _name(n) != "record_stream"]
        assert kept == [m for m in mine if m[0] != "record_stream"]


def test_every_node_in_a_scope_is_labelled_before_the_users_passes():
    seen = {}

    def pre_pass(gm, example_inputs, config):
        for n in gm.graph.nodes:
            seen[n.name] = n.meta.get("stream_label")

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.post_grad_custom_pre_pass = pre_pass
    fn = torch.compile(sp.nested_scopes, backend=torchair_dist.get_npu_backend(
        compiler_config=cfg), fullgraph=True)
    fn(*sp.square_inputs(8))
    assert seen["mm"] is None and seen["add_1"] is None           # h, c + h: main
    assert seen["mul"] == "outer" and seen["add"] == "outer"       # a, c
    assert seen["mm_1"] == "inner" and seen["relu"] == "inner"     # b
    assert seen["stream_enter"] is None and seen["arg0_1"] is None  # scope ops, inputs: none


def _pat_search(x):
    return torch.relu(x) * 2


def _pat_replace(x):
    return torch.clamp_min(x, 0.0) * 2


@pytest.fixture
def label_reading_pattern():
    from torchair_dist.passes import user_patterns as patterns

    labels = []

    def extra_check(match):  # vllm-ascend's idiom: refuse a match that spans streams
        found = {n.meta.get("stream_label") for n in match.nodes}
        labels.append(found)
        return len(found) == 1 and None in found

    assert torchair_dist.register_replacement(_pat_search, _pat_replace, [torch.empty(4, 4)],
                                              extra_check=extra_check)
    yield labels
    patterns.clear_replacements()


def test_a_user_patterns_extra_check_reads_the_stream_label(label_reading_pattern):
    def f(x, w):
        a = torch.relu(x) * 2                 # main: replaced
        with npu_stream_switch("side"):
            b = torch.relu(w) * 2             # side: refused by the extra_check
        return a + b

    with record_graphs() as graphs:
        fn = _compile(f, "npugraph_ex", False)
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        assert torch.equal(fn(x, w), f(x, w))
    assert {frozenset(s) for s in label_reading_pattern} == {frozenset({None}),
                                                           frozenset({"side"})}
    stream_of, _ = _scan(graphs[0].gm)
    targets = {(n.target, stream_of[n]) for n in graphs[0].gm.graph.nodes}
    assert (torch.ops.aten.clamp_min.default, "") in targets
    assert (torch.ops.aten.relu.default, "side") in targets


# -- eager calls: TorchAir's meaning, program order on the current stream ---------------------------
class _FakeStream:
    def __init__(self, priority=0):
        self.waited = []

    def wait_stream(self, other):
        self.waited.append(other)


class _FakeEvent:
    def __init__(self, external=False):
        self.records, self.waits = [], []

    def record(self, stream=None):
        self.records.append(stream)

    def wait(self, stream=None):
        self.waits.append(stream)


class _FakeDevice:
    def __init__(self):
        self.current = _FakeStream()
        self.switches = 0

    def current_stream(self):
        return self.current

    def set_stream(self, s):
        self.switches += 1
        self.current = s

    def is_current_stream_capturing(self):
        return False


@pytest.fixture
def fake_device(monkeypatch):
    from torchair_dist.platform import Platform

    dev = _FakeDevice()
    monkeypatch.setattr(torch, "fakedev", dev, raising=False)
    plat = Platform("fakedev", "fakedev", "fake", object, _FakeStream, _FakeEvent)
    monkeypatch.setattr(runtime, "_device_platform", lambda: plat)
    runtime.reset()
    yield dev
    runtime.reset()


def test_eager_stream_switch_and_wait_tensor_keep_program_order(fake_device):
    main = fake_device.current
    x = torch.ones(3)
    with npu_stream_switch("side"):
        assert fake_device.current is main, "eagerly no stream is switched"
        assert npu_wait_tensor(x, x) is x
    assert fake_device.switches == 0 and fake_device.current is main
    assert sp.side_reads_main(x.view(1, 3).expand(3, 3).contiguous(), torch.eye(3)).shape == (3, 3)


def test_eager_tagged_events_act_on_the_current_stream(fake_device):
    main = fake_device.current
    npu_tagged_event_record("eager_ev", "some_side_stream")
    stream_api.npu_tagged_event_wait("eager_ev", "some_side_stream")
    event = runtime.event_for("eager_ev")
    assert event.records == [main] and event.waits == [main]


def test_traced_apis_emit_their_ops():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        with npu_stream_switch("side"):
            y = x + 1
        npu_wait_tensor(x, y)
        return y

    gm = make_fx(f)(torch.ones(2))
    names = [_name(n) for n in gm.graph.nodes if _name(n)]
    assert names == ["stream_enter", "stream_exit", "wait_tensor"]


# -- the built-in passes never fuse or reinplace across a stream boundary ---------------------------
def test_pattern_fusion_never_fuses_across_streams(monkeypatch):
    pytest.importorskip("transformers")
    from test_pattern_fusion import STAND_IN, Block
    from torchair_dist.passes import pattern_fusion
    from torchair_dist.pipeline import stages

    monkeypatch.setattr(stages, "current_platform", lambda: "npu")  # the pass's platform
    monkeypatch.setattr(pattern_fusion, "fused_add_rms_norm", lambda: STAND_IN)

    class SplitBlock(Block):
        def forward(self, h, residual):
            residual = residual + self.fc1(h)       # the residual add on the main stream
            with npu_stream_switch("side"):
                h = self.norm1(residual)            # its RMSNorm on a side stream: not fused
            residual = residual + self.fc2(h)
            return self.norm2(residual), residual   # both on main: fused

    block = SplitBlock().eval()
    with torch.no_grad(), record_graphs() as graphs:
        fn = _compile(block, "npugraph_ex", False)
        h, r = torch.randn(2, 16), torch.randn(2, 16)
        for got, want in zip(fn(h, r), block(h, r)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    stream_of, _ = _scan(graphs[0].gm)
    fused = [stream_of[n] for n in graphs[0].gm.graph.nodes if n.target is STAND_IN]
    assert fused == [""], fused
    assert [stream_of[n] for n in graphs[0].gm.graph.nodes
            if n.target is torch.ops.aten.rsqrt.default] == ["side"]


def test_reinplace_never_writes_a_buffer_made_on_another_stream():
    def f(x, slot):
        buf = x.new_zeros(6, x.shape[1])            # made on main
        with npu_stream_switch("side"):
            out = buf.index_add(0, slot, x * 2)     # would write it in place on the side
        same = x.new_zeros(6, x.shape[1]).index_add(0, slot, x)  # one stream: in place
        return out.sum(0) + same.sum(0)

    with record_graphs() as graphs:
        fn = _compile(f, "npugraph_ex", False)
        x, slot = torch.randn(5, 4), torch.tensor([0, 2, 2, 5, 1])
        torch.testing.assert_close(fn(x, slot), f(x, slot), rtol=0, atol=0)
    stream_of, _ = _scan(graphs[0].gm)
    got = sorted((str(n.target), stream_of[n]) for n in graphs[0].gm.graph.nodes
                 if "index_add" in str(n.target))
    assert got == [("aten.index_add.default", "side"), ("aten.index_add_.default", "")], got


def test_reinplace_inputs_never_writes_an_input_from_a_side_stream():
    def f(cache, k, pos):
        with npu_stream_switch("side"):
            cache.index_copy_(0, pos, k)            # the update computed on a side stream
        return cache.sum()

    with record_graphs() as graphs:
        fn = _compile(f, "npugraph_ex", False)
        cache, k, pos = torch.zeros(6, 3), torch.randn(2, 3), torch.tensor([1, 4])
        ref = cache.clone()
        torch.testing.assert_close(fn(cache, k, pos), f(ref, k, pos))
        torch.testing.assert_close(cache, ref)
    ops = [str(n.target) for n in graphs[0].gm.graph.nodes]
    assert "aten.index_copy_.default" not in ops, ops


@pytest.mark.parametrize("strategy", ["BFS", "RDFS"])
def test_topology_sort_keeps_nodes_in_their_stream_and_events_after_producers(strategy):
    cfg = torchair_dist.CompilerConfig()
    cfg.experimental_config.topology_sorting_strategy = strategy
    fn = torch.compile(sp.two_side_streams, backend=torchair_dist.get_npu_backend(
        compiler_config=cfg), fullgraph=True, dynamic=False)
    with record_graphs(after="validate") as before_ge:  # max-autotune: after topology_sort
        x, w = sp.square_inputs(16)
        torch.testing.assert_close(fn(x, w), sp.two_side_streams(x, w), rtol=1e-5, atol=1e-5)
    gm = before_ge[0]
    stream_of, _ = _scan(gm)
    where_ = {str(n.target): stream_of[n] for n in gm.graph.nodes if n.op == "call_function"}
    assert where_["aten.relu.default"] == "side_a" and where_["aten.add.Tensor"] == ""
    assert_every_cross_read_is_ordered(gm)


@pytest.mark.parametrize("split", [False, True], ids=["one_stream", "across"])
def test_reinplace_collectives_never_reduces_a_buffer_from_another_stream_in_place(split):
    from torchair_dist import CompilerConfig
    from torchair_dist.passes.reinplace import reinplace_collectives

    aten, c10d = torch.ops.aten, torch.ops._c10d_functional
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    if split:
        buf = g.call_function(aten.mm.default, (x, w))          # made on main
        g.call_function(ops.stream_enter.default, ("comm", 0))
    else:
        g.call_function(ops.stream_enter.default, ("comm", 0))
        buf = g.call_function(aten.mm.default, (x, w))          # made on the side stream
    ar = g.call_function(c10d.all_reduce.default, (buf, "sum", "0"))
    wait = g.call_function(c10d.wait_tensor.default, (ar,))
    copy = g.call_function(aten.copy.default, (buf, wait))
    g.call_function(ops.stream_exit.default, ("comm",))
    g.output((g.call_function(aten.add.Tensor, (copy, x)),))
    gm = reinplace_collectives(torch.fx.GraphModule(torch.nn.Module(), g), [], CompilerConfig())
    targets = {n.target for n in gm.graph.nodes}
    assert (c10d.all_reduce_.default in targets) is (not split)
    assert (c10d.all_reduce.default in targets) is split
