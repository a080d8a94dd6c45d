"""The CPU model of device concurrency (torchair_dist/cpu/concurrency.py) and the
happens-before check (torchair_dist/passes/happens_before.py, over the one order model of
streams/order_model.py).

Hand-built graphs of the ``torchair_dist_streams`` ops run on the record stand-in under every
``TORCHAIR_DIST_CPU_STREAM_ORDER``: a side producer read on the main stream without an event is
wrong under some orders and named by the check; with the event it is right under every order.
A freed block reused while another stream still reads it, and a collective's output read before
its wait, read poison. Then the issue's programs, compiled: right under every order (on a
rewrite that left a side -> main data edge without an event, replays were wrong under late and
random orders: side_reads_main, side_matmul, two_side_streams; side_reads_main_unwaited always).
"""
import os
import sys

import pytest
import torch
import torch.fx

import torchair_dist
from torchair_dist.base.envvars import env_stream_order
from torchair_dist.cpu import concurrency
from torchair_dist.cpu.record import RecordGraph
from torchair_dist.platform.interfaces import InputFeed
from torchair_dist.errors import ConfigError, GraphValidationError
from torchair_dist.passes import happens_before as hb
from torchair_dist.streams import npu_stream_switch
from torchair_dist.streams import order_model as om
from torchair_dist.streams.stream_ops import ops as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stream_programs import side_matmul, side_output, side_reads_main, two_side_streams  # noqa: E402,E501

ENV = "TORCHAIR_DIST_CPU_STREAM_ORDER"
ORDERS = ("early", "late", "random:1", "random:2", "random:3")
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _no_check(monkeypatch):
    """The model itself is under test here, not the compile-time check."""
    monkeypatch.setenv(hb.CHECK_ENV, "0")


# -- the variable ----------------------------------------------------------------------------
@pytest.mark.parametrize("value, parsed", [(None, ("program", None)), ("program", ("program", None)),
                                           ("early", ("early", None)), ("late", ("late", None)),
                                           ("random:7", ("random", 7)), ("random:0x10", ("random", 16))])
def test_order_values(monkeypatch, value, parsed):
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    assert env_stream_order(ENV) == parsed
    assert concurrency.stream_order().reorders == (parsed[0] != "program")


@pytest.mark.parametrize("bad", ["sideways", "random", "random:", "random:x", "early:1", "LATE"])
def test_a_bad_order_is_a_config_error_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(ENV, bad)
    with pytest.raises(ConfigError, match=f"{ENV}={bad!r}.*program \\| early \\| late"):
        concurrency.stream_order()


def test_the_variable_is_declared():
    from torchair_dist.base.envvars import VARIABLES

    assert ENV in VARIABLES and hb.CHECK_ENV in VARIABLES


# -- the scheduler honours only the graph's orderings --------------------------------------------
def _timeline(event: bool) -> om.Timeline:
    tl = om.Timeline()
    tl.add(st.fork.default, (["s"],))                  # 0 main
    tl.add(aten.mm.default)                            # 1 main: h
    tl.add(st.event_record.default, ("eh", ""))        # 2 main
    tl.add(st.stream_enter.default, ("s", 0))          # 3 s
    tl.add(st.event_wait.default, ("eh", ""))          # 4 s
    tl.add(aten.relu.default)                          # 5 s: y
    if event:
        tl.add(st.event_record.default, ("ey", ""))
    tl.add(st.stream_exit.default, ("s",))
    if event:
        tl.add(st.event_wait.default, ("ey", ""))
    tl.add(aten.add.Tensor)                            # main: h + y
    tl.add(st.join.default, (["s"],))
    return tl


@pytest.mark.parametrize("order", ("program",) + ORDERS)
def test_schedules_respect_every_ordering(order):
    kind, _, seed = order.partition(":")
    for event in (False, True):
        tl = _timeline(event)
        got = concurrency.schedule(tl.streams, tl.preds,
                                   concurrency.StreamOrder(kind, int(seed) if seed else None))
        assert sorted(got) == list(range(len(tl.streams)))
        at = {i: n for n, i in enumerate(got)}
        for i, preds in enumerate(tl.preds):
            assert all(at[p] < at[i] for p in preds)
        for a in range(len(tl.streams)):   # program order within each stream
            for b in range(a + 1, len(tl.streams)):
                if tl.streams[a] == tl.streams[b]:
                    assert at[a] < at[b]


def test_early_and_late_place_the_side_stream_at_its_extremes():
    tl = _timeline(event=False)
    add = len(tl.streams) - 2
    early = concurrency.schedule(tl.streams, tl.preds, concurrency.StreamOrder("early"))
    late = concurrency.schedule(tl.streams, tl.preds, concurrency.StreamOrder("late"))
    assert early.index(5) < early.index(add)  # relu runs before the unordered add ...
    assert late.index(5) > late.index(add)    # ... or after it: the data edge does not order
    assert tl.ordered(1, 5) and not tl.ordered(5, add)
    assert _timeline(event=True).ordered(5, add + 2)


# -- hand-built graphs on the record stand-in --------------------------------------------------
def _side_graph(event: bool) -> torch.fx.GraphModule:
    """h = x @ w (main); on s after an event: y = relu(h) * 2; main: h + y (event or not)."""
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    g.call_function(st.fork.default, (["s"],))
    h = g.call_function(aten.mm.default, (x, w))
    g.call_function(st.event_record.default, ("e_h", ""))
    g.call_function(st.stream_enter.default, ("s", 0))
    g.call_function(st.event_wait.default, ("e_h", ""))
    y = g.call_function(aten.mul.Tensor, (g.call_function(aten.relu.default, (h,)), 2))
    if event:
        g.call_function(st.event_record.default, ("e_y", ""))
    g.call_function(st.stream_exit.default, ("s",))
    if event:
        g.call_function(st.event_wait.default, ("e_y", ""))
    out = g.call_function(aten.add.Tensor, (h, y))
    g.call_function(st.join.default, (["s"],))
    g.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _replays(gm, make_inputs, reference, n=3):
    """Capture once, then the max abs error of each replay on fresh inputs (NaN counts as inf)."""
    graph = RecordGraph(gm)
    first = make_inputs(0)
    graph.capture(None, first, InputFeed.of_all(first))
    errors = []
    for i in range(1, n + 1):
        inputs = make_inputs(i)
        graph.replay(inputs)
        got = graph.outputs
        want = reference(*inputs)
        errors.append(max(float(torch.nan_to_num((a - b).abs(), nan=float("inf")).max())
                          for a, b in zip(got, want)))
    return graph, errors


def _xw(i):
    gen = torch.Generator().manual_seed(i)
    return [torch.randn(8, 8, generator=gen), torch.randn(8, 8, generator=gen)]


def _ref(x, w):
    h = x @ w
    return (h + torch.relu(h) * 2,)


@pytest.mark.parametrize("order", ("program",) + ORDERS)
def test_with_the_event_every_order_is_right(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    graph, errors = _replays(_side_graph(event=True), _xw, _ref)
    assert errors == [0.0, 0.0, 0.0]
    assert graph.stream_order == order


@pytest.mark.parametrize("order", ["late", "random:1", "random:2", "random:3"])
def test_without_the_event_the_main_reader_runs_first_and_is_wrong(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    graph, errors = _replays(_side_graph(event=False), _xw, _ref)
    assert all(e > 0 for e in errors), errors  # stale: poison first, last replay's y after


@pytest.mark.parametrize("order", ["program", "early"])
def test_without_the_event_some_orders_happen_to_be_right(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    assert _replays(_side_graph(event=False), _xw, _ref)[1] == [0.0, 0.0, 0.0]


def test_the_check_names_the_unordered_edge_and_passes_the_ordered_graph():
    (edge,) = hb.unordered_edges(_side_graph(event=False).graph)
    assert edge.startswith("mul_tensor on stream 's'") and "-> add_tensor on stream 'main'" in edge
    assert hb.unordered_edges(_side_graph(event=True).graph) == []


def test_the_debug_option_and_the_variable_refuse_the_graph(monkeypatch):
    cfg = torchair_dist.CompilerConfig()
    gm = _side_graph(event=False)
    assert hb.check_stream_order(gm, [], cfg) is gm          # off: unchanged
    cfg.debug.check_stream_order = True
    with pytest.raises(GraphValidationError, match="mul_tensor on stream 's'.*-> add_tensor on stream 'main'"):
        hb.check_stream_order(gm, [], cfg)
    assert hb.check_stream_order(_side_graph(event=True), [], cfg) is not None
    monkeypatch.setenv(hb.CHECK_ENV, "1")
    with pytest.raises(GraphValidationError, match="crosses streams"):
        hb.check_stream_order(gm, [], torchair_dist.CompilerConfig())


# -- a freed block reused while another stream reads it --------------------------------------
def _free_graph(record_stream: bool) -> torch.fx.GraphModule:
    """t = x * 2 (main); on s after an event: u = t + 1 (t's last use); main then allocates
    v = x * 3, which may get t's block; join; return (u, v)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(st.fork.default, (["s"],))
    t = g.call_function(aten.mul.Tensor, (x, 2))
    g.call_function(st.event_record.default, ("e_t", ""))
    g.call_function(st.stream_enter.default, ("s", 0))
    g.call_function(st.event_wait.default, ("e_t", ""))
    u = g.call_function(aten.add.Tensor, (t, 1))
    if record_stream:
        g.call_function(st.record_stream.default, (t, "s"))
    g.call_function(st.stream_exit.default, ("s",))
    v = g.call_function(aten.mul.Tensor, (x, 3))
    g.call_function(st.join.default, (["s"],))
    g.output((u, v))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _x(i):
    return [torch.randn(8, generator=torch.Generator().manual_seed(i))]


def _free_ref(x):
    return (x * 2 + 1, x * 3)


def test_a_use_after_free_reads_poison(monkeypatch):
    monkeypatch.setenv(ENV, "late")
    graph, errors = _replays(_free_graph(record_stream=False), _x, _free_ref)
    assert errors == [float("inf")] * 3
    assert "poison" in graph.source or any(c is concurrency.poison for c in graph._consts)
    for order in ("program", "early"):  # the side stream reads before the main stream reuses
        monkeypatch.setenv(ENV, order)
        assert _replays(_free_graph(record_stream=False), _x, _free_ref)[1] == [0.0] * 3


@pytest.mark.parametrize("order", ORDERS)
def test_record_stream_keeps_the_block_until_the_reader_is_done(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    assert _replays(_free_graph(record_stream=True), _x, _free_ref)[1] == [0.0] * 3


# -- an asynchronous collective read before its wait -------------------------------------------
def _collective_graph(read_early: bool) -> torch.fx.GraphModule:
    import torch.distributed as dist

    c10d = torch.ops._c10d_functional
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(c10d.all_reduce.default, (x, "sum", dist.group.WORLD.group_name))
    early = g.call_function(aten.add.Tensor, (a, 1)) if read_early else None
    done = g.call_function(c10d.wait_tensor.default, (a,))
    late = g.call_function(aten.add.Tensor, (done, 1))
    g.output((early if read_early else late, ))
    return torch.fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize("order", ("program",) + ORDERS)
def test_a_collective_output_read_before_its_wait_reads_poison(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    def ref(x):
        return (x + 1,)

    assert _replays(_collective_graph(read_early=False), _x, ref)[1] == [0.0] * 3
    errors = _replays(_collective_graph(read_early=True), _x, ref)[1]
    if order == "program":  # program order completes it at once (today's stand-in)
        assert errors == [0.0] * 3
    else:
        assert errors == [float("inf")] * 3


def _inplace_collective_graph() -> torch.fx.GraphModule:
    """t = x * 2; all_reduce_(t) in place; wait; t + 1 (the reinplaced form)."""
    import torch.distributed as dist

    c10d = torch.ops._c10d_functional
    g = torch.fx.Graph()
    x = g.placeholder("x")
    t = g.call_function(aten.mul.Tensor, (x, 2))
    a = g.call_function(c10d.all_reduce_.default, (t, "sum", dist.group.WORLD.group_name))
    done = g.call_function(c10d.wait_tensor.default, (a,))
    g.output((g.call_function(aten.add.Tensor, (done, 1)),))
    return torch.fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize("order", ("program",) + ORDERS)
def test_an_in_place_collective_read_after_its_wait_is_right(monkeypatch, order):
    monkeypatch.setenv(ENV, order)
    errors = _replays(_inplace_collective_graph(), _x, lambda x: (x * 2 + 1,))[1]
    assert errors == [0.0] * 3


# -- the programs, compiled (tests/stream_programs.py's, and one with no wait) ----------
def side_reads_main_unwaited(x, w):
    h = x @ w
    with npu_stream_switch("side"):  # no npu_wait_tensor: the data edge alone must order it
        y = torch.relu(h) * 2
    return h + y


PROGRAMS = {f.__name__: f for f in (side_reads_main, side_matmul, side_output,
                                    side_reads_main_unwaited, two_side_streams)}


def _cases():
    for mode in ("npugraph_ex", "max-autotune"):
        for name in PROGRAMS:
            for order in ("program",) + ORDERS:
                yield pytest.param(mode, name, order, id=f"{mode}-{name}-{order}")


@pytest.mark.parametrize("mode, name, order", list(_cases()))
def test_programs_equal_program_order_under_every_stream_order(monkeypatch, mode, name, order):
    """Call 0 (the capture) and replays 1, 2 on fresh inputs equal the program-order result.
    max-autotune: GE orders every data edge, so the reference executor is right in any order."""
    monkeypatch.setenv(ENV, order)
    fn = PROGRAMS[name]
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    opt = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                        fullgraph=True, dynamic=False)
    for i in range(3):
        x, w = _xw(i)
        w = w * 8 ** -0.5
        got, want = opt(x, w), fn(x, w)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g_, r in zip(got, want):
            torch.testing.assert_close(g_, r, rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"call {i} under {order}: {m}")


# -- the GE reference executor interleaves streams by the graph's edges only -------------------
def _ge_lanes():
    """Main: m1 -> m2 (data); side lane s: s1 -> s2 (data); m2 has a control edge from s1."""
    from torchair_dist.backends.ge.builder import GraphBuilder, Lane

    b = GraphBuilder("lanes")
    x = b.data(torch.float32, (2,), name="x")
    desc = [("y", (torch.float32, (2,)))]
    (m1,) = b.op("Neg", [("x", x)], None, desc, name="m1")
    b.lane = Lane({"_user_stream_label": "s", "_user_stream_priority": "0"})
    (s1,) = b.op("Abs", [("x", x)], None, desc, name="s1")
    (s2,) = b.op("Neg", [("x", s1)], None, desc, name="s2")
    b.lane = b.lanes[""]
    (m2,) = b.op("Abs", [("x", m1)], None, desc, name="m2", control=["s1"])
    b.net_output([m2, s2])
    return b


@pytest.mark.parametrize("order, want", [
    ("program", ["x", "m1", "s1", "s2", "m2", "NetOutput"]),
    ("early", ["x", "s1", "s2", "m1", "m2", "NetOutput"]),
    ("late", ["x", "m1", "s1", "m2", "s2", "NetOutput"])])
def test_ge_executor_interleaves_streams_where_edges_allow(order, want):
    from torchair_dist.cpu.ge_reference import ReferenceRuntime, schedule

    kind, _, seed = order.partition(":")
    b = _ge_lanes()
    assert [op.name for op in schedule(b.graph, concurrency.StreamOrder(kind))] == want
    for seed in (1, 2, 3):  # every random order keeps the edges and each stream's order
        got = [op.name for op in schedule(b.graph, concurrency.StreamOrder("random", seed))]
        assert got.index("m1") < got.index("m2") and got.index("s1") < got.index("s2")
        assert got.index("s1") < got.index("m2") and got[-1] == "NetOutput"
    runtime = ReferenceRuntime()
    runtime.load(b.model().SerializeToString())
    x = torch.randn(2)
    torch.testing.assert_close(runtime.run([x]), [(-x).abs(), -(x.abs())])
