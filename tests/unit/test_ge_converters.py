"""Per-converter numerics: each aten op traced, converted to GE, serialized, parsed back, run by
the reference executor and compared with eager (dtypes and broadcasting included). Every graph
is validated against the GE operator registry and the converters' declared GE ops."""
import pytest
import torch

from test_ge_common import assert_same, ge_roundtrip, ge_validate  # noqa: F401

aten = torch.ops.aten
F = torch.nn.functional


def r(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    return torch.randint(-5, 6, shape, dtype=dtype)


def pos(*shape):
    return torch.rand(*shape) + 0.5


CASES = {
    # arithmetic, broadcasting and type promotion
    "add": (lambda a, b: a + b, lambda: (r(3, 4), r(4))),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2), lambda: (r(3, 4), r(3, 1))),
    "add_scalar_int_tensor": (lambda a: a + 2.5, lambda: (r(3, dtype=torch.int64),)),
    "add_mixed_dtype": (lambda a, b: a + b, lambda: (r(2, 3, dtype=torch.float16), r(2, 3))),
    "sub": (lambda a, b: a - b, lambda: (r(2, 3, 4), r(3, 1))),
    "rsub": (lambda a: (1 - a, aten.rsub.Scalar(a, 2.0, 3)), lambda: (r(5),)),
    "mul_bf16": (lambda a, b: a * b, lambda: (r(4, 4, dtype=torch.bfloat16), r(4, dtype=torch.bfloat16))),
    "mul_int": (lambda a, b: a * b, lambda: (r(4, dtype=torch.int32), r(4, dtype=torch.int32))),
    "div": (lambda a, b: a / b, lambda: (r(3, 4), pos(4))),
    "div_int": (lambda a, b: a / b, lambda: (r(6, dtype=torch.int64), r(6, dtype=torch.int64).abs() + 1)),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"),
                  lambda: (r(6, dtype=torch.int64), r(6, dtype=torch.int64).abs() + 1)),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda: (r(6), pos(6))),
    "pow_scalar": (lambda a: a ** 2, lambda: (r(3, 3),)),
    "pow_tensor": (lambda a, b: torch.pow(a, b), lambda: (pos(3), r(3))),
    "maximum_minimum": (lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), lambda: (r(3, 4), r(4))),
    "neg_abs": (lambda a: (-a, a.abs()), lambda: (r(5),)),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), lambda: (r(10),)),
    # comparisons and logic
    "eq_ne": (lambda a, b: (a == b, a != b), lambda: (r(4, dtype=torch.int64), r(4, dtype=torch.int64))),
    "gt_ge_lt_le": (lambda a, b: (a > b, a >= b, a < b, a <= b), lambda: (r(3, 4), r(4))),
    "cmp_scalar": (lambda a: (a > 0, a == 1), lambda: (r(5, dtype=torch.int32),)),
    "cmp_promote": (lambda a, b: a < b, lambda: (r(5, dtype=torch.int64), r(5))),
    "logical": (lambda a, b: (a & b, a | b, ~a, torch.logical_not(a)),
                lambda: (r(6, dtype=torch.bool), r(6, dtype=torch.bool))),
    "bitwise_int": (lambda a, b: (a & b, ~a), lambda: (r(6, dtype=torch.int32), r(6, dtype=torch.int32))),
    # unary math and activations
    "rsqrt_sqrt": (lambda a: (torch.rsqrt(a), torch.sqrt(a)), lambda: (pos(4, 4),)),
    "exp_log": (lambda a: (torch.exp(a), torch.log(a)), lambda: (pos(4),)),
    "sigmoid_silu": (lambda a: (torch.sigmoid(a), F.silu(a)), lambda: (r(4, 5),)),
    "gelu": (lambda a: (F.gelu(a), F.gelu(a, approximate="tanh")), lambda: (r(4, 5),)),
    "relu_tanh": (lambda a: (torch.relu(a), torch.tanh(a)), lambda: (r(7),)),
    "cos_sin": (lambda a: (torch.cos(a), torch.sin(a)), lambda: (r(7),)),
    "reciprocal_erf": (lambda a: (torch.reciprocal(a), torch.erf(a)), lambda: (pos(5),)),
    "rsqrt_int": (lambda a: torch.rsqrt(a), lambda: (r(4, dtype=torch.int64).abs() + 1,)),
    "silu_fp16": (lambda a: F.silu(a), lambda: (r(8, dtype=torch.float16),)),
    # reductions, softmax, scans
    "mean_dim": (lambda a: a.mean(-1, keepdim=True), lambda: (r(3, 4),)),
    "mean_all": (lambda a: a.mean(), lambda: (r(3, 4),)),
    "sum_dims": (lambda a: a.sum([0, 2]), lambda: (r(2, 3, 4),)),
    "sum_all_int": (lambda a: a.sum(), lambda: (r(3, 4, dtype=torch.int32),)),
    "sum_dtype": (lambda a: a.sum(-1, dtype=torch.float64), lambda: (r(3, 4),)),
    "amax": (lambda a: torch.amax(a, 1), lambda: (r(3, 4),)),
    "softmax": (lambda a: torch.softmax(a, -1), lambda: (r(2, 3, 8),)),
    "softmax_dim0": (lambda a: torch.softmax(a, 0), lambda: (r(4, 5),)),
    "log_softmax": (lambda a: torch.log_softmax(a, 1), lambda: (r(2, 6),)),
    "cumsum": (lambda a: torch.cumsum(a, 1), lambda: (r(3, 5),)),
    "cumsum_int": (lambda a: torch.cumsum(a, 0), lambda: (r(6, dtype=torch.int64),)),
    "argmax": (lambda a: (a.argmax(-1), a.argmax(0, keepdim=True)), lambda: (r(4, 6),)),
    "argmax_all": (lambda a: a.argmax(), lambda: (r(4, 6),)),
    "topk": (lambda a: torch.topk(a, 3, -1), lambda: (r(4, 10),)),
    "topk_smallest": (lambda a: torch.topk(a, 2, 0, largest=False), lambda: (r(5, 3),)),
    # matmuls and norms
    "mm": (lambda a, b: a @ b, lambda: (r(3, 4), r(4, 5))),
    "addmm": (lambda b, a, w: torch.addmm(b, a, w), lambda: (r(5), r(3, 4), r(4, 5))),
    "addmm_2d_bias_scaled": (lambda b, a, w: torch.addmm(b, a, w, beta=0.5, alpha=2.0),
                             lambda: (r(3, 5), r(3, 4), r(4, 5))),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: (r(2, 3, 4), r(2, 4, 5))),
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: (r(2, 3, 4), r(6, 4), r(6))),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), lambda: (r(2, 3, 8), r(8), r(8))),
    "layer_norm_no_affine": (lambda x: F.layer_norm(x, (3, 4)), lambda: (r(2, 3, 4),)),
    "native_layer_norm_stats": (lambda x, w, b: aten.native_layer_norm(x, [4], w, b, 1e-5),
                                lambda: (r(3, 4), r(4), r(4))),
    # gathers and indexing
    "embedding": (lambda w, i: F.embedding(i, w), lambda: (r(10, 4), torch.randint(0, 10, (2, 3)))),
    "index_select": (lambda x, i: torch.index_select(x, 1, i), lambda: (r(3, 5), torch.tensor([4, 0, 2]))),
    "gather": (lambda x, i: torch.gather(x, 1, i), lambda: (r(3, 5), torch.randint(0, 5, (3, 2)))),
    "index_tensor": (lambda x, i: x[i], lambda: (r(5, 3), torch.tensor([0, 4, 4]))),
    "index_tensor_middle": (lambda x, i: x[:, i], lambda: (r(2, 5, 3), torch.tensor([[1, 2], [0, 4]]))),
    "index_two": (lambda x, i, j: x[i, j], lambda: (r(4, 5), torch.tensor([0, 3]), torch.tensor([1, 4]))),
    # concatenation, slicing, splitting
    "cat": (lambda a, b: torch.cat([a, b], -1), lambda: (r(2, 3), r(2, 5))),
    "cat_promote": (lambda a, b: torch.cat([a, b]), lambda: (r(2, 3, dtype=torch.float16), r(1, 3))),
    "slice": (lambda a: (a[:, 1:3], a[1:], a[::2], a[:, -2:]), lambda: (r(5, 4),)),
    "slice_neg_end": (lambda a: a[:, :-1], lambda: (r(3, 4),)),
    "select": (lambda a: (a[1], a[:, -1], a[..., 0]), lambda: (r(3, 4, 2),)),
    "split": (lambda a: torch.split(a, 2, 1), lambda: (r(3, 5),)),
    "split_sizes": (lambda a: torch.split(a, [1, 3], 0), lambda: (r(4, 2),)),
    "chunk": (lambda a: a.chunk(2, -1), lambda: (r(2, 8),)),
    "unbind": (lambda a: a.unbind(1), lambda: (r(2, 3),)),
    # views and layout
    "view": (lambda a: a.view(2, -1), lambda: (r(2, 3, 4),)),
    "reshape_noncontig": (lambda a: a.t().reshape(-1), lambda: (r(3, 4),)),
    "unsqueeze_squeeze": (lambda a: (a.unsqueeze(0), a.unsqueeze(-1), a.unsqueeze(1).squeeze(1)),
                          lambda: (r(3, 4),)),
    "squeeze_all": (lambda a: (a.squeeze(), a.squeeze(0)), lambda: (r(1, 3, 1),)),
    "permute": (lambda a: a.permute(2, 0, 1).contiguous(), lambda: (r(2, 3, 4),)),
    "transpose": (lambda a: a.transpose(0, 2) + 0, lambda: (r(2, 3, 4),)),
    "t": (lambda a: a.t() * 1, lambda: (r(2, 3),)),
    "expand": (lambda a: a.expand(3, -1, 4) + 0, lambda: (r(1, 2, 1),)),
    "expand_new_dims": (lambda a: a.expand(2, 3, 4) * 1, lambda: (r(4),)),
    # casts, selection, factories
    "to_dtype": (lambda a: (a.to(torch.float16), a.to(torch.int32), a.to(torch.bool)), lambda: (r(4) * 3,)),
    "to_same": (lambda a: a.to(torch.float32) + 1, lambda: (r(4),)),
    "float_of_int": (lambda a: a.float() / 2, lambda: (r(4, dtype=torch.int64),)),
    "where": (lambda c, a, b: torch.where(c, a, b), lambda: (r(3, 4, dtype=torch.bool), r(4), r(3, 1))),
    "where_scalar": (lambda c, a: torch.where(c, a, 0.0), lambda: (r(3, dtype=torch.bool), r(3))),
    "masked_fill": (lambda a, m: a.masked_fill(m, -1e9), lambda: (r(2, 4), r(4, dtype=torch.bool))),
    "masked_fill_tensor": (lambda a, m, v: a.masked_fill(m, v), lambda: (r(2, 4), r(2, 4, dtype=torch.bool), r(()))),
    "full_zeros_ones": (lambda a: (torch.full((2, 3), 7.0) + a, torch.zeros(2, 3, dtype=torch.int64),
                                   torch.ones(3) * a), lambda: (r(2, 3),)),
    "like_factories": (lambda a: (torch.zeros_like(a), torch.ones_like(a), torch.full_like(a, 3)),
                       lambda: (r(2, 3, dtype=torch.int32),)),
    "new_factories": (lambda a: (a.new_zeros(2, 2), a.new_ones(3), a.new_full((2,), 5.0)), lambda: (r(4),)),
    "arange": (lambda a: (torch.arange(5) + a.sum().long(), torch.arange(2, 10, 3), torch.arange(0.0, 1.0, 0.25)),
               lambda: (r(2, dtype=torch.int64),)),
    "triu_tril": (lambda a: (torch.triu(a, 1), torch.tril(a)), lambda: (r(4, 4),)),
    "causal_mask": (lambda x: torch.full((4, 4), float("-inf")).triu(1) + x, lambda: (r(4, 4),)),
    "clone": (lambda a: a.clone() + 1, lambda: (r(3),)),
    # attention (CPU flash kernel as it appears after AOT), decomposed
    "sdpa_float_mask": (lambda q, k, v, m: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=m)[0], lambda: (r(2, 4, 5, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), r(5, 6))),
    "sdpa_inf_mask_scale": (lambda q, k, v, m: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=m, scale=0.3)[0],
        lambda: (r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8),
                 torch.full((4, 4), float("-inf")).triu(1))),
    "sdpa_causal_lse": (lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, is_causal=True), lambda: (r(2, 2, 5, 4), r(2, 2, 5, 4), r(2, 2, 5, 4))),
    "sdpa_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                 lambda: (r(1, 4, 3, 8), r(1, 2, 3, 8), r(1, 2, 3, 8))),
    # functional scatters (in-place updates of views after AOT functionalization)
    "slice_scatter": (lambda x, s: (torch.slice_scatter(x, s, 1, 1, 3), torch.slice_scatter(x, s, 1, -2)),
                      lambda: (r(3, 4), r(3, 2))),
    "select_scatter": (lambda x, s: (torch.select_scatter(x, s, 0, 1), torch.select_scatter(x, s, 0, -1)),
                       lambda: (r(3, 4), r(4))),
    "index_put": (lambda x, i, v: (torch.index_put(x, (i,), v),
                                   aten.index_put(x, [None, i], v.new_ones(()), True)),
                  lambda: (r(4, 4), torch.tensor([1, 1, 3]), r(3, 4))),
    "scalar_tensor": (lambda a: torch.where(a > 0, a, torch.scalar_tensor(2.0)), lambda: (r(4),)),
    # index_add: the MoE combine (top-k expert outputs weighted and summed back per token)
    "index_add_moe_combine": (lambda y, t, w: torch.zeros(5, 4).index_add(0, t, y * w[:, None]),
                              lambda: (r(8, 4), torch.tensor([0, 3, 1, 3, 4, 0, 0, 2]), r(8))),
    "index_add_dim1_alpha": (lambda x, i, s: (torch.index_add(x, 1, i, s, alpha=0.5),
                                              torch.index_add(x, -1, i.int(), s, alpha=-2)),
                             lambda: (r(3, 5), torch.tensor([4, 0, 4]), r(3, 3))),
    "index_add_int": (lambda x, i, s: torch.index_add(x, 0, i, s, alpha=3),
                      lambda: (r(4, 2, dtype=torch.int64), torch.tensor([1, 1, 2]), r(3, 2, dtype=torch.int64))),
    "index_add_keeps_input": (lambda x, i, s: (x.index_add(0, i, s), x * 2),
                              lambda: (r(3, 2), torch.tensor([2, 0]), r(2, 2))),
    "index_add_bf16": (lambda x, i, s: x.index_add(0, i, s),
                       lambda: (r(6, 4, dtype=torch.bfloat16), torch.tensor([5, 1, 2]),
                                r(3, 4, dtype=torch.bfloat16))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_eager(name):
    fn, make_inputs = CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    expected = fn(*inputs)
    actual, _, _ = ge_roundtrip(fn, *inputs)
    assert_same(expected, actual, rtol=2e-3 if name.endswith(("bf16", "fp16")) else 1e-5)


def test_copy_writes_back_the_mutated_input():
    def fn(buf, x):
        buf.copy_(x * 2)
        return buf + 1

    buf, x = torch.zeros(3), torch.randn(3)
    ref_buf = buf.clone()
    expected = fn(ref_buf, x)
    from test_ge_common import aot_compile, recording_conversions

    torch._dynamo.reset()
    compiled = aot_compile(fn)
    with torch.no_grad(), recording_conversions() as converted:
        out = compiled(buf, x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(buf, ref_buf)
    captured = {"conv": converted[0]}
    assert captured["conv"].mutations, "the input mutation was not routed to a graph output"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_moe_combine_index_add_through_aot(monkeypatch, dynamic):
    """``out.index_add_`` in user code (functionalized to aten.index_add by AOT) becomes
    InplaceIndexAdd and matches eager, with symbolic token counts too."""
    from test_ge_common import aot_compile, record_ge_types

    types = record_ge_types(monkeypatch)

    def combine(x, idx, y, w):
        out = torch.zeros_like(x)
        out.index_add_(0, idx, y * w.unsqueeze(-1))
        return x + out

    torch._dynamo.reset()
    compiled = aot_compile(combine, dynamic=dynamic)
    for tokens, sent in [(6, 9), (7, 11)] if dynamic else [(6, 9)]:
        torch.manual_seed(tokens)
        args = (r(tokens, 4), torch.randint(0, tokens, (sent,)), r(sent, 4), r(sent))
        with torch.no_grad():
            assert_same(combine(*args), compiled(*args))
    assert "InplaceIndexAdd" in types
