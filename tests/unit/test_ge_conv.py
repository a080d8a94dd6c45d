"""Convolutions onto GE: 3-D and transposed ones in float16 (the only float type the
registry's Conv3D / Conv2DTranspose / Conv3DTranspose take) through those ops, in float32 and
bfloat16 rewritten onto Conv2D; all equal eager over strides, padding, dilation, groups and
output_padding; float64 is refused with the reason; 3-D average pooling, adaptive max pooling,
bilinear and pdist equal eager."""
import pytest
import torch
import torch.nn.functional as F

from test_ge_common import ge_roundtrip  # noqa: F401  (ge_validate is autouse)
from torchair_dist.errors import UnsupportedOpError


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _close(fn, *inputs, tol=1e-4):
    out, converted, _ = ge_roundtrip(fn, *inputs)
    torch.testing.assert_close(out[0], fn(*inputs), rtol=tol, atol=tol)
    return {op.type for op in converted.model.graph[0].op}


def _half_ref(fn):
    # eager float16 convs on CPU accumulate differently: compare with float32 rounded
    return lambda *a: fn(*[t.float() for t in a]).half()


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}, {"dilation": 2, "groups": 2},
                                {"stride": (1, 2, 1), "padding": (0, 1, 2)}])
def test_conv3d_float16(kw):
    x, w = _r(2, 4, 5, 6, 7, dtype=torch.float16), _r(6, 4 // kw.get("groups", 1), 3, 2, 3,
                                                     seed=1, dtype=torch.float16)
    out, converted, _ = ge_roundtrip(lambda a, b: F.conv3d(a, b, **kw), x, w)
    torch.testing.assert_close(out[0], _half_ref(lambda a, b: F.conv3d(a, b, **kw))(x, w),
                               rtol=1e-2, atol=1e-2)
    assert "Conv3D" in {op.type for op in converted.model.graph[0].op}


@pytest.mark.parametrize("dims,kw", [
    (1, {"stride": 2, "padding": 1, "output_padding": 1}),
    (2, {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "dilation": 1}),
    (2, {"groups": 2, "dilation": 2}),
    (3, {"stride": 2, "padding": 1, "output_padding": 1}),
])
def test_conv_transpose_float16(dims, kw):
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    x = _r(2, 4, *([5] * dims), dtype=torch.float16)
    w = _r(4, 6 // kw.get("groups", 1), *([3] * dims), seed=2, dtype=torch.float16)
    b = _r(6, seed=3, dtype=torch.float16)
    out, converted, _ = ge_roundtrip(lambda a, c, d: fn(a, c, d, **kw), x, w, b)
    torch.testing.assert_close(out[0], _half_ref(lambda a, c, d: fn(a, c, d, **kw))(x, w, b),
                               rtol=1e-2, atol=1e-2)
    assert {"Conv2DTranspose", "Conv3DTranspose"} & {op.type for op in converted.model.graph[0].op}


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}, {"dilation": 2, "groups": 2},
                                {"stride": (1, 2, 1), "padding": (0, 1, 2), "dilation": (2, 1, 1)}])
def test_conv3d_float32_runs_as_2d_convolutions_per_depth_tap(kw):
    x, w = _r(2, 4, 6, 6, 7), _r(6, 4 // kw.get("groups", 1), 3, 2, 3, seed=1)
    types = _close(lambda a, b: F.conv3d(a, b, **kw), x, w)
    assert "Conv2D" in types and "Conv3D" not in types


@pytest.mark.parametrize("dims,kw", [
    (1, {"stride": 2, "padding": 1, "output_padding": 1}),
    (1, {"stride": 3, "padding": 3}),  # padding past d (k - 1): the spread input is cropped
    (2, {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)}),
    (2, {"groups": 2, "dilation": 2, "stride": 2}),
    (3, {"stride": 2, "padding": 1, "output_padding": 1}),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_transpose_wider_types_run_as_forward_conv2d(dims, kw, dtype):
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    x = _r(2, 4, *([5] * dims), dtype=dtype)
    w = _r(4, 6 // kw.get("groups", 1), *([3] * dims), seed=2, dtype=dtype)
    b = _r(6, seed=3, dtype=dtype)
    out, converted, _ = ge_roundtrip(lambda a, c, d: fn(a, c, d, **kw), x, w, b)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    want = fn(x.float(), w.float(), b.float(), **kw).to(dtype)
    torch.testing.assert_close(out[0], want, rtol=tol, atol=tol)
    types = {op.type for op in converted.model.graph[0].op}
    assert "Conv2D" in types and not types & {"Conv2DTranspose", "Conv3DTranspose"}


def test_float64_3d_convolution_is_refused_with_the_reason():
    with pytest.raises(UnsupportedOpError, match="float64"):
        ge_roundtrip(lambda a, b: F.conv3d(a, b), _r(1, 2, 4, 4, 4, dtype=torch.float64),
                     _r(3, 2, 2, 2, 2, dtype=torch.float64))


@pytest.mark.parametrize("kw", [{}, {"stride": 1, "padding": 1}, {"ceil_mode": True},
                                {"padding": 1, "count_include_pad": False},
                                {"divisor_override": 3}])
def test_avg_pool3d(kw):
    assert "AvgPool3D" in _close(lambda a: F.avg_pool3d(a, 2, **kw), _r(2, 3, 5, 6, 7))


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_pdist(p):
    _close(lambda a: F.pdist(a, p), _r(6, 4))


@pytest.mark.parametrize("size", [(3, 4), (1, 1), (5, 2)])
def test_adaptive_max_pool2d_values_and_indices(size):
    x = _r(2, 3, 7, 9)
    out, converted, _ = ge_roundtrip(lambda a: F.adaptive_max_pool2d(a, size, return_indices=True),
                                     x)
    want = F.adaptive_max_pool2d(x, size, return_indices=True)
    torch.testing.assert_close(out[0], want[0])
    assert torch.equal(out[1], want[1])
    assert "AdaptiveMaxPool2d" in {op.type for op in converted.model.graph[0].op}


def test_bilinear_is_trilinear_written_out():
    x1, x2, w, b = _r(4, 3), _r(4, 5, seed=1), _r(6, 3, 5, seed=2), _r(6, seed=3)
    _close(lambda a, c, d, e: F.bilinear(a, c, d, e), x1, x2, w, b)


@pytest.mark.parametrize("size", [(2, 3, 4), (1, 1, 1), (5, 2, 7)])
def test_adaptive_avg_pool3d_sums_each_window(size):  # converter in aten_resample.py
    types = _close(lambda a: F.adaptive_avg_pool3d(a, size), _r(2, 3, 5, 6, 7))
    assert types & {"ReduceSum", "ReduceMean"}  # (1, 1, 1) is a plain mean in torch's graph


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sampler_3d(mode, padding):
    x, grid = _r(2, 3, 4, 5, 6), _r(2, 3, 4, 2, 3, seed=1) * 1.2
    _close(lambda a, g: F.grid_sample(a, g, mode, padding, align_corners=False), x, grid)


@pytest.mark.parametrize("rank,transposed,lists", [
    (2, False, ([1], [0], [1])), (2, False, ([2], [1], [2])), (3, False, ([1], [0], [1])),
    (3, False, ([2], [1], [1])), (2, True, ([2], [1], [1])), (1, False, ([2], [1], [1])),
    (3, True, ([2], [0], [1]))])
def test_convolution_one_element_lists(rank, transposed, lists):
    """issue 41: aten.convolution broadcasts a one-element stride/padding/dilation to every
    spatial dim (the reference executor crashed: 'expected 4, got 2')."""
    stride, padding, dilation = lists
    x = _r(1, 2, *([5] * rank), seed=1)
    w = _r(*((2, 3) if transposed else (3, 2)), *([3] * rank), seed=2)
    out_pad = [1] if transposed and stride[0] > 1 else [0]
    dtype = torch.float16 if transposed and rank == 3 else torch.float32

    def fn(x, w):
        return torch.ops.aten.convolution(x.to(dtype), w.to(dtype), None, stride, padding, dilation,
                                          transposed, out_pad, 1)

    out, _, _ = ge_roundtrip(fn, x, w)
    ref = fn(x.double(), w.double()) if dtype == torch.float32 else _half_ref(fn)(x, w)
    assert out[0].shape == ref.shape and out[0].dtype == ref.dtype
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out[0], ref.to(out[0].dtype), rtol=tol, atol=tol)
