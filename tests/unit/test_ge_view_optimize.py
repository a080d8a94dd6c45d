"""``experimental_config.enable_view_optimize`` (default True, vllm-ascend sets it): in
max-autotune a Transpose of the last two dims feeding a MatMulV2 / BatchMatMulV2 becomes the
matmul's transpose attribute (no copy); off, the Transpose stays. Results equal eager both ways."""
import pytest
import torch

import torchair_dist as ta
import torchair_dist.backends.ge as ge_backend
from torchair_dist.backends.ge.decode import decode_attr


def _compiled_ge_ops(monkeypatch, fn, args, view_optimize):
    models = []
    real = ge_backend.make_runner

    def record(converted, runtime, *rest):
        models.append(converted.model)
        return real(converted, runtime, *rest)

    monkeypatch.setattr(ge_backend, "make_runner", record)
    cfg = ta.CompilerConfig()
    cfg.experimental_config.enable_view_optimize = view_optimize
    torch._dynamo.reset()
    out = torch.compile(fn, backend=ta.get_npu_backend(compiler_config=cfg), fullgraph=True,
                        dynamic=False)(*args)
    torch._dynamo.reset()
    assert len(models) == 1
    return out, list(models[0].graph[0].op)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x, k):
        h = self.down(torch.relu(self.up(x)))
        return h, torch.bmm(x[None], k.transpose(1, 2))  # attention-style q @ k^T


@pytest.mark.parametrize("on", [True, False])
def test_transposed_matmul_operands_are_read_not_copied(monkeypatch, on):
    model = Mlp().eval()
    x, k = torch.randn(4, 8), torch.randn(1, 6, 8)
    with torch.no_grad():
        (h, s), ops = _compiled_ge_ops(monkeypatch, model, (x, k), on)
        ref_h, ref_s = model(x, k)
    torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, ref_s, rtol=1e-5, atol=1e-5)
    transposes = [op for op in ops if op.type == "Transpose"]
    mm = [op for op in ops if op.type in ("MatMulV2", "BatchMatMulV2")]
    assert len(mm) == 3
    flags = [decode_attr(op.attr["transpose_x2" if op.type == "MatMulV2" else "adj_x2"])
             for op in mm]
    if on:
        assert transposes == [] and flags == [True, True, True]
    else:
        assert len(transposes) == 3 and flags == [False, False, False]


def test_a_transpose_also_used_elsewhere_is_kept(monkeypatch):
    def f(a, w):
        wt = w.t()
        return a @ wt, wt * 2

    a, w = torch.randn(3, 4), torch.randn(5, 4)
    (y, z), ops = _compiled_ge_ops(monkeypatch, f, (a, w), True)
    torch.testing.assert_close(y, a @ w.t(), rtol=1e-5, atol=1e-5)
    assert torch.equal(z, w.t() * 2)
    assert [op.type for op in ops].count("Transpose") == 1  # the Mul still reads it
