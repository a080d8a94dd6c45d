"""npugraph_ex as a TorchAir user drives it: ``backend="npugraph_ex"`` with ``options=``,
capture/replay counts, input mutation, custom ops that mutate an argument, the user's post-grad
passes (TorchAir's calling convention), ``deadlock_check``, ``compile_fx`` and config errors."""
import contextlib

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import torchair_dist as torchair
from torchair_dist.backends.aclgraph.outputs import CAN_PRESERVE
from torchair_dist.pipeline import route as compiler
from torchair_dist.errors import ConfigError, TorchairDistError


@torch.library.custom_op("ta_compat::scatter_kv", mutates_args=("cache",))
def scatter_kv(cache: torch.Tensor, slots: torch.Tensor, value: torch.Tensor) -> None:
    """A vLLM-style KV-cache write: rows ``slots`` of ``cache`` become ``value``."""
    cache.index_copy_(0, slots, value)


@scatter_kv.register_fake
def _(cache, slots, value):
    return None


def _ours(exc):
    """The TorchairDistError inside Dynamo's BackendCompilerFailed (or ``exc`` itself)."""
    while exc is not None and not isinstance(exc, TorchairDistError):
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return exc


def _nothing():
    return contextlib.nullcontext()


def _graph_counts():
    """{graph: (captures, replays, recaptures)} summed over the graph's keys."""
    out = {}
    for graph, keys in torchair.capture_report().items():
        out[graph] = tuple(sum(k[f] for k in keys.values())
                           for f in ("captures", "replays", "recaptures"))
    return out


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + x


def test_results_equal_eager_and_one_capture_then_replays():
    model = Mlp().eval()
    opt = torch.compile(model, backend="npugraph_ex", fullgraph=True, dynamic=False)
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(2, 8)
            assert torch.equal(opt(x), model(x))
    assert list(_graph_counts().values()) == [(1, 3, 0)]


def test_a_new_shape_captures_again_capture_limit_stops_capturing():
    model = Mlp().eval()
    opt = torch.compile(model, backend="npugraph_ex", fullgraph=True, dynamic=True,
                        options={"capture_limit": 2})
    with torch.no_grad(), pytest.warns(UserWarning, match="static_capture_size_limit"):
        for n in (2, 3, 2, 4, 3):
            x = torch.randn(n, 8)
            assert torch.allclose(opt(x), model(x), atol=1e-6)
    # sizes 2 and 3 are captured, the second 2 replays; 4 is past the limit and runs eagerly
    # (that call only: TorchAir turns the whole graph eager here), the second 3 replays
    assert list(_graph_counts().values()) == [(2, 2, 0)]
    keys = next(iter(torchair.capture_report().values()))
    assert sum(k.get("capture_limit", 0) for k in keys.values()) == 1


def test_input_mutation_is_written_back_every_replay():
    def f(cache, x):
        cache.add_(x)
        return cache * 2

    opt = torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False)
    cache, ref = torch.zeros(4), torch.zeros(4)
    for _ in range(3):
        x = torch.randn(4)
        assert torch.equal(opt(cache, x), f(ref, x))
        assert torch.equal(cache, ref)
    assert list(_graph_counts().values()) == [(1, 2, 0)]


def test_custom_op_mutating_an_argument_equals_eager():
    # Failed before: "no rule registered for HigherOrderOperator auto_functionalized_v2".
    w = torch.randn(4, 4)

    def step(cache, slots, x):
        torch.ops.ta_compat.scatter_kv(cache, slots, x @ w)
        return cache.sum(0)

    opt = torch.compile(step, backend="npugraph_ex", fullgraph=True, dynamic=False)
    cache, ref = torch.zeros(8, 4), torch.zeros(8, 4)
    for slots in ([1, 3], [0, 5], [7, 2]):
        s, x = torch.tensor(slots), torch.randn(2, 4)
        assert torch.equal(opt(cache, s, x), step(ref, s, x))
        assert torch.equal(cache, ref)
    assert list(_graph_counts().values()) == [(1, 2, 0)]


def test_custom_op_mutation_under_a_side_stream_equals_eager():
    def step(cache, slots, x):
        y = x * 2
        with torchair.scope.npu_stream_switch("kv", 0):
            torchair.scope.npu_wait_tensor(cache, y)
            torch.ops.ta_compat.scatter_kv(cache, slots, y)
        return cache + 1

    opt = torch.compile(step, backend="npugraph_ex", fullgraph=True, dynamic=False)
    cache, ref = torch.zeros(6, 3), torch.zeros(6, 3)
    for slots in ([0, 4], [1, 2]):
        s, x = torch.tensor(slots), torch.randn(2, 3)
        assert torch.equal(opt(cache, s, x), step(ref, s, x))
        assert torch.equal(cache, ref)


def test_post_grad_passes_are_called_as_torchair_calls_them():
    calls = []

    def pre(gm, example_inputs, config):
        calls.append(("pre", isinstance(gm, torch.fx.GraphModule), len(example_inputs),
                      config.mode.value))
        for node in gm.graph.nodes:  # relu -> sigmoid: the pass really edits the graph
            if node.target is torch.ops.aten.relu.default:
                node.target = torch.ops.aten.sigmoid.default

    def post(gm, example_inputs, config):
        calls.append(("post", isinstance(gm, torch.fx.GraphModule), len(example_inputs),
                      config.mode.value))

    def f(x):
        return torch.relu(x) + 1

    opt = torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False,
                        options={"post_grad_custom_pre_pass": pre,
                                 "post_grad_custom_post_pass": post})
    x = torch.randn(5)
    assert torch.equal(opt(x), torch.sigmoid(x) + 1)
    assert calls == [("pre", True, 1, "npugraph_ex"), ("post", True, 1, "npugraph_ex")]


def test_one_argument_post_grad_pass_still_gets_the_graph_with_a_warning(caplog):
    seen = []

    def old_style(graph):
        seen.append(type(graph).__name__)

    cfg = torchair.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.post_grad_custom_post_pass = old_style
    opt = torch.compile(lambda x: x + 1, backend=torchair.get_npu_backend(compiler_config=cfg))
    with caplog.at_level("WARNING", logger="torchair_dist"):
        assert torch.equal(opt(torch.ones(2)), torch.full((2,), 2.0))
    assert seen == ["Graph"]
    assert any("takes one argument" in r.getMessage() for r in caplog.records)


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.mark.parametrize("check", [True, False])
def test_deadlock_check_option_names_unordered_collectives_on_two_streams(one_rank_group,
                                                                          check):
    import warnings

    import torch.distributed as dist

    def f(x):
        with torchair.scope.npu_stream_switch("comm_a"):
            a = x * 2
            dist.all_reduce(a)
        with torchair.scope.npu_stream_switch("comm_b"):
            b = x + 1
            dist.all_reduce(b)
        return a + b

    opt = torch.compile(f, backend="npugraph_ex", options={"deadlock_check": check},
                        dynamic=False)
    x = torch.randn(3, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(opt(x), f(x.clone()))
    named = [w for w in caught if "deadlock_check" in str(w.message)]
    assert bool(named) is check


def test_compile_fx_in_a_custom_backend():
    seen = []

    def backend(gm, example_inputs):
        def fw(g, ex):
            seen.append(len(ex))
            return torchair.compile_fx(g, ex, options={"remove_noop_ops": False,
                                                       "clone_input": False})
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

    def f(a, b):
        return torch.matmul(a.transpose(0, 1), b).transpose(0, 1)

    opt = torch.compile(f, backend=backend, fullgraph=True, dynamic=False)
    a, b = torch.randn(4, 3), torch.randn(4, 5)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(opt(a, b), f(a, b))
    assert seen == [2]
    assert list(_graph_counts().values()) == [(1, 1, 0)]


def test_unknown_option_key_names_it():
    opt = torch.compile(lambda x: x + 1, backend="npugraph_ex", options={"no_such_key": 1})
    with pytest.raises(Exception) as err:
        opt(torch.ones(2))
    assert isinstance(_ours(err.value), ConfigError) and "no_such_key" in str(_ours(err.value))


def test_wrong_option_value_is_a_config_error():
    with pytest.raises(Exception) as err:
        torch.compile(lambda x: x + 1, backend="npugraph_ex",
                      options={"inplace_pass": "yes"})(torch.ones(2))
    assert isinstance(_ours(err.value), ConfigError) and "inplace_pass" in str(_ours(err.value))


def test_force_eager_runs_without_capture():
    model = Mlp().eval()
    opt = torch.compile(model, backend="npugraph_ex", options={"force_eager": True})
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert torch.equal(opt(x), model(x))
    assert _graph_counts() == {}


@pytest.mark.parametrize("ns", ["air", "npugraph_ex"])
def test_user_passes_mark_stream_scopes_with_torchairs_scope_ops(ns):
    import torchair_dist.streams.scope_ops  # noqa: F401 - defines the ops (also at import)

    enter = getattr(torch.ops, ns).scope_enter.default
    leave = getattr(torch.ops, ns).scope_exit.default
    aten = torch.ops.aten

    def pre(gm, example_inputs, config):  # sqrt .. add on stream0
        g = gm.graph
        for node in list(g.nodes):
            if node.target is aten.sqrt.default:
                with g.inserting_before(node):
                    g.call_function(enter, (["_user_stream_label"], ["stream0"]))
            if node.target is aten.add.Tensor:
                with g.inserting_after(node):
                    g.call_function(leave, ())

    def post(gm, example_inputs, config):  # abs carries an attribute
        g = gm.graph
        for node in list(g.nodes):
            if node.target is aten.abs.default:
                with g.inserting_before(node):
                    g.call_function(enter, (["_op_aicore_num"], ["6"]))
                with g.inserting_after(node):
                    g.call_function(leave, ())

    def f(x, y):
        a = torch.sqrt(x)
        b = torch.add(a, y)
        return torch.abs(b) * 2

    with compiler.record_graphs() as graphs:
        opt = torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False,
                            options={"post_grad_custom_pre_pass": pre,
                                     "post_grad_custom_post_pass": post})
        x, y = torch.rand(4, 4), torch.randn(4, 4)
        assert torch.equal(opt(x, y), f(x, y))
    nodes = [n for n in graphs[0].gm.graph.nodes if n.op == "call_function"]
    names = [n.target.name() for n in nodes]
    assert not any("scope_" in n for n in names)
    streams = torchair.streams.ops
    assert [n.args for n in nodes if n.target is streams.stream_enter.default] == [("stream0", 0)]
    assert names.index("torchair_dist_streams::stream_enter") < names.index("aten::sqrt") \
        < names.index("aten::add.Tensor") < names.index("torchair_dist_streams::stream_exit")
    assert names[0] == "torchair_dist_streams::fork" and names[-1] == "torchair_dist_streams::join"
    abs_node = next(n for n in nodes if n.target is aten.abs.default)
    assert abs_node.meta["custom"] == {"_op_aicore_num": "6"}


@pytest.mark.parametrize("clone_output", [True, False])
def test_clone_output_gives_each_call_its_own_output(clone_output):
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.add(x, x)

    opt = torch.compile(Model(), backend="npugraph_ex", fullgraph=True, dynamic=False,
                        options={"clone_output": clone_output})
    x = torch.randn(4, 4)
    first = opt(x)
    first_memory = first.untyped_storage().data_ptr()
    second = opt(x)
    same = first_memory == second.untyped_storage().data_ptr()
    if CAN_PRESERVE:  # torch < 2.13: the CPU stand-in moves the graph, not the kept output
        assert same is not clone_output  # off: the captured output's memory each time
    assert torch.equal(second, x + x)
    # off: kept across the second replay, the first output was moved onto a copy first
    assert torch.equal(first, x + x)


def _backends():
    """TorchAir's two spellings of the capture mode: the aclgraph form (a CompilerConfig with
    mode "reduce-overhead" through get_npu_backend) and the npugraph_ex backend name."""
    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"
    return {"aclgraph": torchair.get_npu_backend(compiler_config=config),
            "npugraph_ex": "npugraph_ex"}


@pytest.mark.parametrize("form", ["aclgraph", "npugraph_ex"])
def test_a_aclgraph_memory_state_setting(form):
    """An output of one batch size's capture, kept while another batch size is captured and
    replayed, stays valid (TorchAir checkpoints the pool's state at each capture)."""
    model = Mlp().eval()
    with pytest.warns(DeprecationWarning) if form == "aclgraph" else _nothing():
        opt = torch.compile(model, backend=_backends()[form], fullgraph=True, dynamic=True)
    xa, xb = torch.randn(4, 8), torch.randn(2, 8)
    with torch.no_grad():
        first = opt(xa)                  # capture of 4 rows, kept
        second = opt(xb)                 # capture of 2 rows
        opt(torch.randn(2, 8))           # replays of both
        opt(torch.randn(4, 8))
        torch.testing.assert_close(first, model(xa), rtol=0, atol=0)
        torch.testing.assert_close(second, model(xb), rtol=0, atol=0)


def test_force_recapture():
    model = Mlp().eval()
    opt = torch.compile(model, backend="npugraph_ex", fullgraph=True, dynamic=False,
                        options={"force_recapture": True})
    xs = [torch.randn(2, 8) for _ in range(3)]
    with torch.no_grad():
        outs = [opt(x) for x in xs]      # every call captures again; all outputs kept
        for x, out in zip(xs, outs):
            assert torch.equal(out, model(x))
    assert list(_graph_counts().values()) == [(3, 0, 2)]


def test_force_recapture_disabled():
    """Outputs of two calls of one shape, compared at the end (as multi-card programs do)."""
    model = Mlp().eval()
    opt = torch.compile(model, backend="npugraph_ex", fullgraph=True, dynamic=False,
                        options={"force_recapture": False})
    x = torch.randn(2, 8)
    with torch.no_grad():
        first = opt(x)
        second = opt(x)
        third = opt(torch.randn(2, 8))
        assert torch.equal(first, second) and torch.equal(first, model(x))
        assert not torch.equal(third, first)
    assert list(_graph_counts().values()) == [(1, 2, 0)]


def test_a_parameter_given_new_storage_is_recaptured():
    lin = torch.nn.Linear(4, 4).eval()
    opt = torch.compile(lin, backend="npugraph_ex", fullgraph=True, dynamic=False)
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(opt(x), lin(x))
        assert torch.equal(opt(x), lin(x))
        lin.weight.data = torch.ones(4, 4)   # what TorchAir's smoke tests do to a parameter
        assert torch.equal(opt(x), lin(x))
        assert torch.equal(opt(x), lin(x))
    assert list(_graph_counts().values()) == [(2, 2, 1)]


def test_custom_op_mutating_on_a_side_stream_then_event_wait_equals_eager():
    # TorchAir's stream_test: a custom op mutates an input on a side stream, an event protects
    # the main stream's read of it.
    ev = torchair.ops.npu_create_tagged_event("ta_compat_mut_ev")

    def f(cache, slots, value):
        with torchair.scope.npu_stream_switch("side"):
            torch.ops.ta_compat.scatter_kv(cache, slots, value)
            torchair.ops.npu_tagged_event_record(ev)
        torchair.ops.npu_tagged_event_wait(ev)
        return cache + 1

    with compiler.record_graphs() as graphs:
        opt = torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False)
        cache, ref = torch.zeros(5, 2), torch.zeros(5, 2)
        for slots in ([0, 2], [4, 1], [3, 0]):
            s, v = torch.tensor(slots), torch.randn(2, 2)
            assert torch.equal(opt(cache, s, v), f(ref, s, v))
            assert torch.equal(cache, ref)
    assert list(_graph_counts().values()) == [(1, 2, 0)]
    # the user's one record/wait pair orders the main stream's read: exactly that pair, as in
    # TorchAir (the stream_order stage adds no event of its own)
    events = [(str(n.target).split(".")[1], n.args[0]) for n in graphs[0].gm.graph.nodes
              if str(n.target).startswith("torchair_dist_streams.event_")]
    assert events == [("event_record", "ta_compat_mut_ev"), ("event_wait", "ta_compat_mut_ev")]
