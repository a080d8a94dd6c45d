"""The recording CPU stand-in (TORCHAIR_DIST_CPU_CAPTURE=record): device-graph semantics on CPU."""
import logging
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist.backends.aclgraph.outputs import CAN_PRESERVE
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.cpu import record as record_mod


pytestmark = pytest.mark.usefixtures("record_capture")


def compile_fn(fn, dynamic=False, mode="npugraph_ex", **options):
    cfg = CompilerConfig()
    cfg.mode = mode
    for path, value in options.items():
        cfg.option(path).set(value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True,
                         dynamic=dynamic)


def _only_counts():
    (keys,) = torchair_dist.capture_report().values()
    return keys


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead"])
def test_replay_reissues_recorded_ops_and_equals_eager_with_new_data(runners, mode):
    def g(x, w):
        return torch.relu(x @ w).sum(1, keepdim=True) + x[:, :1]

    f = compile_fn(g, mode=mode)
    log = logging.getLogger("torchair_dist")
    lines = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: lines.append(record.getMessage())
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    try:
        for _ in range(4):
            x, w = torch.randn(4, 5), torch.randn(5, 3)
            assert torch.equal(f(x, w), g(x, w))
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    graph = runners[0].captures[next(iter(runners[0].captures))].graph
    assert isinstance(graph, record_mod.RecordGraph)
    aten = torch.ops.aten
    assert graph.ops[:3] == [aten.mm.default, aten.relu.default, aten.sum.dim_IntList]
    (counts,) = _only_counts().values()
    assert (counts["captures"], counts["replays"], counts["recaptures"]) == (1, 3, 0)
    text = "\n".join(lines)
    assert text.count("capture of key") == 1 and text.count("replay of key") == 3


def test_replay_does_not_run_the_python_forward(runners):
    f = compile_fn(lambda x: x * 3 - 1)
    f(torch.ones(3))
    runner = runners[0]
    calls = []
    forward = runner.forward
    runner.forward = lambda args: calls.append(1) or forward(args)
    x = torch.randn(3)
    assert torch.equal(f(x), x * 3 - 1)
    assert calls == []


def test_replay_reads_the_captured_buffers_not_the_callers():
    # clone_input=False: captured on the caller's tensor; a same-address input is read in place,
    # a new one is copied into the captured buffer (the caller's first tensor).
    f = compile_fn(lambda x: x + 1, **{"debug.aclgraph.clone_input": False})
    first = torch.zeros(3)
    f(first)
    first.fill_(4)
    assert torch.equal(f(first), torch.full((3,), 5.0))
    assert torch.equal(f(torch.full((3,), 9.0)), torch.full((3,), 10.0))
    assert torch.equal(first, torch.full((3,), 9.0)), "the new input is copied into the buffer"


def test_mutated_input_and_recapture_reason(runners):
    def g(x, acc):
        acc.add_(x)
        return acc * 2

    f = compile_fn(g)
    acc, ref = torch.zeros(3), torch.zeros(3)
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(f(x, acc), g(x, ref)) and torch.equal(acc, ref)
    other, other_ref = torch.ones(3), torch.ones(3)
    x = torch.randn(3)
    assert torch.equal(f(x, other), g(x, other_ref)) and torch.equal(other, other_ref)
    assert torch.equal(acc, ref), "the old mutated input is not written by the recapture"
    (counts,) = _only_counts().values()
    assert counts["captures"] == 2 and counts["recaptures"] == 1 and counts["replays"] == 2
    reasons = counts["capture_reasons"]
    assert reasons.pop("first capture") == 1
    (moved,) = reasons
    assert moved.startswith("moved mutated input") and reasons[moved] == 1


def test_new_shapes_and_capture_limit_are_reported():
    f = compile_fn(lambda x: x.sum(0) * 2, dynamic=True,
                   **{"debug.aclgraph.static_capture_size_limit": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (2, 3, 2, 4):
            x = torch.randn(n, 4)
            assert torch.equal(f(x), x.sum(0) * 2)
    report = _only_counts()
    keys = {k: v for k, v in report.items() if v.get("captures")}
    assert sorted(str(v["capture_reasons"]) for v in keys.values()) == \
        ["{'first capture': 1}", "{'new shape': 1}"]
    assert sum(v["replays"] for v in keys.values()) == 1
    assert [v.get("capture_limit") for v in report.values() if not v.get("captures")] == [1]


def test_report_is_cleared_by_dynamo_reset():
    compile_fn(lambda x: x + 2)(torch.ones(2))
    assert torchair_dist.capture_report()
    torch._dynamo.reset()
    assert torchair_dist.capture_report() == {}


@pytest.fixture
def dynamic_shape_ops():
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True,
                                    capture_scalar_outputs=True):
        yield


def _nonzero(x):
    idx = torch.nonzero(x > 0)  # SOURCE-LINE-NONZERO
    return idx.sum() + x


def _item(x):
    n = (x > 0).sum().item()  # SOURCE-LINE-ITEM
    return x.new_ones(n).sum() + x


@pytest.mark.parametrize("fn,op,marker", [
    (_nonzero, "aten.nonzero.default", "SOURCE-LINE-NONZERO"),
    (_item, "aten._local_scalar_dense.default", "SOURCE-LINE-ITEM")], ids=["nonzero", "item"])
def test_host_sync_is_not_captured_one_warning_with_op_and_line(dynamic_shape_ops, fn, op, marker):
    f = compile_fn(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(6)
            assert torch.equal(f(x), fn(x))
    skips = [str(w.message) for w in caught if "not captured" in str(w.message)]
    assert len(skips) == 1, skips
    assert op in skips[0] and "test_capture_record.py" in skips[0] and marker in skips[0]
    (graph,) = torchair_dist.capture_report().values()
    assert graph["*"]["uncaptured_runs"] == 3 and op in graph["*"]["uncaptured_reason"]


def _mask_index(x):
    return x[x > 0].sum() + x  # SOURCE-LINE-MASK


def test_integer_index_is_captured_and_a_boolean_mask_is_not(dynamic_shape_ops):
    """``aten.index.Tensor`` carries the dynamic-output-shape tag for its boolean-mask form only:
    with integer indices (an MoE combine, ``out[slot]``) the output size is the index's, so the
    graph is captured and replayed; a boolean mask needs the data and leaves it uncaptured."""
    def gather_rows(x, slot):
        return x[slot] * 2

    f = compile_fn(gather_rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in range(3):
            x, slot = torch.randn(8, 4), torch.randint(0, 8, (5,), generator=torch.Generator()
                                                        .manual_seed(seed))
            assert torch.equal(f(x, slot), gather_rows(x, slot))
    assert not [w for w in caught if "not captured" in str(w.message)]
    (graph,) = torchair_dist.capture_report().values()
    (key,) = graph.values()
    assert key["captures"] == 1 and key["replays"] == 2, key
    torchair_dist.reset_capture_report()
    torch._dynamo.reset()
    g = compile_fn(_mask_index)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(6)
        assert torch.equal(g(x), _mask_index(x))
    skips = [str(w.message) for w in caught if "not captured" in str(w.message)]
    assert len(skips) == 1 and "SOURCE-LINE-MASK" in skips[0], skips


def test_host_call_inside_a_kernel_is_caught_and_mutations_applied_once(runners, monkeypatch):
    """A host-side call found only while capturing (inside an opaque kernel) stops the capture;
    the input mutations it already made are undone, so the uncaptured run applies them once."""
    lib = torch.library.Library("test_capture_record", "FRAGMENT")
    lib.define("host_sync(Tensor x) -> Tensor")

    def host_sync(x):
        torch.distributed.barrier()  # a host-side call (refused while capturing)
        return x.clone()

    lib.impl("host_sync", host_sync, "CompositeExplicitAutograd")
    lib.impl("host_sync", lambda x: torch.empty_like(x), "Meta")
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: None)

    def g(x, acc):
        acc.add_(x)
        return torch.ops.test_capture_record.host_sync(acc) * 2

    f = compile_fn(g)
    acc, ref = torch.zeros(3), torch.zeros(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.randn(3)
            assert torch.equal(f(x, acc), g(x, ref)) and torch.equal(acc, ref)
    skips = [str(w.message) for w in caught if "not captured" in str(w.message)]
    assert len(skips) == 1 and "torch.distributed.barrier" in skips[0]
    assert runners[0].capture_count == 0


def test_an_output_kept_across_another_shapes_replay_keeps_its_values(runners):
    """Captures of one graph share a pool: a replay of one key may overwrite the outputs of
    keys captured after it (the stand-in does, as a real pool may). An output kept across it
    is moved onto a copy first (one copy, counted); nothing is copied on the way out."""
    f = compile_fn(lambda x: x * 2 + 1, dynamic=True)
    f(torch.ones(3))                      # capture key (3,)
    f(torch.ones(4))                      # capture key (4,)
    kept = f(torch.full((4,), 2.0))       # replay key (4,), kept by the user
    view = kept[1:3]
    ptr = kept.untyped_storage().data_ptr()
    outputs = [cap.outputs[0] for cap in runners[0].captures.values()]
    assert any(o.untyped_storage().data_ptr() == ptr for o in outputs), "no copy handed out"
    f(torch.full((3,), 7.0))              # replay key (3,): may reuse (4,)'s blocks
    assert torch.equal(kept, torch.full((4,), 5.0)) and torch.equal(view, kept[1:3])
    if CAN_PRESERVE:  # torch >= 2.13: the caller's storage moved onto its copy
        assert kept.untyped_storage().data_ptr() != ptr
    assert torchair_dist.capture_summary()["graph_0"]["output_copies"] == 1
    del kept, view
    f(torch.full((3,), 7.0))
    f(torch.full((4,), 7.0))
    assert torchair_dist.capture_summary()["graph_0"]["output_copies"] == 1


def test_separate_pools_keep_outputs_of_other_keys_without_copies(runners):
    f = compile_fn(lambda x: x * 2 + 1, dynamic=True,
                   **{"debug.aclgraph.disable_mempool_reuse_in_same_fx": True})
    f(torch.ones(3))
    f(torch.ones(4))
    kept = f(torch.full((4,), 2.0))
    f(torch.full((3,), 7.0))              # its own pool: (4,)'s output is untouched
    assert torch.equal(kept, torch.full((4,), 5.0))
    outputs = [cap.outputs[0] for cap in runners[0].captures.values()]
    assert any(kept.untyped_storage().data_ptr() == o.untyped_storage().data_ptr()
               for o in outputs), "own pool: the captured output's memory, not a copy"


class _Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def test_a_parameter_given_new_storage_is_a_recapture_and_replay_uses_the_captured_weights(
        runners):
    m = _Lin()
    f = compile_fn(m)
    x = torch.randn(2, 4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x)
        m.lin.weight.copy_(m.lin.weight * 3)  # in place: the captured weights are read
        assert torch.equal(f(x), m(x))
        m.lin.weight.data = m.lin.weight.data.clone() * 2  # new storage: recaptured
        assert torch.allclose(f(x), m(x))
    (counts,) = _only_counts().values()
    assert counts["capture_reasons"] == {"first capture": 1, "moved parameter": 1}
    assert counts["recaptures"] == 1 and counts["replays"] == 1


def test_layers_sharing_one_graph_are_keys_of_their_own_not_recaptures(runners):
    """Dynamo compiles a block's forward once and calls it for every layer with that layer's
    weights: each layer is a capture of its own (transformers' engine splits its model so)."""
    blocks = [_Lin(), _Lin()]

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(blocks)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
                torch._dynamo.graph_break()
            return x

    model = Stack().eval()
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    f = torch.compile(model, backend=get_npu_backend(compiler_config=cfg))
    x = torch.randn(2, 4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            assert torch.equal(f(x), model(x))
    rows = [e for keys in torchair_dist.capture_report().values() for e in keys.values()]
    reasons = [r for e in rows for r in e["capture_reasons"]]
    assert "new parameters" in reasons and "moved parameter" not in reasons
    assert sum(e["recaptures"] for e in rows) == 0
    assert sum(e["captures"] for e in rows) == 2


def test_rule_host_device_copy_and_stream_sync_are_uncapturable():
    from torchair_dist.backends.aclgraph.rules import find_uncapturable
    from torchair_dist.streams.stream_ops import ops as stream_ops

    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, device="meta")
    moved = g.call_function(torch.ops.aten._to_copy.default, (x,), {"device": "cpu"})
    moved.meta["val"] = torch.empty(2)
    moved.meta["stack_trace"] = '  File "/user/model.py", line 7, in forward\n    x.cpu()\n'
    g.output(moved)
    found = find_uncapturable(torch.fx.GraphModule(torch.nn.Module(), g))
    assert found.op == "aten._to_copy.default" and "host and the device" in found.why
    assert "/user/model.py" in found.where and "x.cpu()" in found.where

    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(stream_ops.synchronize.default, ("",))
    g.output(x)
    found = find_uncapturable(torch.fx.GraphModule(torch.nn.Module(), g))
    assert found.op.endswith("synchronize.default") and "host sync" in found.why

    same_device = torch.fx.symbolic_trace(lambda t: t.to(torch.float64) + 1)
    assert find_uncapturable(same_device) is None


def _ops_of(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        result = fn()
    return result, [e.name for e in prof.events() if e.name.startswith("aten::")]


def test_replay_writes_outputs_in_place_and_reads_inputs_without_copies(runners):
    """A replay issues the graph's own ops and nothing else: an op that makes an output writes
    it through its ``out=`` overload (no copy into the captured output), and the inputs a
    device runner copies into private buffers (clone_input) are read where the caller has
    them. Values equal eager on every call, and the output is the same tensor every replay."""
    def mlp(x, w1, w2):
        return torch.relu(x @ w1) @ w2, x.sum(0)

    w1, w2 = torch.randn(8, 16), torch.randn(16, 4)
    f = compile_fn(mlp)
    f(torch.randn(3, 8), w1, w2)
    (runner,) = runners
    assert "out=" in next(iter(runner.captures.values())).graph.source
    captured = next(iter(runner.captures.values())).outputs
    for _ in range(3):
        x = torch.randn(3, 8)
        got, ops = _ops_of(lambda: f(x, w1, w2))
        for a, b in zip(got, mlp(x, w1, w2)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert all(g.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()
                   for g, c in zip(got, captured)), "outputs are the captured tensors' memory"
        assert "aten::copy_" not in ops and "aten::clone" not in ops, ops
        assert ops.count("aten::mm") == 2 and ops.count("aten::sum") == 1, ops
        del got, a, b  # held across the next call, outputs would be moved onto copies first
