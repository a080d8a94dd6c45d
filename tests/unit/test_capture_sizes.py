"""Serving with captured graphs (issue 38): declared capture sizes captured up front largest
first into one pool, padding, the capture limit per shape, graph memory that does not grow
with the number of sizes, stale outputs, capture time and bytes in the reports."""
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend

pytestmark = pytest.mark.usefixtures("record_capture")


def _compiled(fn, sizes=(), pad=False, dynamic=True, **options):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.capture_sizes = list(sizes)
    cfg.npugraphex_config.pad_to_capture_size = pad
    for name, value in options.items():
        obj = cfg
        *path, last = name.split(".")
        for part in path:
            obj = getattr(obj, part)
        setattr(obj, last, value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), dynamic=dynamic)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 16)).eval()


def _keys(report):
    (graph,) = report.values()
    return graph


def test_declared_sizes_are_captured_at_the_first_call_largest_first(runners):
    m = _mlp()
    f = _compiled(m, sizes=[2, 8, 4])
    with torch.no_grad():
        x = torch.randn(4, 16)
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
        for n in (2, 8, 4, 8):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
    (runner,) = runners
    rows = [next(s for s in key[0] if isinstance(s, torch.Size))[0] for key in runner.captures]
    assert rows == [8, 4, 2], "largest first"
    keys = _keys(torchair_dist.capture_report())
    assert sum(k["captures"] for k in keys.values()) == 3
    assert sum(k["replays"] for k in keys.values()) == 5  # the first call replays too
    for entry in keys.values():
        assert entry["capture_time_s"] > 0
    # the pool model: the largest capture reserves its blocks, the smaller ones fit in them
    added = {name: entry["capture_bytes"] for name, entry in keys.items()}
    assert added["[8, (8, 16)]"] > 0 and added["[4, (4, 16)]"] == added["[2, (2, 16)]"] == 0, \
        added
    (summary,) = torchair_dist.capture_summary().values()
    assert summary["pool_bytes"] == added["[8, (8, 16)]"]


def test_padding_to_the_next_declared_size_where_rows_are_independent(runners):
    m = _mlp()
    f = _compiled(m, sizes=[2, 4, 8], pad=True)
    with torch.no_grad():
        for n in (3, 5, 7, 8):  # (a batch of 1 is a graph of its own: Dynamo specializes 1)
            x = torch.randn(n, 16)
            out = f(x)
            assert out.shape == (n, 16)
            torch.testing.assert_close(out, m(x), rtol=1e-6, atol=1e-6)
    assert len(runners[0].captures) == 3, "no capture beyond the declared sizes"
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["padded"] == {"3->4": 1, "5->8": 1, "7->8": 1}


def test_without_padding_or_above_the_largest_size_that_call_runs_eagerly(runners):
    m = _mlp()
    f = _compiled(m, sizes=[2, 4])
    with torch.no_grad():
        for n in (3, 4, 9):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
    assert len(runners[0].captures) == 2
    eager = torchair_dist.capture_summary()["graph_0"]["eager"]
    assert eager == {"3: pad_to_capture_size is off": 1, "9: pad_to_capture_size is off": 1}
    g = _compiled(m, sizes=[2, 4], pad=True)
    torch._dynamo.reset()
    with torch.no_grad():
        x = torch.randn(9, 16)
        torch.testing.assert_close(g(x), m(x), rtol=0, atol=0)
    eager = torchair_dist.capture_summary()["graph_0"]["eager"]
    assert eager == {"9: above the largest declared size": 1}


def test_padding_is_refused_when_a_mutated_input_has_the_batch_dim(runners):
    def step(state, x):
        state.add_(x)
        return state * 2

    f = _compiled(step, sizes=[4], pad=True)
    state, ref = torch.zeros(3, 8), torch.zeros(3, 8)
    for _ in range(2):
        x = torch.randn(3, 8)
        torch.testing.assert_close(f(state, x), step(ref, x), rtol=0, atol=0)
        torch.testing.assert_close(state, ref, rtol=0, atol=0)
    eager = torchair_dist.capture_summary()["graph_0"]["eager"]
    assert eager == {"3: a mutated input has the batch dim": 2}


def test_mutated_inputs_are_restored_after_the_declared_captures():
    def step(cache, x):
        cache.add_(x.sum(0))
        return x * 2

    f = _compiled(step, sizes=[2, 4, 8])
    cache, ref = torch.zeros(5), torch.zeros(5)
    x = torch.randn(4, 5)
    torch.testing.assert_close(f(cache, x), step(ref, x), rtol=0, atol=0)
    torch.testing.assert_close(cache, ref, rtol=1e-6, atol=1e-6)


def test_past_the_limit_only_new_shapes_run_eagerly(runners):
    m = _mlp()
    f = _compiled(m, **{"debug.aclgraph.static_capture_size_limit": 3})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in list(range(2, 9)) + list(range(2, 9)):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
    assert len(runners[0].captures) == 3
    keys = _keys(torchair_dist.capture_report())
    assert sum(k["replays"] for k in keys.values()) == 3  # sizes 2, 3, 4 on the second pass


def _decode_layers():
    """A decode step's shape: two transformer-ish blocks over (batch, hidden) rows."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
        torch.nn.LayerNorm(64), torch.nn.Linear(64, 256), torch.nn.GELU(),
        torch.nn.Linear(256, 64)).eval()


def _memory(sizes):
    torch._dynamo.reset()
    torchair_dist.reset_capture_report()
    m = _decode_layers()
    f = _compiled(m, sizes=sizes)
    with torch.no_grad():
        x = torch.randn(max(sizes), 64)
        torch.testing.assert_close(f(x), m(x), rtol=1e-6, atol=1e-6)
    (summary,) = torchair_dist.capture_summary().values()
    assert summary["captures"] == len(sizes)
    return summary


def test_graph_memory_of_32_sizes_stays_within_a_quarter_of_the_largest_alone():
    """One pool for every capture, largest first: the pool holds what the largest capture
    needs, and the inputs one buffer each, sized for the largest (no copy per capture)."""
    alone = _memory([33])
    many = _memory(list(range(2, 34)))  # 32 sizes (a batch of 1 is a graph of its own)
    assert many["pool_bytes"] <= 1.25 * alone["pool_bytes"], (many, alone)
    assert many["input_bytes"] == alone["input_bytes"], (many, alone)


def test_lazy_captures_of_growing_sizes_keep_each_larger_buffer(runners):
    """Without declared sizes the captures come in the order calls arrive; an input buffer
    grows when a larger capture needs it (the smaller captures keep theirs): the capture
    summary counts every buffer still held."""
    m = _mlp()
    f = _compiled(m)
    with torch.no_grad():
        for n in (4, 2, 8):
            f(torch.randn(n, 16))
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["input_bytes"] == (4 + 8) * 16 * 4  # 2 rows reuse the 4-row buffer


def test_outputs_are_not_copied_and_one_kept_keeps_its_values(runners):
    """Declared sizes are captured largest first: the smaller capture's replay writes only
    its own outputs (the larger one's were held when it was captured), so an output of the
    larger size kept across it stays valid without a copy."""
    m = _mlp()
    f = _compiled(m, sizes=[2, 4])
    with torch.no_grad():
        xa = torch.randn(4, 16)
        a = f(xa)
        b = f(torch.randn(2, 16))
        torch.testing.assert_close(a, m(xa), rtol=0, atol=0)
        assert torchair_dist.capture_summary()["graph_0"]["output_copies"] == 0
        assert b.shape == (2, 16)
        pool = {o.untyped_storage().data_ptr() for c in runners[0].captures.values()
                for o in c.outputs}
        assert b.untyped_storage().data_ptr() in pool, "handed out without a copy"


def test_clone_output_keeps_every_output(runners):
    m = _mlp()
    f = _compiled(m, sizes=[2, 4], **{"debug.aclgraph.enable_output_clone": True})
    with torch.no_grad():
        xa, xb = torch.randn(4, 16), torch.randn(2, 16)
        a = f(xa)
        f(xb)
        torch.testing.assert_close(a, m(xa), rtol=0, atol=0)


def test_declared_sizes_on_a_static_graph_are_ignored_with_a_warning():
    m = _mlp()
    f = _compiled(m, sizes=[2, 4], dynamic=False)
    with torch.no_grad(), pytest.warns(UserWarning, match="capture_sizes is ignored"):
        f(torch.randn(3, 16))


def test_a_declared_size_dynamo_compiles_apart_is_captured_once(runners):
    """Dynamo gives a batch of 1 a graph of its own: the dynamic graph captures the declared
    sizes its guards admit (2 and up), the batch-1 graph captures 1; no size twice, and no
    warning for the batch-1 graph."""
    m = _mlp()
    f = _compiled(m, sizes=[1, 2, 4], pad=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (2, 1, 3, 4, 1):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), m(x), rtol=1e-6, atol=1e-6)
    captured = sorted(next(s for s in key[0] if isinstance(s, torch.Size))[0]
                      for r in runners for key in r.captures)
    assert captured == [1, 2, 4], captured


class _TokenModel(torch.nn.Module):
    """A flattened token batch as transformers' and vLLM's engines feed it: ``ids`` of shape
    ``[1, tokens]`` (every request's tokens in one row), positions alike; per-token work."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 32)
        self.pos = torch.nn.Embedding(64, 32)
        self.norm = torch.nn.RMSNorm(32)
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, ids, positions):
        return self.proj(self.norm(self.embed(ids) + self.pos(positions)))


def test_capture_sizes_name_the_token_dim_of_a_flattened_batch(runners):
    """No input has a dynamic dim 0 ([1, tokens]): the token dim is the batch; each declared
    token count is captured once, other counts padded up along dim 1 and sliced back."""
    m = _TokenModel().eval()
    f = _compiled(m, sizes=[8, 16, 32], pad=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no "capture_sizes is ignored"
        for t in (5, 8, 13, 32, 3, 16, 29):
            ids = torch.randint(0, 64, (1, t))
            pos = torch.arange(t).unsqueeze(0)
            out = f(ids, pos)
            assert out.shape == (1, t, 16)
            torch.testing.assert_close(out, m(ids, pos), rtol=1e-6, atol=1e-6)
    dynamic = [r for r in runners if r.declared.batch is not None]
    (runner,) = dynamic
    assert runner.declared.batch.dim_of_input(0) == 1
    tokens = sorted(next(s for s in key[0] if isinstance(s, torch.Size))[1]
                    for key in runner.captures)
    assert tokens == [8, 16, 32], tokens
    summary = torchair_dist.capture_summary()[runner.name]
    assert summary["padded"] == {"5->8": 1, "13->16": 1, "3->8": 1, "29->32": 1}, summary
    assert summary["batch_dim"].startswith("dim 1 of input ") and \
        summary["declared_sizes"] == [8, 16, 32], summary


def test_a_token_batch_whose_tokens_mix_is_refused_padding():
    """Padding along the token dim is proven like rows: a softmax over the tokens mixes them."""
    f = _compiled(lambda x: torch.softmax(x, dim=1) * 2, sizes=[8, 16], pad=True)
    with torch.no_grad(), pytest.raises(Exception) as err:
        f(torch.randn(1, 5, 4))
    text = str(err.value)
    assert "PaddingUnsafeError" in text and "aten._softmax.default" in text, text
