"""Padding proven safe or refused (issue 45): ``pad_to_capture_size`` pads only a graph whose
batch rows are proven independent; a graph where rows mix is refused with the op and the
user's source line; ``pad_unchecked_ops`` accepts named ops visibly; the batch inputs are the
inputs carrying the batch symbol, not any input whose dim 0 has the same size."""
import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchair_dist
from torchair_dist.base.torch_support import torch_at_least
from torchair_dist import CompilerConfig, get_npu_backend

pytestmark = pytest.mark.usefixtures("record_capture")

SIZES = [4, 8]


def _compiled(fn, unchecked=None, dynamic=True):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.capture_sizes = SIZES
    cfg.npugraphex_config.pad_to_capture_size = True
    if unchecked is not None:
        cfg.npugraphex_config.pad_unchecked_ops = unchecked
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), dynamic=dynamic)


def _weight(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


W = _weight(16, 16)


def centered(x):
    return (x - x.mean(0)) @ W


def softmax_over_batch(x):
    return torch.softmax(x, 0)


def merged(x):
    return x.reshape(-1) * 2


def unknown(x):
    return torch.flip(x, [1]) + 1


@pytest.mark.parametrize("fn, op, code", [
    (centered, "aten.mean.dim", "return (x - x.mean(0)) @ W"),
    (softmax_over_batch, "aten._softmax.default", "return torch.softmax(x, 0)"),
    (merged, "output 0", "return x.reshape(-1) * 2: its dim 0 holds the batch rows flattened"),
    (unknown, "aten.flip.default", "return torch.flip(x, [1]) + 1")])
def test_rows_mixing_over_the_batch_dim_is_refused_naming_the_op_and_line(fn, op, code):
    f = _compiled(fn)
    with pytest.raises(Exception) as err:
        f(torch.randn(3, 16))
    text = str(err.value)
    assert "PaddingUnsafeError" in text and op in text, text
    assert f'{os.path.basename(__file__)}", line' in text and code in text, text


@pytest.mark.parametrize("fn, op, overload", [(centered, "aten.mean", "aten.mean.dim"), (
    softmax_over_batch, "aten._softmax", "aten._softmax.default")])
def test_the_escape_hatch_pads_anyway_and_says_so(fn, op, overload):
    """What the refusal prevents: padded, these programs differ from eager (numbers in the
    report); ``pad_unchecked_ops`` makes the user's call, named in a warning and the summary."""
    torch._dynamo.reset()
    f = _compiled(fn, unchecked=[op])
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning, match=f"pad_unchecked_ops: {op}"):
        out = f(x)
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["padded"] == {"3->4": 1}
    assert [u.split(" at ")[0] for u in summary["pad_unchecked"]] == [overload]
    assert (out - fn(x)).abs().max() > 0.05, "padding rows took part in the reduction"


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.o = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)

    def forward(self, x):                               # x: (batch, length, 32)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, 32))


class _Pointwise(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(_weight(16))

    def forward(self, x):
        return torch.where(x > 0, x.sin() * self.scale, x.exp() - 1) + 0.5 * x.clamp(-1, 1)


class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.norm = torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 50)

    def forward(self, ids):                             # ids: (batch, length)
        h = self.norm(self.emb(ids))
        return self.head(h).log_softmax(-1).argmax(-1), h.sum(1)


def _case(name):
    torch.manual_seed(0)
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
        return m.eval(), torch.randn(3, 16)
    if name == "pointwise":
        return _Pointwise().eval(), torch.randn(3, 16)
    if name == "attention":
        return _Attention().eval(), torch.randn(3, 5, 32)
    if name == "layer_norm":
        m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.ReLU())
        return m.eval(), torch.randn(3, 16)
    return _Embed().eval(), torch.randint(0, 50, (3, 6))


@pytest.mark.parametrize("name", ["mlp", "pointwise", "attention", "layer_norm", "embedding"])
def test_programs_with_independent_rows_are_padded_and_equal_eager(name):
    torch._dynamo.reset()
    model, x = _case(name)
    f = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing unchecked
        out, ref = f(x), model(x)
    for o, r in zip(out if isinstance(out, tuple) else [out], ref if isinstance(ref, tuple)
                    else [ref]):
        assert o.shape == r.shape
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["padded"] == {"3->4": 1} and "pad_unchecked" not in summary


def test_an_input_of_another_symbol_is_not_padded_whatever_its_size():
    """``table``'s dim 0 equals the batch when traced but is its own symbol: it is not a batch
    input (its rows are reduced over, which is fine), and a later call with another table
    size is served right."""
    def f(x, table):
        return x @ W, table.sum(0)

    torch._dynamo.reset()
    x, table = torch.randn(8, 16), torch.randn(8, 5)
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(table, 0)
    g = _compiled(f, dynamic=None)
    for rows, n in ((8, 8), (3, 8), (3, 6)):
        x, table = torch.randn(rows, 16), torch.randn(n, 5)
        out, ref = g(x, table), f(x, table)
        for o, r in zip(out, ref):
            assert o.shape == r.shape
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
    padded = [g.get("padded") for g in torchair_dist.capture_summary().values()]
    assert sum(sum(p.values()) for p in padded if p) == 2, padded


def test_a_batch_symbol_that_also_sizes_another_dim_ignores_the_sizes_with_a_warning():
    """Traced with x (8, 8): Dynamo gives both dims one symbol; padding dim 0 alone would
    break the graph (before: the first call failed in the size-4 capture)."""
    def f(x, table):
        return x @ table

    torch._dynamo.reset()
    g = _compiled(f)
    x, table = torch.randn(8, 8), torch.randn(8, 5)
    with pytest.warns(UserWarning, match="also sizes dim 1 of input"):
        torch.testing.assert_close(g(x, table), f(x, table), rtol=1e-5, atol=1e-5)
    x = torch.randn(3, 8)  # another graph, where the batch is its own symbol: padded
    torch.testing.assert_close(g(x, table), f(x, table), rtol=1e-5, atol=1e-5)


def test_rows_written_into_a_buffer_by_padding_rows_are_restored():
    """A per-slot cache written at rows [0, B): the padded call's extra row is put back."""
    def step(x, cache):
        cache[: x.shape[0]] = x.sin() + 1  # a padding row would write 1
        return cache[: x.shape[0]] * 2

    torch._dynamo.reset()
    f = _compiled(step)
    cache = torch.randn(8, 16)
    ref = cache.clone()
    for n in (8, 3, 5):
        x = torch.randn(n, 16)
        torch.testing.assert_close(f(x, cache), step(x, ref), rtol=0, atol=0)
        torch.testing.assert_close(cache, ref, rtol=0, atol=0)
    padded = [g.get("padded") for g in torchair_dist.capture_summary().values()]
    assert {"3->4": 1, "5->8": 1} in padded, padded


def _moe(tokens):
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
    sys.path.insert(0, bench)
    try:
        from workloads import MoEBlock
    finally:
        sys.path.remove(bench)
    return MoEBlock(0, 1, tokens=tokens, hidden=32, ffn=32, shared_ffn=32, experts_per_rank=2,
                    capacity_factor=1.0).eval()


def test_an_moe_block_with_capacity_is_refused(one_rank_group):
    """One rule decides: a cumsum along the batch dim is refused (it mixes rows). Were it let
    through (rows come last, so a prefix sum over them stays causal), the dispatch that
    follows still writes each token to a data-dependent slot of the expert buffer, and the
    capacity is counted over all rows: refused there too."""
    torch._dynamo.reset()
    block = _moe(8)
    with pytest.raises(Exception, match=r"aten\.cumsum\.default at .*workloads\.py.*cumsum"):
        _compiled(block)(torch.randn(8, 32))
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"aten\.index_add_?\.default.*data-dependent"):
        _compiled(block, unchecked=["aten.cumsum"])(torch.randn(8, 32))


def _all_reduce_rows(x):
    import torch.distributed as dist

    y = x @ W
    dist.all_reduce(y)  # element by element across ranks: rows stay rows
    return y.relu()


def _all_to_all_rows(x):
    import torch.distributed as dist

    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)  # dim 0 is split between ranks: rows move
    return out * 2


def _all_gather_rows(x):
    import torch.distributed as dist

    out = torch.empty((dist.get_world_size() * x.shape[0], x.shape[1]))
    dist.all_gather_into_tensor(out, x)  # rank r's rows at r * B
    return out.sum(-1)


def test_collectives_that_keep_rows_pad_and_those_that_move_them_are_refused(one_rank_group):
    torch._dynamo.reset()
    x = torch.randn(3, 16)
    torch.testing.assert_close(_compiled(_all_reduce_rows)(x), _all_reduce_rows(x),
                               rtol=1e-5, atol=1e-5)
    assert torchair_dist.capture_summary()["graph_0"]["padded"] == {"3->4": 1}
    for fn, why in ((_all_to_all_rows, r"all_to_all.*split sizes that depend on the batch"),
                    (_all_gather_rows, r"aten.sum.*an all_gather along the batch dim")):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=why):
            _compiled(fn)(x)


@pytest.mark.skipif(not torch_at_least(2, 13), reason=(
    "torch 2.11's Dynamo cannot trace transformers' SDPA call under backed_size_oblivious "
    "('Could not guard on data-dependent expression Eq(3, u0)'); the serving loop runs on "
    "torch >= 2.13"))
def test_a_llama_decode_step_on_a_slot_cache_is_proven_and_padded_like_eager(one_rank_group,
                                                                              tmp_path):
    """transformers' Llama decode (the serving loop's step) is accepted: what it does across
    rows is precise (its cache rows [0, B) written and read back, the TP embedding's boolean
    masked fill); a batch of 3 padded to 4 gives eager's tokens and leaves the cache's other
    rows as eager does (the padding row's K/V write is undone)."""
    launch = os.path.join(os.path.dirname(__file__), "..", "..", "launch")
    sys.path.insert(0, launch)
    try:
        import hf_decode
        import serving
    finally:
        sys.path.remove(launch)
    torch._dynamo.reset()
    model = hf_decode.load_tp(hf_decode.save_tiny("llama", str(tmp_path), num_hidden_layers=1))
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    caches, last = [], []
    for _ in range(2):
        cache = serving.SlotKVCache(model, 8, 12)
        for buf in cache.keys + cache.values:  # other requests' rows (what padding must keep)
            buf[3:] = torch.randn(buf[3:].shape, generator=torch.Generator().manual_seed(3))
        last = [serving.prefill(model, cache, row, p) for row, p in enumerate(prompts)]
        caches.append(cache)
    tokens, positions = serving.step_inputs(3, 3, last, [len(p) for p in prompts], "cpu")
    eager = serving.make_variant("eager", model, SIZES)
    ours = serving.make_variant("npugraph_ex", model, SIZES)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = eager(tokens, positions, caches[0])
        got = ours(tokens, positions, caches[1])
    assert got.tolist() == want.tolist()
    padded = [g.get("padded") for g in torchair_dist.capture_summary().values()]
    assert {"3->4": 1} in padded, padded
    for a, b in zip(caches[0].keys + caches[0].values, caches[1].keys + caches[1].values):
        torch.testing.assert_close(b[:3], a[:3], rtol=1e-5, atol=1e-5)
        assert torch.equal(b[3:], a[3:]), "rows the eager step does not write"
