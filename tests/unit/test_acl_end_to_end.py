"""Single-process end to end in both ACL modes: compiled output equals eager exactly."""
import glob
import os

import numpy
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torchair_dist import CompilerConfig, get_npu_backend

MODES = ["npugraph_ex", "reduce-overhead"]


class MLP(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A small pre-norm transformer block (causal attention + MLP)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = MLP(d, 4 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def _backend(mode, **options):
    cfg = CompilerConfig()
    cfg.mode = mode
    for path, value in options.items():
        cfg.option(path).set(value)
    return get_npu_backend(compiler_config=cfg)


@pytest.mark.parametrize("emulate", [False, True], ids=["direct", "emulated-capture"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model,shape", [(MLP, (4, 16)), (Block, (2, 8, 32))],
                         ids=["mlp", "transformer-block"])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiled_equals_eager(model, shape, mode, emulate, monkeypatch):
    if emulate:
        monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "emulate")
    torch.manual_seed(0)
    m = model().eval()
    f = torch.compile(m, backend=_backend(mode), fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(*shape)
            assert torch.equal(f(x), m(x))


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_run_eagerly_runs_the_fx_graph_not_the_backend(mode, monkeypatch):
    import torchair_dist.pipeline.route as compiler_mod

    def no_backend(mode):
        raise AssertionError(f"run_eagerly must not reach the {mode} backend")

    monkeypatch.setattr(compiler_mod, "backend_for_mode", no_backend)
    m = MLP().eval()
    f = torch.compile(m, backend=_backend(mode, **{"debug.run_eagerly": True}))
    x = torch.randn(3, 16)
    with torch.no_grad():
        assert torch.equal(f(x), m(x))


@pytest.mark.parametrize("kind", ["py", "txt"])
def test_graph_dump_per_rank_and_pid(kind, tmp_path):
    f = torch.compile(lambda x: torch.sin(x) + 1, fullgraph=True, backend=_backend(
        "npugraph_ex", **{"debug.graph_dump.type": kind, "debug.graph_dump.path": str(tmp_path)}))
    f(torch.randn(3))
    files = glob.glob(str(tmp_path / f"graph_*_rank_0_pid_{os.getpid()}_ts_*.{kind}"))
    assert len(files) == 1
    text = open(files[0]).read()
    assert "aten.sin" in text
    if kind == "py":
        assert "def forward(self" in text  # the code of the forward the runner calls


def test_ge_dump_format_is_refused_in_acl_mode(tmp_path):
    f = torch.compile(lambda x: x + 1, backend=_backend(
        "npugraph_ex", **{"debug.graph_dump.type": "pbtxt"}))
    with pytest.raises(Exception, match="pbtxt.*GE format"):
        f(torch.ones(2))


@pytest.mark.parametrize("kind", ["npy", "pt"])
def test_data_dump_saves_each_node(kind, tmp_path):
    only_mul = lambda node: "mul" in node.name  # noqa: E731
    f = torch.compile(lambda x: (x + 1) * 2 - 3, backend=_backend("npugraph_ex", **{
        "debug.data_dump.type": kind, "debug.data_dump.path": str(tmp_path),
        "debug.data_dump.filter": only_mul}))
    x = torch.arange(4.0)
    assert torch.equal(f(x), (x + 1) * 2 - 3)
    files = sorted(glob.glob(str(tmp_path / "rank_0" / "graph_*" / f"*.{kind}")))
    assert len(files) == 1 and "mul" in os.path.basename(files[0])
    saved = numpy.load(files[0]) if kind == "npy" else torch.load(files[0]).numpy()
    assert (saved == ((x + 1) * 2).numpy()).all()


def test_custom_passes_run_in_order():
    order = []

    def pre(graph):
        order.append(("pre", sum(1 for n in graph.nodes if "view" in str(n.target))))

    def post(graph):
        order.append(("post", sum(1 for n in graph.nodes if "view" in str(n.target))))

    f = torch.compile(lambda x: x.view(2, 2) * 2, backend=_backend(
        "npugraph_ex", **{"post_grad_custom_pre_pass": pre, "post_grad_custom_post_pass": post}))
    assert torch.equal(f(torch.ones(4)), torch.full((2, 2), 2.0))
    assert [o[0] for o in order] == ["pre", "post"]
    assert order[0][1] == 1 and order[1][1] == 0  # view -> reshape ran between them


def test_training_graph_compiles_forward_and_backward():
    m = MLP()
    f = torch.compile(m, backend=_backend("npugraph_ex"))
    x = torch.randn(4, 16)
    f(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    for g, p in zip(grads, m.parameters()):
        assert torch.allclose(g, p.grad, atol=1e-6)
