"""Piecewise graphs (issue 38 item 3): a graph split at its attention ops, the pieces between
them captured per batch size in one pool, attention run eagerly between replays; a decode whose
KV length grows every step captures once per batch size, not once per (batch, length)."""
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.errors import ConfigError
from torchair_dist.pipeline import option_support

pytestmark = pytest.mark.usefixtures("record_capture")

SDPA = "aten._scaled_dot_product_flash_attention_for_cpu"


class Decode(torch.nn.Module):
    """One decode step: q from the new token, attention over a KV cache of length L (given),
    output projection and a residual."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.dim = heads, dim
        self.q = torch.nn.Linear(dim, dim)
        self.o = torch.nn.Linear(dim, dim)

    def forward(self, x, k, v):
        b = x.shape[0]
        q = self.q(x).view(b, 1, self.heads, self.dim // self.heads).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return torch.relu(self.o(a.transpose(1, 2).reshape(b, 1, self.dim))) + x


def _compiled(fn, piecewise=True, **options):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.piecewise = piecewise
    for name, value in options.items():
        setattr(cfg.npugraphex_config, name, value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), dynamic=True)


def _step(b, L):
    return torch.randn(b, 1, 32), torch.randn(b, 4, L, 8), torch.randn(b, 4, L, 8)


def _decode(f, m, batches=(2, 3), lengths=range(5, 10)):
    with torch.no_grad():
        for b in batches:
            for L in lengths:
                args = _step(b, L)
                torch.testing.assert_close(f(*args), m(*args), rtol=1e-5, atol=1e-5)


def _captures(report):
    """{graph: {key: captures}}"""
    return {g: {k: e.get("captures", 0) for k, e in keys.items()} for g, keys in report.items()}


def test_piecewise_decode_captures_once_per_batch_size_while_the_length_grows(runners):
    m = Decode().eval()
    _decode(_compiled(m), m)
    counts = _captures(torchair_dist.capture_report())
    assert sorted(counts) == ["graph_0.piece_0", "graph_0.piece_2"], counts
    for graph, keys in counts.items():
        assert len(keys) == 2 and set(keys.values()) == {1}, (graph, keys)  # b=2, b=3
    assert sum(r.capture_count for r in runners) == 4
    # the attention is not captured: no piece's recorded replay issues it
    for r in runners:
        for cap in r.captures.values():
            assert not any(SDPA in str(op) for op in cap.graph.ops), r.name


def test_without_piecewise_the_same_decode_captures_once_per_batch_and_length():
    m = Decode().eval()
    _decode(_compiled(m, piecewise=False), m)
    counts = _captures(torchair_dist.capture_report())
    assert list(counts) == ["graph_0"]
    assert len(counts["graph_0"]) == 2 * 5 and set(counts["graph_0"].values()) == {1}


def test_pieces_share_one_pool(runners):
    m = Decode().eval()
    _decode(_compiled(m), m, batches=(2,), lengths=(5,))
    pools = {id(r.graph_factory.pool) for r in runners}
    assert len(runners) == 2 and len(pools) == 1 and None not in {
        r.graph_factory.pool for r in runners}


def test_a_user_list_of_splitting_ops(runners):
    """Split at the output projection's addmm instead: attention is then captured (so the
    pieces around it capture per length), the addmm runs eagerly."""
    m = Decode().eval()
    _decode(_compiled(m, splitting_ops=["aten.addmm.default"]), m, batches=(2,),
            lengths=(5, 6))
    counts = _captures(torchair_dist.capture_report())
    # pieces: 0 (view, t) | 1 addmm (q) | 2 (attention ...) | 3 addmm (o) | 4 (relu, add)
    assert sorted(counts) == ["graph_0.piece_0", "graph_0.piece_2", "graph_0.piece_4"], counts
    assert len(counts["graph_0.piece_2"]) == 2  # holds the attention: one capture per length
    assert len(counts["graph_0.piece_0"]) == len(counts["graph_0.piece_4"]) == 1
    assert any(SDPA in str(op) for r in runners for c in r.captures.values()
               for op in c.graph.ops)


def test_a_graph_without_splitting_ops_is_captured_whole(runners):
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    f = _compiled(mlp)
    with torch.no_grad():
        x = torch.randn(3, 8)
        torch.testing.assert_close(f(x), mlp(x))
    assert list(torchair_dist.capture_report()) == ["graph_0"]


def test_piecewise_with_declared_sizes_pads_once_at_the_top(runners):
    m = Decode().eval()
    f = _compiled(m, capture_sizes=[4, 2], pad_to_capture_size=True)
    _decode(f, m, batches=(3, 2, 4, 5), lengths=(5, 6, 7))  # (1 would specialize)
    counts = _captures(torchair_dist.capture_report())
    assert sorted(counts) == ["graph_0.piece_0", "graph_0.piece_2"], counts
    for graph in ("graph_0.piece_0", "graph_0.piece_2"):
        rows = sorted(int(k.split("(")[1].split(",")[0]) for k in counts[graph])
        assert rows == [2, 4] and set(counts[graph].values()) == {1}, counts[graph]
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["padded"] == {"3->4": 3}, summary
    assert summary["eager"] == {"5: above the largest declared size": 3}, summary


def test_outputs_of_the_graph_kept_across_the_next_call_keep_their_values():
    m = Decode().eval()
    f = _compiled(m)
    with torch.no_grad():
        args = _step(2, 5)
        first = f(*args)
        expected = m(*args)
        f(*_step(2, 6))
        torch.testing.assert_close(first, expected, rtol=1e-5, atol=1e-5)
        copies = sum(row.get("output_copies", 0)
                     for row in torchair_dist.capture_summary().values())
        assert copies >= 1


def test_a_malformed_op_name_is_refused():
    cfg = CompilerConfig()
    with pytest.raises(ConfigError, match="namespace.op"):
        cfg.npugraphex_config.splitting_ops = ["scaled_dot_product_attention"]
    cfg.npugraphex_config.splitting_ops = [torch.ops.aten.mm.default, "npu.npu_x"]
    assert cfg.npugraphex_config.splitting_ops.raw == ["aten.mm.default", "npu.npu_x"]


def test_piecewise_options_that_do_not_take_effect_are_named():
    cfg = CompilerConfig()
    cfg.mode = "max-autotune"
    cfg.npugraphex_config.piecewise = True
    found = option_support.ineffective_options(cfg, platform="cpu")
    assert found["npugraphex_config.piecewise"][1] == "only in mode npugraph_ex / reduce-overhead"
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.splitting_ops = ["aten.mm"]
    found = option_support.ineffective_options(cfg, platform="cpu")
    assert found["npugraphex_config.splitting_ops"][1] == \
        "only when npugraphex_config.piecewise is on"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_npu_backend(compiler_config=cfg)
    assert any("npugraphex_config.splitting_ops" in str(w.message) for w in caught)


def test_tiny_llama_static_cache_decode_piecewise_equals_eager(runners):
    from hf_tiny import decode_matches_eager, tiny_llama

    cfg, model = tiny_llama()
    config = CompilerConfig()
    config.mode = "npugraph_ex"
    config.npugraphex_config.piecewise = True
    step = torch.compile(model.forward, backend=get_npu_backend(compiler_config=config))
    decode_matches_eager(cfg, model, step)
    counts = _captures(torchair_dist.capture_report())
    pieces = [g for g in counts if ".piece_" in g]
    assert len(pieces) == 3, counts  # 2 layers: before, between and after the attentions
    for graph in pieces:
        assert list(counts[graph].values()) == [1], (graph, counts[graph])


def test_pieces_compiled_by_inductor_bind_the_sizes_their_shapes_use(record_capture):
    """With inductor's kernels, each piece is compiled by inductor inside the whole graph's
    compile: a piece whose shapes use a size none of its inputs carries (the reshape after
    attention) gets that size input from the split graph, and leaves the tracing context's
    output strides to the graph."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    w, w2 = torch.randn(16, 16), torch.randn(16, 16)

    def f(x, k, v):
        q = (x @ w).view(1, 2, -1, 8)
        return F.scaled_dot_product_attention(q, k, v).reshape(-1, 16) @ w2

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.piecewise = True
    cfg.experimental_config.inductor_kernels = True
    g = torch.compile(f, dynamic=True, backend=torchair_dist.get_npu_backend(compiler_config=cfg))
    for t, kv in ((4, 8), (6, 12), (4, 16)):
        x, k, v = torch.randn(t, 16), torch.randn(1, 2, kv, 8), torch.randn(1, 2, kv, 8)
        torch.testing.assert_close(g(x, k, v), f(x, k, v), rtol=1e-5, atol=1e-5)
