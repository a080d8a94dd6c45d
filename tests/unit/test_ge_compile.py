"""The GE backend end to end: torch.compile -> AOT -> GE -> reference executor, against eager.
Also: dynamic shapes, input mutation write-back, run_eagerly, unsupported-op errors, dumps."""
import glob
import math
import os
import re

import pytest
import torch
import torch.nn.functional as F

from test_ge_common import BUILT_GRAPHS, aot_compile, ge_validate, stand_in_config  # noqa: F401

from torchair_dist.errors import UnsupportedOpError


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(torch.nn.Module):
    """A Llama-style decoder block: RMSNorm, rotary attention with a causal mask, SiLU MLP."""

    def __init__(self, dim=32, heads=4, ffn=64, vocab=50):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.up = torch.nn.Linear(dim, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, dim, bias=False)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        b, s = ids.shape
        x = self.embed(ids)
        pos = torch.arange(s, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        freqs = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)
        cos, sin = freqs.cos(), freqs.sin()
        q, k, v = self.qkv(self.norm1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        mask = torch.full((s, s), float("-inf")).triu(1)
        att = torch.softmax(scores + mask, dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, s, -1))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        x = x + self.down(F.silu(gate) * up)
        logits = self.head(x)
        return logits, logits.argmax(-1), torch.topk(logits[:, -1], 3).indices


def test_transformer_block_matches_eager():
    torch.manual_seed(0)
    model = Block().eval()
    ids = torch.randint(0, 50, (2, 6))
    graphs = []
    with torch.no_grad():
        expected = model(ids)
        actual = aot_compile(model, graphs=graphs)(ids)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    assert len(graphs) == 1


def test_dynamic_shapes_use_symbol_inputs():
    def fn(x, y):
        h = x.view(x.shape[0] * 2, -1) + 1
        return h.sum(-1), torch.cat([x, y]).softmax(-1), x.new_zeros(x.shape[0], 3)

    graphs = []
    compiled = aot_compile(fn, graphs=graphs, dynamic=True)
    for n in (4, 6, 10):
        x, y = torch.randn(n, 8), torch.randn(3, 8)
        for e, a in zip(fn(x, y), compiled(x, y)):
            torch.testing.assert_close(a, e)
    assert len(graphs) == 1, "one graph should serve every size"
    from test_ge_common import convert
    placeholders = [n for n in graphs[0].graph.nodes if n.op == "placeholder"]
    vals = [n.meta["val"] for n in placeholders]
    conv = convert(graphs[0], vals)
    assert "sym" in conv.inputs
    data = [op for op in conv.model.graph[0].op if op.type == "Data"]
    assert any(-1 in op.output_desc[0].shape.dim for op in data)
    assert any(op.output_desc[0].device_type == "CPU" and not op.output_desc[0].shape.dim
               for op in data)
    from torchair_dist.backends.ge.dump import to_py

    scope = {}
    exec(to_py(conv), scope)
    assert scope["model"] == conv.model  # the py dump replays symbol inputs exactly too


def test_mutated_input_is_written_back():
    class Cache(torch.nn.Module):
        def forward(self, cache, x):
            cache.mul_(0.5).add_(x)
            return cache.sum()

    cache_e, cache_c, x = torch.ones(4), torch.ones(4), torch.randn(4)
    expected = Cache()(cache_e, x)
    with torch.no_grad():
        actual = aot_compile(Cache())(cache_c, x)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(cache_c, cache_e)


@pytest.mark.parametrize("ref_data", [False, True], ids=["copy-back", "ref-data"])
def test_enable_ref_data_writes_mutated_inputs_in_the_graph(ref_data, monkeypatch):
    """``experimental_config.enable_ref_data``: an input the graph writes back is a RefData
    updated by Assign inside the GE graph (after every op that reads the old value), not an
    extra output the runner copies back; the user's buffer is the one written."""
    from torchair_dist.backends.ge import runtime as ge_runtime

    def fn(buf, x):
        before = buf.sum()               # reads the old value: must run before the Assign
        scaled = buf.view(2, 2) * 3.0    # a reader through a view
        buf.mul_(0.5).add_(x)
        return before, scaled, buf * 2

    models = []
    real_create = ge_runtime.create_runtime

    def spy(**kw):
        rt = real_create(**kw)
        real_load = rt.load

        def load(raw):
            from torchair_dist.backends.ge.proto import ModelDef
            model = ModelDef()
            model.ParseFromString(raw)
            models.append(model)
            return real_load(raw)
        rt.load = load
        return rt

    monkeypatch.setattr(ge_runtime, "create_runtime", spy)
    cfg = stand_in_config(experimental_config__enable_ref_data=ref_data)
    buf_e, buf_c, x = torch.arange(4.0), torch.arange(4.0), torch.randn(4)
    expected = fn(buf_e, x)
    ptr = buf_c.data_ptr()
    with torch.no_grad():
        actual = aot_compile(fn, cfg)(buf_c, x)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    torch.testing.assert_close(buf_c, buf_e)
    assert buf_c.data_ptr() == ptr
    (model,) = models
    ops = {op.name: op for op in model.graph[0].op}
    types = [op.type for op in ops.values()]
    net_output = next(op for op in ops.values() if op.type == "NetOutput")
    if not ref_data:
        assert "Assign" not in types and "RefData" not in types
        assert len([i for i in net_output.input if not i.endswith(":-1")]) == 4  # + write-back
        return
    assert types.count("RefData") == 1 and types.count("Assign") == 1
    assert len([i for i in net_output.input if not i.endswith(":-1")]) == 3  # no write-back
    (assign,) = [op for op in ops.values() if op.type == "Assign"]
    assert f"{assign.name}:-1" in net_output.input      # kept alive
    ref = next(op.name for op in ops.values() if op.type == "RefData")
    controls = {i[:-3] for i in assign.input if i.endswith(":-1")}
    readers = {op.name for op in ops.values() if any(i.startswith(ref + ":") for i in op.input)
               and op.name != assign.name}
    assert readers, "the old value has readers"
    # every reader of the old value reaches the Assign through a data or control edge
    preds = {}
    for op in ops.values():
        preds[op.name] = {i.rsplit(":", 1)[0] for i in op.input}
    before, stack = set(), [assign.name]
    while stack:
        for p in preds[stack.pop()]:
            if p not in before:
                before.add(p)
                stack.append(p)
    assert readers <= before, readers - before
    assert controls, "no control edge orders the readers before the Assign"


def test_run_eagerly_runs_the_fx_graph(monkeypatch):
    from torchair_dist.backends.ge import fx2ge

    def boom(*a, **k):
        raise AssertionError("GE conversion must not run with debug.run_eagerly")

    monkeypatch.setattr(fx2ge, "convert_graph", boom)
    import torchair_dist.backends.ge as ge
    monkeypatch.setattr(ge, "convert_graph", boom)
    cfg = stand_in_config(debug__run_eagerly=True)
    x = torch.randn(3)
    torch.testing.assert_close(aot_compile(lambda t: torch.sort(t).values * 2, cfg)(x),
                               torch.sort(x).values * 2)


def _unsupported(x):
    y = torch.special.bessel_y0(x)  # no GE converter, no decomposition
    z = torch.special.airy_ai(x + y)   # neither
    return z + 1


def test_unsupported_ops_are_listed_at_once_with_source_lines():
    with pytest.raises(Exception) as info:
        aot_compile(_unsupported)(torch.randn(5))
    err = info.value
    while not isinstance(err, UnsupportedOpError):
        nxt = getattr(err, "inner_exception", None) or err.__cause__
        if nxt is None:
            break
        err = nxt
    assert isinstance(err, UnsupportedOpError), repr(info.value)
    text = str(err)
    assert "aten.special_bessel_y0.default" in text and "aten.special_airy_ai.default" in text
    assert "2 op(s)" in text
    assert "test_ge_compile.py" in text and "torch.special.bessel_y0(x)" in text
    assert "torch.special.airy_ai(x + y)" in text
    assert "%special_bessel_y0" in text and "special function" in text  # the reason is given
    assert "register_fx_node_ge_converter" in text


@pytest.mark.parametrize("kind", ["txt", "pbtxt", "py"])
def test_graph_dumps(kind, tmp_path):
    cfg = stand_in_config(debug__graph_dump__type=kind, debug__graph_dump__path=str(tmp_path))

    def fn(x, w):
        return torch.relu(x @ w).sum(-1)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(aot_compile(fn, cfg)(x, w), fn(x, w))
    files = glob.glob(str(tmp_path / f"graph_*_rank_0_pid_{os.getpid()}_ts_*.{kind}"))
    assert len(files) == 1, os.listdir(tmp_path)
    assert re.search(r"_ts_\d{20}\." + kind + "$", files[0])
    text = open(files[0]).read()
    if kind == "txt":
        from google.protobuf import text_format
        from torchair_dist.backends.ge.proto import ModelDef

        model = text_format.Parse(text, ModelDef())
        assert [op.type for op in model.graph[0].op if op.type == "MatMulV2"]
    elif kind == "pbtxt":
        assert 'op: "MatMulV2"' in text and 'key: "[o]y"' in text and "node {" in text
    else:
        assert "## FX Code:" in text and "aten.mm.default" in text
        scope = {}
        exec(compile(text, files[0], "exec"), scope)
        from torchair_dist.backends.ge.registry_check import validate

        validate(scope["model"])
        BUILT_GRAPHS.append(scope["model"])


def test_py_dump_replays_the_same_model():
    from torch.fx.experimental.proxy_tensor import make_fx
    from test_ge_common import convert
    from torchair_dist.backends.ge.dump import to_py

    def fn(x, m):
        return torch.where(m, x.softmax(-1), 0.0).cumsum(0), x.chunk(2, 1)

    inputs = (torch.randn(4, 6), torch.rand(4, 6) > 0.5)
    conv = convert(make_fx(fn, tracing_mode="fake")(*inputs), inputs)
    scope = {}
    exec(to_py(conv), scope)
    assert scope["model"] == conv.model


def test_pbtxt_control_inputs_use_caret():
    from torchair_dist.backends.ge.builder import GraphBuilder
    from torchair_dist.backends.ge.dump import to_pbtxt
    from torchair_dist.backends.ge.fx2ge import ConvertedGraph

    b = GraphBuilder("g")
    x = b.data(torch.float32, (2,))
    (y,) = b.op("Relu", [("x", x)], {}, [("y", (torch.float32, (2,)))])
    b.net_output([y], control=[x])
    text = to_pbtxt(ConvertedGraph(b.model(), ["tensor"], [("ge", 0)], [], ""))
    assert 'input: "^arg0"' in text and 'input: "Relu:0"' in text


def test_hugging_face_llama_matches_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    compiled = aot_compile(model, dynamic=True)
    with torch.no_grad():
        for seq in (5, 9):
            ids = torch.randint(0, 128, (2, seq))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits,
                                       rtol=1e-4, atol=1e-4)
