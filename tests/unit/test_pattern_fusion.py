"""experimental_config.pattern_fusion_pass: residual add + RMSNorm -> npu_add_rms_norm.

The fused op exists only in torch_npu, so the matcher is tested on CPU with the platform's
fused op replaced by a custom op whose numerics are LlamaRMSNorm's; without that stand-in a CPU
compile fuses nothing and names a non-default value of the option in the one warning.
"""
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist.pipeline import route as compiler
from torchair_dist.passes import pattern_fusion
from torchair_dist.passes.graph_info import op_targets

transformers = pytest.importorskip("transformers")
from transformers.models.llama.modeling_llama import LlamaRMSNorm  # noqa: E402


@torch.library.custom_op("torchair_dist_test::add_rms_norm_stand_in", mutates_args=())
def add_rms_norm_stand_in(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                          epsilon: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """npu_add_rms_norm's contract (y, rstd, x1 + x2) computed as LlamaRMSNorm does."""
    x = x1 + x2
    xf = x.to(torch.float32)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return gamma * (xf * rstd).to(x.dtype), rstd, x


@add_rms_norm_stand_in.register_fake
def _(x1, x2, gamma, epsilon):
    rstd = x1.new_empty((*x1.shape[:-1], 1), dtype=torch.float32)
    return torch.empty_like(x1), rstd, torch.empty_like(x1)


STAND_IN = torch.ops.torchair_dist_test.add_rms_norm_stand_in.default
FUSED = str(STAND_IN)


@pytest.fixture
def on_npu(monkeypatch):
    """The pipeline runs on the NPU platform (the stage table's platform key) and the pass
    sees its fused op (the stand-in)."""
    from torchair_dist.pipeline import stages

    monkeypatch.setattr(stages, "current_platform", lambda: "npu")
    monkeypatch.setattr(pattern_fusion, "fused_add_rms_norm", lambda: STAND_IN)


class Block(torch.nn.Module):
    """Two residual adds, each followed by an RMSNorm; the residual stream is used again."""

    def __init__(self, dtype=torch.float32, hidden=16):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(hidden, hidden).to(dtype)
        self.fc2 = torch.nn.Linear(hidden, hidden).to(dtype)
        self.norm1 = LlamaRMSNorm(hidden, eps=1e-6).to(dtype)
        self.norm2 = LlamaRMSNorm(hidden, eps=1e-5).to(dtype)
        with torch.no_grad():
            self.norm1.weight.uniform_(0.5, 1.5)
            self.norm2.weight.uniform_(0.5, 1.5)

    def forward(self, h, residual):
        residual = residual + self.fc1(h)
        h = self.norm1(residual)
        residual = residual + self.fc2(h)
        return self.norm2(residual), residual


def _compile(module, mode="npugraph_ex", fusion=None):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    if fusion is not None:
        cfg.experimental_config.pattern_fusion_pass = fusion
    return torch.compile(module, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


def _close(a, b, tol):
    return all(torch.allclose(x.float(), y.float(), atol=tol, rtol=0) for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_add_rms_norm_is_fused_and_equals_eager(on_npu, dtype):
    block = Block(dtype).eval()
    compiled = _compile(block)
    with torch.no_grad(), compiler.record_graphs() as graphs:
        for _ in range(3):
            h, r = torch.randn(2, 3, 16, dtype=dtype), torch.randn(2, 3, 16, dtype=dtype)
            assert _close(compiled(h, r), block(h, r), 1e-6)
    ops = op_targets(graphs[0].gm)
    assert ops.count(FUSED) == 2
    for gone in ("aten.rsqrt.default", "aten.pow.Tensor_Scalar", "aten.mean.dim"):
        assert gone not in ops


def test_option_off_fuses_nothing(on_npu):
    block = Block().eval()
    compiled = _compile(block, fusion=False)
    h, r = torch.randn(2, 16), torch.randn(2, 16)
    with torch.no_grad(), compiler.record_graphs() as graphs:
        assert _close(compiled(h, r), block(h, r), 0)
    ops = op_targets(graphs[0].gm)
    assert FUSED not in ops and ops.count("aten.rsqrt.default") == 2


class Unfusable(torch.nn.Module):
    """RMSNorm-like subgraphs the pass must leave alone."""

    def __init__(self, case):
        super().__init__()
        self.case = case
        self.norm = LlamaRMSNorm(16, eps=1e-6)

    def forward(self, a, b):
        if self.case == "broadcast_add":  # operands of different shapes
            return self.norm(a + b[0])
        if self.case == "variance_used":  # an intermediate leaves the pattern
            x = a + b
            var = x.pow(2).mean(-1, keepdim=True)
            return self.norm.weight * (x * torch.rsqrt(var + 1e-6)), var
        if self.case == "no_add":  # not a residual add
            return self.norm(a * b)
        raise AssertionError(self.case)


@pytest.mark.parametrize("case", ["broadcast_add", "variance_used", "no_add"])
def test_other_subgraphs_are_left_alone(on_npu, case):
    module = Unfusable(case).eval()
    compiled = _compile(module)
    a, b = torch.randn(2, 16), torch.randn(2, 16)
    with torch.no_grad(), compiler.record_graphs() as graphs:
        out, ref = compiled(a, b), module(a, b)
    out, ref = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    assert _close(out, ref, 0)
    ops = op_targets(graphs[0].gm)
    assert FUSED not in ops and "aten.rsqrt.default" in ops


def test_tiny_llama_forward_fuses_every_residual_norm(on_npu):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 6))
    compiled = _compile(model)
    with torch.no_grad(), compiler.record_graphs() as graphs:
        out = compiled(input_ids=ids, use_cache=False).logits
        ref = model(input_ids=ids, use_cache=False).logits
    assert torch.allclose(out, ref, atol=1e-5, rtol=0)
    # layer 0's input norm reads the embeddings (no residual add): 2 per layer, minus 1, plus
    # the final norm after the last residual add
    assert op_targets(graphs[0].gm).count(FUSED) == 2 * cfg.num_hidden_layers


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_cpu_compile_takes_the_option_without_a_warning(mode):
    """pattern_fusion_pass gates the user's register_replacement patterns on every platform
    (as in TorchAir), so on CPU it takes effect and no warning names it; the built-in
    add + RMSNorm fusion stays NPU-only (the pipeline table's pattern_fusion row)."""
    from torchair_dist.pipeline import stages as pipeline

    assert pipeline.STAGES["pattern_fusion"].platform_set() == frozenset({"npu"})
    block = Block().eval()
    h, r = torch.randn(2, 16), torch.randn(2, 16)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = _compile(block, mode=mode, fusion=False)(h, r)
    assert _close(out, block(h, r), 1e-6)
    named = [str(w.message) for w in caught if "do not take effect" in str(w.message)]
    assert not [n for n in named if "pattern_fusion_pass" in n], named


def test_cpu_default_compile_fuses_nothing():
    block = Block().eval()
    with torch.no_grad(), compiler.record_graphs() as graphs:
        _compile(block)(torch.randn(2, 16), torch.randn(2, 16))
    ops = op_targets(graphs[0].gm)
    assert FUSED not in ops and ops.count("aten.rsqrt.default") == 2
