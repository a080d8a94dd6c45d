"""GE converters for what Hugging Face models lower to: the KV-cache update in place (RefData +
ScatterNdUpdate), sort/histc/floor_divide/max.dim/argmin, grouped matmul, and every SDPA
variant. Numerics against eager through the reference executor; every graph is validated
against the GE operator registry (ports, attrs, dtypes) and the converters' declared GE ops."""
import operator

import pytest
import torch

from test_ge_common import assert_same, convert, ge_roundtrip, ge_validate  # noqa: F401

aten = torch.ops.aten
F = torch.nn.functional


def r(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-5, 6, shape, dtype=dtype)


def _moe_offsets():
    """Cumulative rows per expert for 7 rows (expert 1 gets none)."""
    return torch.tensor([2, 2, 5, 7], dtype=torch.int32)


CASES = {
    "sort": (lambda a: torch.sort(a, -1), lambda: (r(3, 7),)),
    "sort_desc_dim0": (lambda a: torch.sort(a, 0, descending=True), lambda: (r(5, 3),)),
    "sort_stable_int": (lambda a: torch.sort(a, stable=True), lambda: (r(2, 9, dtype=torch.int64),)),
    "sort_bf16": (lambda a: torch.sort(a, -1, descending=True),
                  lambda: (torch.randperm(12).reshape(2, 6).to(torch.bfloat16),)),
    "argsort": (lambda a: torch.argsort(a, -1), lambda: (r(4, 6),)),
    "topk_moe_router": (lambda a: torch.topk(torch.softmax(a, -1), 2, -1), lambda: (r(5, 8),)),
    "histc": (lambda a: torch.histc(a, bins=4, min=0, max=3), lambda: (torch.tensor([0., 1, 1, 3, 2, 3, 3]),)),
    "histc_data_range": (lambda a: torch.histc(a, bins=5), lambda: (r(20),)),
    "floor_divide_int": (lambda a, b: torch.floor_divide(a, b),
                         lambda: (r(6, dtype=torch.int64), r(6, dtype=torch.int64).abs() + 1)),
    "floor_divide_scalar": (lambda a: (a // 3, torch.floor_divide(a, 2)), lambda: (r(6, dtype=torch.int64),)),
    "floor_divide_float": (lambda a, b: a // b, lambda: (r(5), r(5).abs() + 0.5)),
    "max_dim": (lambda a: torch.max(a, -1), lambda: (r(4, 6),)),
    "max_dim_keepdim": (lambda a: torch.max(a, 0, keepdim=True), lambda: (r(4, 6),)),
    "max_dim_int": (lambda a: torch.max(a, 1), lambda: (r(3, 5, dtype=torch.int64),)),
    "max_dim_bf16": (lambda a: torch.max(a, 1), lambda: (torch.randperm(12).reshape(3, 4).to(torch.bfloat16),)),
    "min_dim": (lambda a: (*torch.min(a, -1), *torch.min(a, 0, keepdim=True)), lambda: (r(4, 6),)),
    "min_dim_int": (lambda a: torch.min(a, 1), lambda: (r(3, 5, dtype=torch.int32),)),
    "max_min_all": (lambda a: (a.max(), a.min()), lambda: (r(3, 4),)),
    "argmin": (lambda a: (a.argmin(-1), a.argmin(0, keepdim=True), a.argmin()), lambda: (r(4, 6),)),
    "argmax_int": (lambda a: a.argmax(1), lambda: (r(3, 5, dtype=torch.int64),)),
    "grouped_mm_bf16": (lambda x, w, o: torch._grouped_mm(x, w, offs=o),
                        lambda: (r(7, 8, dtype=torch.bfloat16), r(4, 8, 8, dtype=torch.bfloat16),
                                 _moe_offsets())),
    # functional indexed updates (var is not a graph input: a private copy is updated)
    "index_copy_dim2": (lambda c, p, k: (c.index_copy(2, p, k), c * 1),
                        lambda: (r(1, 2, 6, 4), torch.tensor([3, 4]), r(1, 2, 2, 4))),
    "index_copy_dim0": (lambda c, p, k: c.index_copy(0, p, k),
                        lambda: (r(5, 3), torch.tensor([4, 0]), r(2, 3))),
    "index_copy_bf16": (lambda c, p, k: c.index_copy(1, p, k),
                        lambda: (r(2, 5, 3, dtype=torch.bfloat16), torch.tensor([1]),
                                 r(2, 1, 3, dtype=torch.bfloat16))),
    "index_put_middle": (lambda c, p, v: aten.index_put(c, [None, None, p], v),
                         lambda: (r(1, 2, 6, 4), torch.tensor([5]), r(1, 2, 1, 4))),
    "index_put_negative_broadcast": (lambda c, p, v: aten.index_put(c, [None, p], v),
                                     lambda: (r(2, 5, 3), torch.tensor([-1, 0]), r(3))),
    "index_put_two_dims": (lambda x, i, j, v: torch.index_put(x, (i, j), v),
                           lambda: (r(4, 5, 2), torch.tensor([0, 3]), torch.tensor([1, 4]), r(2, 2))),
    "index_put_accumulate": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
                             lambda: (r(4, 4), torch.tensor([1, 1, 3]), r(3, 4))),
    "index_put_bool_mask": (lambda x, m, v: torch.index_put(x, (m,), v),
                            lambda: (r(4, 3), torch.tensor([True, False, True, False]), r(3))),
    "scatter_src": (lambda x, i, s: torch.scatter(x, 1, i, s),
                    lambda: (r(3, 5), torch.tensor([[0, 4], [1, 2], [3, 0]]), r(3, 4))),
    "scatter_value_dim0": (lambda x, i: torch.scatter(x, 0, i, 2.5),
                           lambda: (r(4, 3), torch.tensor([[3, 0, 1]]))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_eager(name):
    fn, make_inputs = CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    expected = fn(*inputs)
    actual, _, _ = ge_roundtrip(fn, *inputs)
    assert_same(expected, actual, rtol=1e-2 if "bf16" in name else 1e-5,
                atol=1e-2 if "bf16" in name else 1e-5)


def test_grouped_mm_is_one_grouped_matmul():
    _, conv, _ = ge_roundtrip(lambda x, w, o: torch._grouped_mm(x, w, offs=o),
                              r(7, 8, dtype=torch.bfloat16), r(4, 8, 8, dtype=torch.bfloat16),
                              _moe_offsets())
    types = [op.type for op in conv.model.graph[0].op]
    assert types.count("GroupedMatmul") == 1 and "MatMulV2" not in types


def test_transformers_grouped_mm_fallback_op():
    """transformers' own custom op (fp32 experts under torch.compile) lowers to GroupedMatmul."""
    import transformers.integrations.moe  # noqa: F401  (registers torch.ops.transformers.*)

    op = torch.ops.transformers.grouped_mm_fallback
    x, w, offs = r(7, 4), r(4, 4, 3), _moe_offsets()
    actual, conv, _ = ge_roundtrip(lambda a, b, c: op(a, b, c), x, w, offs)
    assert_same(op(x, w, offs), actual)
    assert "GroupedMatmul" in [o.type for o in conv.model.graph[0].op]


# -- the KV-cache update in place --------------------------------------------------------------
class StaticKV(torch.nn.Module):
    """What transformers' StaticLayer.update does, plus attention over the whole cache."""

    def forward(self, keys, values, length, q, k, v):
        pos = torch.arange(k.shape[2]) + length
        length.add_(k.shape[2])
        keys.index_copy_(2, pos, k)
        values.index_copy_(2, pos, v)
        return F.scaled_dot_product_attention(q, keys, values)


def _compiled(fn, captured):
    """``fn`` through the real backend (torch.compile -> AOT -> passes -> GE); the graphs it
    converts are appended to ``captured``."""
    from test_ge_common import aot_compile, recording_conversions

    compiled = aot_compile(fn)

    def run(*args):
        with recording_conversions() as seen:
            out = compiled(*args)
        captured.extend(seen)
        return out

    return run


def test_kv_cache_index_copy_updates_the_users_buffer_in_place():
    torch.manual_seed(0)
    shape = (1, 2, 8, 4)
    keys, values, length = torch.zeros(shape), torch.zeros(shape), torch.tensor(0)
    e_keys, e_values, e_length = keys.clone(), values.clone(), length.clone()
    captured = []
    torch._dynamo.reset()
    prefill = _compiled(StaticKV(), captured)
    decode = _compiled(StaticKV(), captured)  # its own compile: one new token
    ptrs = (keys.data_ptr(), values.data_ptr())
    for i, n in enumerate([3, 1, 1, 1]):  # prefill 3 tokens, then decode steps
        q, k, v = r(1, 2, n, 4), r(1, 2, n, 4), r(1, 2, n, 4)
        expected = StaticKV()(e_keys, e_values, e_length, q, k, v)
        with torch.no_grad():
            out = (prefill if i == 0 else decode)(keys, values, length, q, k, v)
        assert_same(expected, out)
        assert torch.equal(keys, e_keys) and torch.equal(values, e_values), f"step {i}"
        assert int(length) == int(e_length) == 3 + i
        assert (keys.data_ptr(), values.data_ptr()) == ptrs
    assert len(captured) == 2
    conv = captured[-1]
    ops = list(conv.model.graph[0].op)
    ref = {op.name for op in ops if op.type == "RefData"}
    assert len(ref) == 2, "both cache buffers must be RefData inputs"
    scatters = [op for op in ops if op.type == "ScatterNdUpdate"]
    assert len(scatters) == 2
    assert {op.input[0].rpartition(":")[0] for op in scatters} == ref, "var must be the RefData"
    # no full-cache copy: nothing reads the cache besides the in-place update and its readers,
    # and the runner copies back only the length counter, not the caches
    for op in ops:
        if op.type in ("TensorMove", "Identity", "Cast", "BroadcastTo"):
            assert not {i.rpartition(":")[0] for i in op.input} & ref, f"{op.type} copies the cache"
    # three inputs are mutated (both caches and the length); only the length is copied back
    assert len(conv.mutations) == 1, conv.mutations


def test_kv_cache_through_torch_compile_max_autotune():
    """The real backend path (torch.compile -> AOT -> GE): same buffer, right values."""
    from test_ge_common import aot_compile

    torch._dynamo.reset()
    torch.manual_seed(1)
    shape = (2, 2, 6, 4)
    keys, values, length = torch.zeros(shape), torch.zeros(shape), torch.tensor(0)
    e = (keys.clone(), values.clone(), length.clone())
    compiled = aot_compile(StaticKV())
    ptr = keys.data_ptr()
    for n in [2, 1, 1]:
        q, k, v = r(2, 2, n, 4), r(2, 2, n, 4), r(2, 2, n, 4)
        expected = StaticKV()(*e, q, k, v)
        with torch.no_grad():
            assert_same(expected, compiled(keys, values, length, q, k, v))
        assert torch.equal(keys, e[0]) and torch.equal(values, e[1]) and keys.data_ptr() == ptr


def test_cache_read_before_update_is_not_done_in_place():
    """An input whose old value is also read stays a Data: its update works on a copy."""
    def fn(cache, pos, k):
        old = cache.sum()
        cache.index_copy_(0, pos, k)
        return cache * 1, old

    cache, pos, k = r(5, 3), torch.tensor([1]), r(1, 3)
    e_cache = cache.clone()
    expected = fn(e_cache, pos, k)
    captured = []
    with torch.no_grad():
        out = _compiled(fn, captured)(cache, pos, k)
    assert_same(expected, out)
    assert torch.equal(cache, e_cache)
    ops = captured[-1].model.graph[0].op
    assert "RefData" not in [op.type for op in ops] and captured[-1].mutations


# -- SDPA variants (fused GPU/NPU kernels have no CPU kernel and the composite ones decompose
# when traced: each graph is built by hand around the one op, values described on "meta") ------
def _direct(op, args, kwargs, n_outputs):
    """An FX graph calling ``op`` once on placeholders, returning output 0 (and 1 if asked)."""
    g = torch.fx.Graph()
    nodes = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            n = g.placeholder(f"arg{i}")
            n.meta["val"] = a.to("meta")
            nodes.append(n)
        else:
            nodes.append(a)
    call = g.call_function(op, tuple(nodes), kwargs)
    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    val = op(*meta_args, **kwargs)
    call.meta["val"] = val
    if isinstance(val, torch.Tensor):
        g.output((call,))
        return torch.fx.GraphModule(torch.nn.Module(), g), [a for a in args if isinstance(a, torch.Tensor)]
    outs = []
    for i in range(n_outputs):
        item = g.call_function(operator.getitem, (call, i))
        item.meta["val"] = val[i]
        outs.append(item)
    g.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), g), [a for a in args if isinstance(a, torch.Tensor)]


def _run_direct(op, args, kwargs=None, n_outputs=1):
    from torchair_dist.backends.ge import make_runner
    from torchair_dist.cpu.ge_reference import ReferenceRuntime

    gm, inputs = _direct(op, args, kwargs or {}, n_outputs)
    conv = convert(gm, inputs)
    rt = ReferenceRuntime()
    rt.load(conv.model.SerializeToString())
    return list(make_runner(conv, rt)(list(inputs))), conv


def _math(q, k, v, mask=None, causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


def _lse(q, k, scale=None):
    s = (q @ k.transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
    return torch.logsumexp(s, -1)


SDPA = {  # name: (op, extra args after q, k, v, kwargs, reference(q, k, v, extra), outputs)
    "flash_causal": (aten._scaled_dot_product_flash_attention.default, [0.0, True], {},
                     lambda q, k, v: [_math(q, k, v, causal=True)], 1),
    "flash_scale_lse": (aten._scaled_dot_product_flash_attention.default, [], {"scale": 0.2},
                        lambda q, k, v: [_math(q, k, v, scale=0.2), _lse(q, k, 0.2)], 2),
    "efficient_bias": (aten._scaled_dot_product_efficient_attention.default, ["bias", False], {},
                       lambda q, k, v, b: [_math(q, k, v, mask=b)], 1),
    "cudnn_causal": (aten._scaled_dot_product_cudnn_attention.default, [None, False, 0.0, True],
                     {}, lambda q, k, v: [_math(q, k, v, causal=True)], 1),
    "overrideable_bias": (aten._scaled_dot_product_fused_attention_overrideable.default, ["bias"],
                          {}, lambda q, k, v, b: [_math(q, k, v, mask=b)], 1),
    "plain_bool_mask": (aten.scaled_dot_product_attention.default, ["bool"], {},
                        lambda q, k, v, m: [_math(q, k, v, mask=m)], 1),
    "plain_gqa_causal": (aten.scaled_dot_product_attention.default, [None, 0.0, True],
                         {"enable_gqa": True}, None, 1),
}


@pytest.mark.parametrize("name", sorted(SDPA))
def test_sdpa_variant_matches_math(name):
    op, extra, kwargs, reference, n_out = SDPA[name]
    torch.manual_seed(0)
    q, k, v = r(2, 4, 5, 8), r(2, 4, 7, 8), r(2, 4, 7, 8)
    if "gqa" in name:
        k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    masks = {"bias": r(5, 7), "bool": torch.rand(2, 1, 5, 7) > 0.3}
    extra = [masks.get(e, e) if isinstance(e, str) else e for e in extra]
    actual, conv = _run_direct(op, [q, k, v, *extra], kwargs, n_out)
    assert "SoftmaxV2" in [o.type for o in conv.model.graph[0].op]
    if reference is None:  # GQA: kv head i serves query heads 2i, 2i+1
        expected = [_math(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), causal=True)]
    else:
        expected = reference(q, k, v, *[e for e in extra if isinstance(e, torch.Tensor)])
    assert_same(expected, actual)


def test_sdpa_training_outputs_are_refused():
    from torchair_dist.errors import UnsupportedOpError

    q, k, v = r(1, 2, 3, 8), r(1, 2, 3, 8), r(1, 2, 3, 8)
    with pytest.raises(UnsupportedOpError, match="training/debug state"):
        _run_direct(aten._scaled_dot_product_flash_attention.default, [q, k, v], {}, 7)


MASK_CASES = {
    "index_put_mask_scalar_accumulate": (lambda x, m: aten.index_put(x, [m], x.new_ones(()), True),
                                         lambda: (r(4, 3), torch.rand(4, 3) > 0.5)),
    "index_put_mask_middle_row_value": (lambda x, m, v: aten.index_put(x, [None, m], v),
                                        lambda: (r(2, 5, 3), torch.rand(5) > 0.5, r(3))),
}


@pytest.mark.parametrize("name", sorted(MASK_CASES))
def test_boolean_mask_index_put(name):
    fn, make_inputs = MASK_CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    actual, conv, _ = ge_roundtrip(fn, *inputs)
    assert_same(fn(*inputs), actual)
    assert "IndexPutV2" not in [op.type for op in conv.model.graph[0].op]


def test_boolean_mask_with_per_element_values_uses_nonzero():
    fn = lambda x, m, v: aten.index_put(x, [None, m], v)  # noqa: E731
    x, m, v = r(2, 4, 3), torch.tensor([[True, False, True], [False, False, True],
                                        [True, True, False], [False, False, False]]), r(2, 5)
    actual, conv, _ = ge_roundtrip(fn, x, m, v, tracing_mode="real")
    assert_same(fn(x, m, v), actual)
    assert {"NonZero", "IndexPutV2"} <= {op.type for op in conv.model.graph[0].op}


def test_boolean_mask_index_gathers_through_nonzero():
    fn = lambda x, m: (x[m], x[:, m[0]])  # noqa: E731
    x, m = r(4, 4), torch.rand(4, 4) > 0.5
    actual, conv, _ = ge_roundtrip(fn, x, m, tracing_mode="real")
    assert_same(fn(x, m), actual)
    assert "NonZero" in {op.type for op in conv.model.graph[0].op}


def test_bool_gathers_travel_as_int8():
    fn = lambda m, i: (m[1], m[:, -1], torch.index_select(m, 0, i))  # noqa: E731
    m, i = torch.rand(3, 4) > 0.5, torch.tensor([2, 0])
    actual, conv, _ = ge_roundtrip(fn, m, i)
    assert_same(fn(m, i), actual)
    gathers = [op for op in conv.model.graph[0].op if op.type == "GatherV2"]
    assert gathers and all(op.input_desc[0].dtype != conv.model.graph[0].op[0].output_desc[0].dtype
                           for op in gathers)


def _complex_rope(x, angle):
    """Rotary embedding as DeepSeek-V2 writes it: complex multiply, back to real pairs."""
    freqs = torch.polar(torch.ones_like(angle), angle)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2).to(x.dtype)


EXTRA_CASES = {
    "softplus": (lambda a: (F.softplus(a), F.softplus(a, beta=2.0, threshold=1.0)), lambda: (r(4, 5),)),
    "softplus_bf16": (lambda a: F.softplus(a), lambda: (r(6, dtype=torch.bfloat16),)),
    "complex_rope": (_complex_rope, lambda: (r(2, 3, 8), r(3, 4))),
    "repeat": (lambda a: (a.repeat(2, 1), a.repeat(3, 1, 2)), lambda: (r(2, 3),)),
    "repeat_bool": (lambda m: m.repeat(1, 2), lambda: (torch.rand(2, 3) > 0.5,)),
    "safe_softmax": (lambda a: aten._safe_softmax(a, -1),
                     lambda: (torch.tensor([[1.0, 2.0, 0.5], [float("-inf")] * 3]),)),
    "logsumexp": (lambda a: (torch.logsumexp(a, -1), torch.logsumexp(a, [0, 1], keepdim=True)),
                  lambda: (r(3, 4),)),
    "log_sigmoid": (lambda a: F.logsigmoid(a), lambda: (r(3, 4),)),
    "constant_pad": (lambda a: (F.pad(a, (2, 1)), F.pad(a, (0, 0, 1, 0), value=3.0)), lambda: (r(2, 3, 4),)),
    "causal_conv1d_depthwise": (lambda x, w, b: F.conv1d(F.pad(x, (3, 0)), w, b, groups=4),
                                lambda: (r(2, 4, 6), r(4, 1, 4), r(4))),
    "conv1d_padding_stride": (lambda x, w: F.conv1d(x, w, None, stride=2, padding=1),
                              lambda: (r(1, 3, 9), r(5, 3, 3))),
    "scatter_bool_mask": (lambda m, i: m.scatter(-1, i, True), lambda: (torch.zeros(3, 5, dtype=torch.bool),
                                                                        torch.tensor([[0], [4], [2]]))),
    "tril_bool": (lambda m: (m.tril(), m.triu(1)), lambda: (torch.ones(4, 4, dtype=torch.bool),)),
    "clamp_tensor": (lambda a, lo, hi: (torch.clamp(a, lo, hi), torch.clamp(a, min=lo),
                                        torch.clamp_min(a, 0.1), torch.clamp_max(a, hi)),
                     lambda: (r(3, 4), r(4) - 1, r(3, 1) + 1)),
    "eye": (lambda a: (a @ torch.eye(4), torch.eye(2, 3, dtype=torch.int64) + 1), lambda: (r(3, 4),)),
    "solve_triangular": (lambda a, b: (torch.linalg.solve_triangular(a, b, upper=False),
                                       torch.linalg.solve_triangular(a.transpose(-1, -2), b, upper=True,
                                                                     unitriangular=True),
                                       torch.linalg.solve_triangular(a, b.transpose(-1, -2), upper=False,
                                                                     left=False)),
                         lambda: (torch.randn(2, 4, 4).tril() + 4 * torch.eye(4), r(2, 4, 4))),
    "slice_scatter_step": (lambda x, s: (torch.slice_scatter(x, s, 1, 0, None, 3),
                                         torch.slice_scatter(x, s[:, :2], 1, 1, 6, 3)),
                           lambda: (r(2, 7), r(2, 3))),
    "flip": (lambda a: (torch.flip(a, [0]), a.flip(-1, 1)), lambda: (r(3, 4, 2),)),
    "flip_bf16": (lambda a: torch.flip(a, [1]), lambda: (r(2, 5, dtype=torch.bfloat16),)),
    "unfold": (lambda a: (a.unfold(1, 3, 1), a.unfold(-1, 2, 2)), lambda: (r(2, 6, 5),)),
    "roll": (lambda a: (torch.roll(a, 2, 1), torch.roll(a, (1, -2), (0, -1)), torch.roll(a, 3)),
             lambda: (r(3, 5, 2),)),
    "roll_bool": (lambda a: torch.roll(a > 0, 1, 0), lambda: (r(4, 3),)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda: (r(1, 2, 5, 5), r(3, 2, 3, 3), r(3))),
}


@pytest.mark.parametrize("name", sorted(EXTRA_CASES))
def test_extra_converter_matches_eager(name):
    fn, make_inputs = EXTRA_CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    actual, _, _ = ge_roundtrip(fn, *inputs)
    assert_same(fn(*inputs), actual, rtol=1e-2 if "bf16" in name else 1e-5,
                atol=1e-2 if "bf16" in name else 1e-5)


@pytest.mark.parametrize("how", ["index_put", "scatter"])
def test_other_cache_updates_are_in_place_too(how):
    """transformers' fallback ``keys[:, :, pos] = k`` (index_put) and a scatter into an input
    also become RefData + ScatterNdUpdate, with no copy-back."""
    def fn(cache, pos, k):
        if how == "index_put":
            cache[:, pos] = k
        else:
            cache.scatter_(1, pos.expand(cache.shape[0], -1), k)
        return cache.sum(-1)

    torch.manual_seed(0)
    cache, pos, k = r(2, 6), torch.tensor([4, 1]), r(2, 2)
    e_cache = cache.clone()
    expected = fn(e_cache, pos, k)
    captured = []
    ptr = cache.data_ptr()
    with torch.no_grad():
        out = _compiled(fn, captured)(cache, pos, k)
    assert_same(expected, out)
    assert torch.equal(cache, e_cache) and cache.data_ptr() == ptr
    types = [op.type for op in captured[-1].model.graph[0].op]
    assert "RefData" in types and "ScatterNdUpdate" in types and not captured[-1].mutations
