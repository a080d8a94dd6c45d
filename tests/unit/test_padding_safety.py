"""Padding proven safe or refused (issue 45): ``pad_to_capture_size`` pads only a graph whose
batch rows are proven independent; a graph where rows mix is refused with the op and the
user's source line; ``pad_unchecked_ops`` accepts named ops visibly; the batch inputs are the
inputs carrying the batch symbol, not any input whose dim 0 has the same size."""
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchair_dist
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


@pytest.mark.parametrize("fn, op, code", [
    (centered, "aten.mean.dim", "return (x - x.mean(0)) @ W"),
    (softmax_over_batch, "aten._softmax.default", "return torch.softmax(x, 0)")])
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
