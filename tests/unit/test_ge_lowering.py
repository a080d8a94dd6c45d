"""The GE lowering: ops without a converter are decomposed with PyTorch's tables before
conversion, the fast paths are not; runtime asserts on values are kept as GE Asserts."""
import pytest
import torch
import torch.nn.functional as F

from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.backends.ge import lowering
from torchair_dist.base.torch_support import torch_at_least


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                         fullgraph=True)


def test_one_hot_router_keeps_its_runtime_assert(monkeypatch):
    """one_hot's class-range check (``_assert_async``) is a GE Assert: kept, not dropped; a
    class out of range raises as eager does (it returned a wrong mask before)."""
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")

    def route(scores):
        expert = scores.argmax(-1)
        mask = F.one_hot(expert, num_classes=4)
        return torch.cumsum(mask, 0) * mask

    scores = torch.randn(10, 4)
    before = lowering.STATS["asserts_dropped"]
    compiled = _compile(route)
    out = compiled(scores)
    assert torch.equal(out, route(scores))
    assert lowering.STATS["asserts_dropped"] == before


@pytest.mark.skipif(not torch_at_least(2, 13), reason="torch 2.11's AOT graph folds the check "
                    "to _assert_scalar(True) (it substitutes the size the check asserts): no "
                    "backend behind AOT sees it there")
def test_data_dependent_check_raises_as_eager():
    """``torch._check`` on a data-dependent size is enforced by a GE Assert (before: a (0, 1)
    result where eager raises)."""
    torch._dynamo.config.capture_dynamic_output_shape_ops = True

    def f(x):
        z = x.nonzero()
        torch._check(z.size(0) == 4)
        return z * 2

    try:
        compiled = _compile(f)
        good = torch.tensor([1, 1, 1, 1])
        assert torch.equal(compiled(good), f(good))
        bad = torch.tensor([1, 0, 1, 0])
        with pytest.raises(RuntimeError):
            f(bad)
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            compiled(bad)
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False


def test_unconverted_op_is_decomposed_but_fast_paths_are_kept(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")
    from torchair_dist.backends.ge import fx2ge

    seen = []
    real = fx2ge._convert

    def spy(gm, *args, **kwargs):
        seen.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(fx2ge, "_convert", spy)

    def fn(m, v, bias, x):
        # addmv has no converter (decomposed into mv -> mul/sum ...); mm and layer_norm do
        return torch.addmv(bias, m, v), F.layer_norm(x @ m.t(), (4,))

    args = (torch.randn(4, 3), torch.randn(3), torch.randn(4), torch.randn(2, 3))
    got = _compile(fn)(*args)
    for g, e in zip(got, fn(*args)):
        torch.testing.assert_close(g, e)
    (targets,) = seen
    assert "aten.addmv.default" not in targets  # decomposed before conversion
    assert "aten.mm.default" in targets and "aten.native_layer_norm.default" in targets
    assert lowering.STATS["decomposed"] > 0


def test_refusal_reason_per_family():
    assert "depends on the input values" in lowering.refusal_reason(
        torch.ops.aten.sym_storage_offset.default)
    from torchair_dist.backends.ge.converters import lookup

    assert lookup(torch.ops.aten._fft_r2c.default) is not None  # FFTs convert: no refusal
    assert "no GE converter" in lowering.refusal_reason(torch.ops.aten.add.Tensor)
