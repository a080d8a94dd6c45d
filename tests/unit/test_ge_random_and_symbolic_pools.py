"""Issue 44's refusals of PyTorch's inductor programs under dynamic shapes, now lowered in
max-autotune: random ops as GE's stateless generators (keyed per call from torch's generator),
avg_pool3d_backward as AvgPool3DGrad, and prims.broadcast_in_dim of a symbolic input (the
reshape target read from the run-time shape, not written as -1s). Each compiled with
``dynamic=True`` and compared with eager; the GE graph holds the expected ops."""
import pytest
import torch
import torch.nn.functional as F

from test_ge_common import assert_same, record_ge_types, stand_in_config  # noqa: F401

aten = torch.ops.aten


def compiled(fn, dynamic=True):
    from torchair_dist import CompilerConfig, get_npu_backend

    torch._dynamo.reset()
    return torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                         fullgraph=True, dynamic=dynamic)


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- random ops -----------------------------------------------------------------------------
def test_rand_like_repeats_under_a_seed_and_differs_between_calls(monkeypatch):
    types = record_ge_types(monkeypatch)
    c = compiled(lambda a: (torch.rand_like(a), torch.rand_like(a)))
    x = torch.ones(1024)
    torch.manual_seed(1234)
    a0, a1 = c(x)[0].clone(), c(x)[0].clone()
    torch.manual_seed(1234)
    b0, b1 = c(x)[0].clone(), c(x)[0].clone()
    assert torch.equal(a0, b0) and torch.equal(a1, b1)  # same seed, same numbers
    assert not torch.equal(a0, a1)  # another call, other numbers
    p, q = c(x)
    assert not torch.equal(p, q)  # two ops of one graph draw apart
    assert ((p >= 0) & (p < 1)).all() and abs(p.mean().item() - 0.5) < 0.05
    assert types.count("StatelessRandomUniformV2") >= 2
    # a new length reuses the symbolic graph and draws that many numbers
    assert c(torch.ones(7))[0].shape == (7,)


def test_randn_statistics_and_dtype():
    c = compiled(lambda x: torch.randn(x.shape[0], 64, dtype=torch.float64) + x[:, None])
    y = c(torch.zeros(256))
    assert y.dtype == torch.float64 and y.shape == (256, 64)
    assert abs(y.mean().item()) < 0.05 and abs(y.std().item() - 1) < 0.05


def test_randint_ranges_and_dtypes(monkeypatch):
    types = record_ge_types(monkeypatch)

    def fn(x):
        return (torch.randint(10, [1024]), torch.randint(-4, 7, [1024], dtype=torch.int32),
                torch.randint_like(x, 2**50))

    c = compiled(fn)
    torch.manual_seed(5)
    a, b, e = c(torch.zeros(40, 40))
    torch.manual_seed(5)
    assert all(torch.equal(u, v) for u, v in zip((a, b, e), c(torch.zeros(40, 40))))
    assert (a.dtype, b.dtype, e.dtype) == (torch.int64, torch.int32, torch.float32)
    assert (a.min().item(), a.max().item()) == (0, 9) and (b.min().item(), b.max().item()) == (-4, 6)
    assert 2**40 < e.max().item() < 2**50 and e.min().item() >= 0
    assert "StatelessRandomUniformIntV2" in types


def test_dropout_keeps_about_half_and_scales():
    y = compiled(lambda x: F.dropout(x, 0.5, True))(torch.ones(4000))
    kept = (y != 0).sum().item()
    assert 1700 < kept < 2300 and torch.equal(y[y != 0], torch.full((kept,), 2.0))


def test_bernoulli_of_zero_one_probabilities_is_exact():
    p = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    assert torch.equal(compiled(torch.bernoulli)(p), p)


def test_fallback_random_asks_for_eager_numbers_and_is_refused():
    from torch._inductor import config as inductor_config

    with inductor_config.patch(fallback_random=True):
        with pytest.raises(Exception, match="fallback_random=True"):
            compiled(lambda x: torch.rand_like(x) + x)(torch.ones(3))


# -- pooling gradients and broadcasts on symbolic sizes -------------------------------------
@pytest.mark.parametrize("args", [([2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None),
                                  ([3, 3, 3], [1, 1, 1], [1, 1, 1], False, False, None),
                                  ([3, 2, 3], [2, 1, 2], [1, 0, 1], True, True, 5)])
def test_avg_pool3d_backward(args, monkeypatch):
    types = record_ge_types(monkeypatch)
    k, s, p, ceil, include, div = args
    x = _r(2, 3, 9, 8, 7, seed=1)
    g = _r(*aten.avg_pool3d(x, k, s, p, ceil, include, div).shape, seed=2)

    def fn(g, x):
        return aten.avg_pool3d_backward(g, x, k, s, p, ceil, include, div)

    assert_same(fn(g, x), compiled(fn)(g, x), rtol=1e-5, atol=1e-5)
    assert "AvgPool3DGrad" in types


def test_std_and_var_keep_dims_on_symbolic_sizes(monkeypatch):
    """var/std reduce then broadcast_in_dim back over symbolic dims: the Reshape target is
    a Pack of run-time dims, never a Const holding several -1s."""
    types = record_ge_types(monkeypatch)

    def fn(x):
        return (torch.var(x, True), torch.var(x, -1, False), torch.std(x, [0, 1], True),
                torch.std(x, -2, True, keepdim=True))

    c = compiled(fn)
    for shape in [(2, 4, 4, 8), (3, 5, 2, 6)]:
        x = _r(*shape, seed=3)
        assert_same(fn(x), c(x), rtol=1e-5, atol=1e-5)
    assert "Pack" in types


def test_randn_with_dtype_device_and_generator_none():
    """randn(..., dtype, device) reaches the backend as prims.normal, randn(generator=None)
    as randn.generator: both lower; their draws have randn's statistics."""
    def fn(v):
        return (torch.randn((12, v.shape[-1], 64), device=v.device, dtype=v.dtype) + 1,
                torch.randn([64, 64], generator=None, device=v.device))

    a, b = compiled(fn)(torch.zeros(3, 16))
    assert a.shape == (12, 16, 64) and b.shape == (64, 64)
    assert abs(a.mean().item() - 1) < 0.05 and abs(b.std().item() - 1) < 0.05


def test_rand_with_a_generator_is_refused_by_name():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(Exception, match="Generator"):
        compiled(lambda x: torch.rand(3, generator=g) + x, dynamic=False)(torch.ones(3))


# -- recurrence polynomials of a symbolic degree, copy_strided ------------------------------
@pytest.mark.parametrize("op", [torch.special.hermite_polynomial_h,
                                torch.special.hermite_polynomial_he,
                                torch.special.laguerre_polynomial_l,
                                torch.special.legendre_polynomial_p])
def test_recurrence_polynomials_of_a_symbolic_degree(op, monkeypatch):
    types = record_ge_types(monkeypatch)
    x = _r(8, 8, seed=4)
    x[0, :3] = torch.tensor([1.0, -1.0, 0.0])  # torch's special cases at |x| = 1 and x = 0

    def fn(x, n):
        return op(x, n)

    c = compiled(fn)
    for n in (2, 5, 9, 3):
        assert_same(fn(x, n), c(x, n), rtol=1e-4, atol=1e-4)
    assert "Assert" in types  # a symbolic degree is bounded at run time
    with pytest.raises(Exception, match="degree n above 32"):
        c(x, 40)


def test_copy_strided_keeps_values_and_eager_strides():
    def fn(i0, i1):
        return torch.lerp(i1, i0.transpose(-2, -3), 70000)

    a, b = torch.rand(10, 3, 10), torch.rand(3, 10, 10)
    out = compiled(fn)(a, b)
    assert_same(fn(a, b), out, rtol=1e-5, atol=1e-2)
    assert out.stride() == fn(a, b).stride()


def test_unfold_of_a_symbolic_dim(monkeypatch):
    types = record_ge_types(monkeypatch)

    def fn(x):
        return x.unfold(1, 3, 2) * 2, x.unfold(0, 2, 1).permute(0, 2, 1, 3)

    c = compiled(fn)
    for length in (7, 8, 11):
        x = _r(4, length, 3, seed=length)
        assert_same(fn(x), c(x), rtol=0, atol=0)
    assert "Range" in types and "GatherV2" in types


def test_embedding_bag_byte_unpack_with_symbolic_rows_and_width(monkeypatch):
    types = record_ge_types(monkeypatch)
    fn = torch.ops.quantized.embedding_bag_byte_unpack
    c = compiled(lambda p: fn(p))
    for m, n in ((32, 64), (5, 24)):
        g = torch.Generator().manual_seed(m)
        data = torch.randint(0, 255, (m, n), dtype=torch.uint8, generator=g)
        scale_bias = torch.randn(m, 2, generator=g).view(torch.uint8)
        packed = torch.cat([data, scale_bias], dim=-1)
        assert_same(fn(packed), c(packed), rtol=1.3e-6, atol=1e-5)
    assert "Bitcast" in types


@pytest.mark.parametrize("kernel, out, shape", [((3, 3), (2, 2), (1, 4, 16, 16)),
                                                ((6, 5), (3, 3), (2, 4, 36, 36)),
                                                ((1, 1), (16, 16), (2, 4, 16, 16)),
                                                ((2, 3), (5, 1), (3, 2, 11, 9))])
def test_fractional_max_pool2d_from_given_samples(kernel, out, shape, monkeypatch):
    """Values and indices exactly eager's (window starts from the samples in x's dtype, the
    first strictly greater cell of each window)."""
    types = record_ge_types(monkeypatch)

    def fn(x, samples):
        return aten.fractional_max_pool2d(x, kernel, out, samples)

    x = _r(*shape, seed=7)
    samples = torch.rand(shape[0], shape[1], 2, generator=torch.Generator().manual_seed(8))
    assert_same(fn(x, samples), compiled(fn)(x, samples), rtol=0, atol=0)
    assert "GatherElements" in types


def test_transposed_conv1d_on_symbolic_sizes_fixes_them_by_guards():
    def fn(x, w, b):
        return aten.convolution(x, w, b, [4], [0], [1], True, [0], 1)

    c = compiled(fn)
    w, b = _r(32, 16, 8, seed=9), _r(16, seed=10)
    for shape in ((2, 32, 90), (3, 32, 50)):  # the second size recompiles
        x = _r(*shape, seed=11)
        assert_same(fn(x, w, b), c(x, w, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("args", [([1, 1, 1], [0, 0, 0], [1, 1, 1], 1, [True, True, True]),
                                  ([2, 1, 2], [1, 0, 1], [1, 2, 1], 2, [True, True, False])])
def test_convolution_backward_3d(args, monkeypatch):
    types = record_ge_types(monkeypatch)
    stride, padding, dilation, groups, mask = args
    x, w = _r(2, 4, 7, 6, 5, seed=12), _r(4, 4 // groups, 3, 2, 3, seed=13)
    g = _r(*aten.convolution(x, w, None, stride, padding, dilation, False, [0], groups).shape,
           seed=14)

    def fn(g, x, w):
        return aten.convolution_backward(g, x, w, [4], stride, padding, dilation, False,
                                         [0, 0, 0], groups, mask)

    assert_same(fn(g, x, w), compiled(fn)(g, x, w), rtol=1e-4, atol=1e-4)
    assert "Conv3DBackpropInput" in types


@pytest.mark.parametrize("pool, shape", [(torch.nn.AdaptiveAvgPool1d(0), (1, 2)),
                                         (torch.nn.AdaptiveAvgPool2d(0), (1, 2, 3)),
                                         (torch.nn.AdaptiveAvgPool2d((0, 2)), (2, 3, 4, 5)),
                                         (torch.nn.AdaptiveAvgPool2d((2, 3)), (2, 5, 7, 9))])
def test_adaptive_avg_pool_with_an_empty_output(pool, shape):
    x = _r(*shape, seed=15)
    out = compiled(pool)(x)
    assert out.shape == pool(x).shape
    assert_same(pool(x), out)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_of_a_mask_among_other_indices(accumulate, monkeypatch):
    types = record_ge_types(monkeypatch)

    def fn(a, b, c, d):
        a = a.clone()
        aten.index_put_(a, [None, b, c], d, accumulate)
        return a

    c = compiled(fn)
    for shape, b, m, v in (((1, 2, 3), [0, 1], [True, True, False], ()),
                           ((2, 3, 4), [2, 0], [False, True, False, True], (2,))):
        args = (_r(*shape, seed=16), torch.tensor(b), torch.tensor(m), _r(*v, seed=17) if v
                else torch.tensor(0.5))
        assert_same(fn(*args), c(*args))
    assert "NonZero" in types and "IndexPutV2" in types


@pytest.mark.parametrize("x_shape, size, fmt", [((2,), (1, 3, 2, 3), torch.contiguous_format),
                                                ((100,), (1, 3, 2, 3), torch.channels_last),
                                                ((1, 3, 2, 3, 1), (1, 3, 2, 3, 1),
                                                 torch.channels_last_3d),
                                                ("strided", (1, 3, 2, 3), torch.channels_last),
                                                ((2, 0, 1), (2, 2), torch.contiguous_format)])
def test_resize_reads_the_storage_in_the_output_layout(x_shape, size, fmt):
    """Functional resize: the storage holds x's elements in x's storage order, then new
    memory (NaN, as PyTorch's deterministic mode fills it); compared in storage order and
    strides, as eager lays the result out."""
    from torch.testing._internal.common_utils import DeterministicGuard

    x = _r(100, seed=18)[::2].reshape(25, 2).transpose(0, 1) if x_shape == "strided" \
        else _r(*x_shape, seed=18)

    def fn(x, size):
        return aten.resize(x, size, memory_format=fmt)

    with DeterministicGuard(True, fill_uninitialized_memory=True):
        expected, actual = fn(x.clone(), size), compiled(fn)(x.clone(), size)
    n = expected.numel()
    assert expected.stride() == actual.stride()
    torch.testing.assert_close(actual.as_strided((n,), (1,)), expected.as_strided((n,), (1,)),
                               rtol=0, atol=0, equal_nan=True)


def test_custom_op_refusal_names_it_and_what_to_do():
    lib = torch.library.Library("issue44_test", "FRAGMENT")  # noqa: TOR901
    lib.define("triple(Tensor x) -> Tensor")
    lib.impl("triple", lambda x: 3 * x, "CPU")
    lib.impl("triple", lambda x: torch.empty_like(x), "Meta")
    with pytest.raises(Exception, match="a custom op \\(namespace 'issue44_test'\\).*npugraph_ex"):
        compiled(lambda x: torch.ops.issue44_test.triple(x).cos())(torch.ones(3))


def test_convolution_with_a_dilation_from_a_dynamic_size_adds_no_guard(monkeypatch):
    """conv2d(x, w, dilation=x.size(0)) with dim 0 marked dynamic: the kernel is dilated at
    run time (no guard fixes the size, which mark_dynamic would reject)."""
    types = record_ge_types(monkeypatch)

    def fn(x, w):
        return F.conv2d(x, w, dilation=[x.size(0)]).sum(), F.conv1d(x[:, :, 0], w[:, :, 0], dilation=x.size(0))

    from torchair_dist import CompilerConfig, get_npu_backend

    torch._dynamo.reset()
    c = torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()), fullgraph=True)
    w = _r(1, 1, 5, 5, seed=19)
    for batch in (2, 3):
        x = _r(batch, 1, 16, 20, seed=batch)
        torch._dynamo.mark_dynamic(x, 0)
        assert_same(fn(x, w), c(x, w), rtol=1e-4, atol=1e-4)
    assert "PadV3" in types and "Conv2D" in types


def test_bernoulli_p_draws_with_probability_p():
    y = compiled(lambda x: torch.bernoulli(x, 0.25))(torch.empty(4000))
    assert y.dtype == torch.float32 and set(y.unique().tolist()) <= {0.0, 1.0}
    assert 800 < y.sum().item() < 1200


def test_export_of_a_graph_with_random_ops_is_refused_by_name(tmp_path):
    from test_ge_common import aot_compile

    cfg = stand_in_config(export__export_mode=True, export__export_path_dir=str(tmp_path),
                          export__export_name="rnd")
    with pytest.raises(Exception, match="export of a graph with random ops"):
        aot_compile(lambda x: x + torch.rand_like(x), cfg)(torch.ones(3))
