"""The input-inplace pass: a mutated input (a KV cache) is written in place in the ACL modes."""
import pytest
import torch

import torchair_dist
from torchair_dist.pipeline import route as compiler
from torchair_dist.passes.graph_info import op_targets


class Cache(torch.nn.Module):
    """transformers' StaticCache update in miniature: index_copy_ into a buffer, then attend."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(1, 2, 16, 4))

    def forward(self, k, pos):
        self.keys.index_copy_(2, pos, k)
        return self.keys.sum(dim=2) * 2


def _compile(module, disable=False):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.debug.aclgraph.disable_reinplace_input_mutated_ops_pass = disable
    return torch.compile(module, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


@pytest.mark.parametrize("disable", [False, True])
def test_cache_update_is_in_place_and_equals_eager(disable):
    eager, compiled_mod = Cache(), Cache()
    fn = _compile(compiled_mod, disable)
    ptr = compiled_mod.keys.data_ptr()
    with compiler.record_graphs() as graphs:
        for step in range(5):
            k, pos = torch.randn(1, 2, 1, 4), torch.tensor([step])
            assert torch.equal(fn(k, pos), eager(k, pos))
            assert torch.equal(compiled_mod.keys, eager.keys)
    assert compiled_mod.keys.data_ptr() == ptr
    ops = op_targets(graphs[0].gm)
    if disable:
        assert "aten.index_copy.default" in ops and "aten.copy_.default" in ops
    else:
        assert "aten.index_copy_.default" in ops
        assert "aten.index_copy.default" not in ops and "aten.copy_.default" not in ops
    assert graphs[0].mutated_input_indices  # still a mutated input for the capture rules


def test_old_value_read_after_the_update_keeps_the_copy():
    class ReadsOld(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.zeros(4, 3))

        def forward(self, x, idx):
            new = self.buf.index_copy(0, idx, x)
            out = self.buf * 1.0 + new  # reads the old value after the update is computed
            self.buf.copy_(new)
            return out

    eager, mod = ReadsOld(), ReadsOld()
    fn = _compile(mod)
    with compiler.record_graphs() as graphs:
        for i in range(3):
            x, idx = torch.randn(1, 3), torch.tensor([i])
            assert torch.equal(fn(x, idx), eager(x, idx))
    assert torch.equal(mod.buf, eager.buf)
    assert "aten.index_copy_.default" not in op_targets(graphs[0].gm)


def test_hf_static_cache_decode_step_writes_the_cache_in_place():
    pytest.importorskip("transformers")
    from hf_tiny import decode_matches_eager, tiny_llama

    cfg, model = tiny_llama()
    with compiler.record_graphs() as graphs:
        decode_matches_eager(cfg, model, _compile(model.forward))
    ops = op_targets(graphs[0].gm)
    assert ops.count("aten.index_copy_.default") == 2 * cfg.num_hidden_layers, ops
    assert "aten.index_copy.default" not in ops and "aten.copy_.default" not in ops
