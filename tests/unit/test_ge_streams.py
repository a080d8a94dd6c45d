"""User streams in max-autotune (GE): stream attributes, control edges, executor order.

Programs using ``npu_stream_switch`` / ``npu_wait_tensor`` / tagged events / ``torch.Stream``
compile through ``get_npu_backend`` in max-autotune and must equal the same program without
streams; the GE graph must carry ``_user_stream_label`` / ``_user_stream_priority`` on the ops
issued inside a stream scope (and on no other op), an ``Identity`` with a control edge from the
dependency for ``npu_wait_tensor``, and control edges for event waits. The reference executor
must run ops in an order honouring control edges.
"""
import pytest
import torch

from test_ge_common import ge_validate  # noqa: F401  (validate every GE graph)
from test_streams import (PROGRAMS, switch_and_wait, switch_and_wait_ref, tagged_events,
                          tagged_events_ref)

import torchair_dist
import torchair_dist.backends.ge as ge_backend
from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.errors import GeRuntimeError
from torchair_dist.cpu.ge_reference import ReferenceRuntime, schedule
from torchair_dist.streams import api as stream_api
from torchair_dist.streams import npu_stream_switch, npu_wait_tensor
from torchair_dist.passes.stream_rewrite import rewrite_streams

LABEL, PRIORITY = "_user_stream_label", "_user_stream_priority"
UNSCHEDULED = {"Data", "Const", "NetOutput"}


@pytest.fixture
def captured(monkeypatch):
    """Every (AOT graph, ConvertedGraph) max-autotune converts while the test runs."""
    seen = []
    convert = ge_backend.convert_graph

    def record(gm, *args, **kwargs):
        converted = convert(gm, *args, **kwargs)
        seen.append((gm, converted))
        return converted

    monkeypatch.setattr(ge_backend, "convert_graph", record)
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()
    stream_api._forget_tagged_events()


def _compile(fn, rewrite=False):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "max-autotune"
    backend = torchair_dist.get_npu_backend(compiler_config=cfg)
    if rewrite:  # what backend.py does in the ACL modes (streams.* ops, wait events, fork/join)
        def with_rewrite(gm, example_inputs, **kwargs):
            return backend(rewrite_streams(gm, cfg), example_inputs, **kwargs)
        return torch.compile(fn, backend=with_rewrite, fullgraph=True)
    return torch.compile(fn, backend=backend, fullgraph=True)


def _attr(op, key):
    return op.attr[key].s.decode() if key in op.attr else None


def _ops(converted):
    return list(converted.model.graph[0].op)


def _by_fx(converted, fx_name, op_type=None):
    return [op for op in _ops(converted) if _attr(op, "_fx_node") == fx_name
            and (op_type is None or op.type == op_type)]


def _controls(op):
    return [i[:-3] for i in op.input if i.endswith(":-1")]


def _scoped_fx_nodes(gm):
    """FX node name -> (stream tag, priority) for the nodes between stream_enter/exit."""
    stack, scoped = [], {}
    for node in gm.graph.nodes:
        name = str(node.target)
        if name.startswith("torchair_dist_streams.stream_enter"):
            stack.append((node.args[0], str(node.args[1])))
        elif name.startswith("torchair_dist_streams.stream_exit"):
            stack.pop()
        elif stack and node.op == "call_function":
            scoped[node.name] = stack[-1]
    return scoped


def _check_stream_attrs(gm, converted):
    """Ops of FX nodes inside a scope carry its label/priority; every other op carries none."""
    scoped = _scoped_fx_nodes(gm)
    labelled = 0
    for op in _ops(converted):
        want = scoped.get(_attr(op, "_fx_node")) if op.type not in UNSCHEDULED else None
        got = (_attr(op, LABEL), _attr(op, PRIORITY)) if LABEL in op.attr else None
        assert got == want, f"{op.type} {op.name}: stream attrs {got}, want {want}"
        labelled += got is not None
    assert labelled, "no GE op carries a user stream label"


def test_switch_and_wait_equals_program_without_streams(captured):
    def program(x, w):
        h = x @ w
        with npu_stream_switch("side", priority=3):
            npu_wait_tensor(x, h)
            y = torch.relu(x) * 2
            z = y + 1
        return h + z, h.sum()

    def reference(x, w):
        h = x @ w
        return h + (torch.relu(x) * 2 + 1), h.sum()

    fn = _compile(program)
    for n in (4, 4):
        x, w = torch.randn(n, n), torch.randn(n, n)
        torch.testing.assert_close(fn(x, w), reference(x, w))
    (gm, converted), = captured
    _check_stream_attrs(gm, converted)
    relu = next(n.name for n in gm.graph.nodes if "relu" in str(n.target))
    (relu_op,) = _by_fx(converted, relu, "Relu")
    assert (_attr(relu_op, LABEL), _attr(relu_op, PRIORITY)) == ("side", "3")
    # npu_wait_tensor: an Identity on the side stream after the matmul; relu follows it
    wait = next(n.name for n in gm.graph.nodes if "wait_tensor" in str(n.target))
    (ident,) = _by_fx(converted, wait, "Identity")
    (mm_op,) = [op for op in _ops(converted) if op.type in ("MatMulV2", "MatMul", "BatchMatMulV2")]
    assert _controls(ident) == [mm_op.name]
    assert _attr(ident, LABEL) == "side"
    assert _controls(relu_op) == [ident.name]


def test_tagged_events_become_control_edges(captured):
    fn = _compile(tagged_events)
    x, w = torch.randn(5, 5), torch.randn(5, 5)
    torch.testing.assert_close(fn(x, w), tagged_events_ref(x, w))
    (gm, converted), = captured
    _check_stream_attrs(gm, converted)
    ops = {op.name: op for op in _ops(converted)}
    (mm_op,) = [op for op in ops.values() if op.type.startswith(("MatMul", "BatchMatMul"))]
    (tanh_op,) = [op for op in ops.values() if op.type == "Tanh"]
    # ev_h recorded on the main stream after the matmul, waited by the side stream: the first
    # side op (tanh) follows the matmul by a control edge
    assert mm_op.name in _controls(tanh_op)
    # ev_y recorded on "side" after tanh(h) + 1, waited on the main stream: the next main op
    # (the multiply) follows the add by a control edge
    (add_op,) = [op for op in ops.values() if op.type == "Add" and _attr(op, LABEL) == "side"]
    (mul_op,) = [op for op in ops.values() if op.type == "Mul" and LABEL not in op.attr]
    assert _controls(mul_op) == [add_op.name]


@pytest.mark.parametrize("program,reference", PROGRAMS, ids=lambda f: getattr(f, "__name__", ""))
def test_rewritten_programs_equal_programs_without_streams(captured, program, reference):
    """With rewrite_streams in front (fork/join, torch.Stream scopes, wait events) as
    backend.py does in the ACL modes: max-autotune converts every stream op."""
    fn = _compile(program, rewrite=True)
    x, w = torch.randn(6, 6), torch.randn(6, 6)
    for _ in range(2):
        torch.testing.assert_close(fn(x, w), reference(x, w))
    (gm, converted), = captured
    _check_stream_attrs(gm, converted)
    assert any(str(n.target).startswith("torchair_dist_streams.fork") for n in gm.graph.nodes)


def test_switch_and_wait_with_record_stream_and_wait_stream(captured):
    fn = _compile(switch_and_wait)
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(fn(x, w), switch_and_wait_ref(x, w))
    (gm, converted), = captured
    ops = _ops(converted)
    # stream_wait_stream(main, "side") after the scope: the final add follows the side's last op
    (mul_op,) = [op for op in ops if op.type == "Mul" and _attr(op, LABEL) == "side"]
    (add_op,) = [op for op in ops if op.type == "Add"]
    assert mul_op.name in _controls(add_op)


# -- the reference executor's order ---------------------------------------------------------
def _out_of_order_graph():
    """Data x; B = Identity(x) listed first but with a control edge from A = Identity(x)."""
    b = GraphBuilder("order")
    x = b.data(torch.float32, (2,), name="x")
    desc = [("y", (torch.float32, (2,)))]
    (yb,) = b.op("Identity", [("x", x)], None, desc, name="B", control=["A"])
    (ya,) = b.op("Identity", [("x", x)], None, desc, name="A")
    b.net_output([yb, ya])
    return b


def test_reference_executor_honours_control_edges():
    b = _out_of_order_graph()
    assert [op.name for op in schedule(b.graph)] == ["x", "A", "B", "NetOutput"]
    runtime = ReferenceRuntime()
    runtime.load(b.model().SerializeToString())
    assert runtime.code.index("k_A(") < runtime.code.index("k_B(")
    x = torch.randn(2)
    out = runtime.run([x])
    torch.testing.assert_close(out, [x, x])


def test_reference_executor_keeps_graph_order_and_rejects_cycles():
    b = GraphBuilder("plain")
    x = b.data(torch.float32, (2,), name="x")
    y = b.op("Neg", [("x", x)], None, [("y", (torch.float32, (2,)))], name="n1")[0]
    z = b.op("Abs", [("x", x)], None, [("y", (torch.float32, (2,)))], name="n2")[0]
    b.net_output([y, z])
    assert [op.name for op in schedule(b.graph)] == ["x", "n1", "n2", "NetOutput"]
    b.graph.op[1].input.append("n2:-1")
    b.graph.op[2].input.append("n1:-1")
    with pytest.raises(GeRuntimeError, match="cycle"):
        schedule(b.graph)
