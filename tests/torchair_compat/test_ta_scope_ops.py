"""``torchair.scope`` and ``torchair.ops`` under TorchAir's names: multi-stream results equal
eager, Ascend-only scopes are recorded on the graph's ops and named by a warning, wait/record,
npu_print on every replay, register_replacement (on, and off with pattern_fusion_pass=False)."""
import logging

import pytest
import torch

import torchair_dist as torchair
from torchair_dist.pipeline import route as compiler
from torchair_dist.errors import StreamApiError, UnsupportedOpError


def _compile(fn, **options):
    return torch.compile(fn, backend="npugraph_ex", fullgraph=True, dynamic=False,
                         options=options or None)


def test_stream_switch_and_wait_tensor_equal_eager():
    def f(x, w):
        h = x @ w
        with torchair.scope.npu_stream_switch("side", 1):
            torchair.scope.npu_wait_tensor(x, h)
            y = torch.relu(x) * 2
        return h + y

    opt = _compile(f)
    for _ in range(3):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        assert torch.equal(opt(x, w), f(x, w))


def test_tagged_events_across_streams_equal_eager():
    ev = torchair.ops.npu_create_tagged_event("ta_compat_ev")

    def f(x):
        a = x + 1
        torchair.ops.npu_tagged_event_record(ev)
        with torchair.scope.npu_stream_switch("s2"):
            torchair.ops.npu_tagged_event_wait(ev)
            b = a * 3
            torchair.ops.npu_record_tagged_stream(a, "s2")
        return b - a

    with compiler.record_graphs() as graphs:
        opt = _compile(f)
        x = torch.randn(5)
        assert torch.equal(opt(x), f(x))
        assert torch.equal(opt(x + 1), f(x + 1))
    # the user's pair orders a's read on s2 (no event added for it); b's read back on the main
    # stream is ordered by nothing in the program: the stage adds exactly one event for it
    events = [(str(n.target).split(".")[1], n.args[0]) for n in graphs[0].gm.graph.nodes
              if str(n.target).startswith("torchair_dist_streams.event_")]
    user = [e for e in events if e[1] == "ta_compat_ev"]
    added = [e for e in events if e[1] != "ta_compat_ev"]
    assert user == [("event_record", "ta_compat_ev"), ("event_wait", "ta_compat_ev")]
    assert [name for name, _ in added] == ["event_record", "event_wait"]


def test_record_and_wait_equal_eager_and_wait_checks_its_arguments():
    def f(x):
        y = x * 2
        marker = torchair.ops.record()
        with torchair.scope.npu_stream_switch("s3"):
            torchair.ops.wait([marker, y])
            z = y + 1
        return z

    opt = _compile(f)
    x = torch.randn(3)
    assert torch.equal(opt(x), f(x))
    with pytest.raises(ValueError):  # TorchAir raises ValueError; ours is a StreamApiError too
        torchair.ops.wait([])
    with pytest.raises(StreamApiError, match="tensor"):
        torchair.ops.wait([1])


def test_ascend_scopes_are_recorded_on_the_ops_and_named_by_a_warning(caplog):
    from torchair_dist.passes import scope_attrs

    scope_attrs._warned.clear()

    def f(x):
        y = x + 1
        with torchair.scope.limit_core_num(4, 8):
            z = y * 2
            with torchair.scope.super_kernel("sk", "opt=1"):
                w = torch.relu(z)
        with torchair.scope.op_never_timeout(True), torchair.scope.data_dump():
            v = w - 1
        return v

    with compiler.record_graphs() as graphs, caplog.at_level(logging.WARNING, "torchair_dist"):
        opt = _compile(f)
        x = torch.randn(6)
        assert torch.equal(opt(x), f(x))
    attrs = {n.target: n.meta.get("custom") for n in graphs[0].gm.graph.nodes
             if n.op == "call_function"}
    aten = torch.ops.aten
    assert attrs[aten.add.Tensor] is None
    assert attrs[aten.mul.Tensor] == {"_op_aicore_num": "4", "_op_vectorcore_num": "8"}
    assert attrs[aten.relu.default] == {"_op_aicore_num": "4", "_op_vectorcore_num": "8",
                                        "_super_kernel_scope": "sk",
                                        "_super_kernel_options": "opt=1"}
    assert attrs[aten.sub.Tensor] == {"_op_exec_never_timeout": "True",
                                      "torchair_enable_data_dump": "True"}
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("limit_core_num", "super_kernel", "op_never_timeout", "data_dump"):
        assert f"scope.{name}" in warned


def test_scope_argument_errors():
    with pytest.raises(TypeError, match="bool"):
        torchair.scope.op_never_timeout(1)
    with pytest.raises(StreamApiError, match="op_aicore_num"):
        torchair.scope.limit_core_num(-1, 2)
    with pytest.raises(StreamApiError, match="tag"):
        torchair.scope.npu_stream_switch("")


def test_npu_print_prints_on_every_replay(capfd):
    def f(x):
        y = x * 2
        torchair.ops.npu_print("y =", y, summarize_size=2)
        return y + 1

    opt = _compile(f)
    for i in range(3):
        x = torch.arange(6.0) + i
        assert torch.equal(opt(x), f(x))
    out = capfd.readouterr().out.splitlines()
    # three eager calls and three compiled ones (capture, then two replays) each print once
    assert out.count("y = [0.0, 2.0, ..., 8.0, 10.0]") == 2
    assert out.count("y = [4.0, 6.0, ..., 12.0, 14.0]") == 2
    assert len([line for line in out if line.startswith("y = ")]) == 6
    assert list(next(iter(torchair.capture_report().values())).values())[0]["replays"] == 2


def test_fused_attention_names_the_platform_off_ascend():
    with pytest.raises(UnsupportedOpError, match="npu_fused_infer_attention_score"):
        torchair.ops.npu_fused_infer_attention_score(torch.ones(1))


def _search(x, y):
    return torch.relu(x + y)


def _replace(x, y):
    return torch.clamp_min(torch.add(x, y), 0.0) * 1.0


@pytest.fixture(scope="module")
def registered_pattern():
    from torchair_dist.passes import user_patterns as patterns

    ex = [torch.empty(4, 4), torch.empty(4, 4)]
    assert torchair.register_replacement(_search, _replace, ex)
    assert patterns.registered() == 1
    yield
    patterns.clear_replacements()  # other test modules in this process compile unchanged


@pytest.mark.parametrize("on", [True, False])
def test_register_replacement_rewrites_the_graph_unless_pattern_passes_are_off(
        registered_pattern, on):
    def f(a, b):
        return torch.relu(a + b) * 3

    with compiler.record_graphs() as graphs:
        opt = _compile(f, pattern_fusion_pass=on)
        a, b = torch.randn(4, 4), torch.randn(4, 4)
        assert torch.equal(opt(a, b), f(a, b))
    targets = {n.target for n in graphs[0].gm.graph.nodes if n.op == "call_function"}
    assert (torch.ops.aten.clamp_min.default in targets) is on
    assert (torch.ops.aten.relu.default in targets) is not on


def test_ge_mode_writes_scope_attributes_on_the_ge_ops(monkeypatch):
    import torchair_dist.backends.ge as ge_backend

    seen, convert = [], ge_backend.convert_graph
    monkeypatch.setattr(ge_backend, "convert_graph",
                        lambda *a, **k: seen.append(convert(*a, **k)) or seen[-1])

    def f(x):
        y = x + 1
        with torchair.scope.limit_core_num(2, 3):
            z = y * 2
        return z

    opt = torch.compile(f, backend=torchair.get_npu_backend(), fullgraph=True, dynamic=False)
    x = torch.randn(4)
    assert torch.equal(opt(x), f(x))
    ops = {op.type: op for op in seen[0].model.graph[0].op}
    assert ops["Mul"].attr["_op_aicore_num"].s == b"2"
    assert ops["Mul"].attr["_op_vectorcore_num"].s == b"3"
    assert "_op_aicore_num" not in ops["Add"].attr


def test_cleared_patterns_rewrite_nothing():
    from torchair_dist.passes import user_patterns as patterns

    patterns.clear_replacements()

    def f(a, b):
        return torch.relu(a + b)

    with compiler.record_graphs() as graphs:
        torch.compile(f, backend="npugraph_ex")(torch.randn(2), torch.randn(2))
    targets = {n.target for n in graphs[0].gm.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.relu.default in targets
