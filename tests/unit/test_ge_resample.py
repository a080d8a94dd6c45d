"""Resampling in max-autotune: 3-D adaptive average pooling and antialiased bilinear resize
(converters/aten_resample.py) and grid_sampler_3d (GridSampler3D, aten_conv.py) equal eager
(an inf stays in its own windows), the GE graph holds the expected ops, the refused cases name
the op; the GridSampler3D reference kernel alone against hand-computed values."""
import pytest
import torch
import torch.nn.functional as F



from test_ge_common import compile_ge as _compile, ge_validate  # noqa: F401,E402  (autouse)


def _run_recording(fn, *args):
    import torchair_dist.backends.ge as ge_backend

    types, original = [], ge_backend.convert_graph

    def record(*a, **k):
        converted = original(*a, **k)
        types.extend(op.type for op in converted.model.graph[0].op)
        return converted

    ge_backend.convert_graph = record
    try:
        out = _compile(fn)(*args)
    finally:
        ge_backend.convert_graph = original
    return out, types


def _check_ops(fn, args, expect, dtype=torch.float32, exact=False, eager_in_f32=False):
    """Compiled equals eager; ``eager_in_f32``: torch's CPU kernel lacks ``dtype``, so eager
    runs on the float32 values and its result is rounded to ``dtype``."""
    args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args]
    got, types = _run_recording(fn, *args)
    if eager_in_f32:
        want = fn(*[a.float() if isinstance(a, torch.Tensor) else a for a in args]).to(dtype)
    else:
        want = fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-3}[dtype]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if exact or not w.is_floating_point():
            assert torch.equal(g, w) or (w.is_floating_point() and torch.equal(g.isnan(), w.isnan())
                                         and torch.equal(g[~g.isnan()], w[~w.isnan()]))
        else:
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True)
    assert set(expect) <= set(types), (expect, types)
    return types


@pytest.mark.parametrize("xs,out", [((2, 3, 7, 9, 5), (3, 4, 2)), ((3, 6, 6, 6), (2, 3, 6)),
                                    ((1, 1, 5, 4, 3), (1, 1, 1)), ((1, 2, 4, 4, 4), (7, 5, 9))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adaptive_avg_pool3d_matches_eager(xs, out, dtype):
    torch.manual_seed(5)
    x = torch.randn(xs)
    x.view(-1)[3] = float("inf")  # stays inside its own windows
    # a (1, 1, 1) output is a mean (aten decomposes it to one before conversion)
    expect = ["ReduceMean"] if out == (1, 1, 1) else ["ReduceSum", "RealDiv"]
    _check_ops(lambda x: F.adaptive_avg_pool3d(x, out), [x], expect, dtype)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d_matches_eager(mode, padding, align):
    torch.manual_seed(7)
    x, grid = torch.randn(2, 3, 4, 5, 6), torch.rand(2, 3, 2, 4, 3) * 2.4 - 1.2
    _check_ops(lambda x, g: F.grid_sample(x, g, mode, padding, align), [x, grid],
               ["GridSampler3D"])


def test_grid_sample_3d_bicubic_is_refused_naming_the_op():
    with pytest.raises(Exception) as info:
        _compile(lambda x, g: torch.ops.aten.grid_sampler_3d(x, g, 2, 0, False))(
            torch.randn(1, 1, 2, 2, 2), torch.rand(1, 1, 1, 1, 3))
    assert "grid_sampler_3d" in str(info.value)


def _run_op(op_type, inputs, attrs, outputs):
    from test_ge_kernel_semantics import run_op

    return run_op(op_type, inputs, attrs, outputs)


def test_grid_sampler3d_kernel_corners_and_zeros_padding():
    x = torch.arange(8, dtype=torch.float32).reshape(1, 1, 2, 2, 2)  # x[d, h, w] = 4d + 2h + w
    # grid (x, y, z) = (w, h, d) in [-1, 1]; align_corners: -1/1 are the corner voxel centres
    grid = torch.tensor([[-1.0, -1.0, -1.0], [1.0, -1.0, -1.0], [1.0, 1.0, 1.0],
                         [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]]).reshape(1, 1, 1, 5, 3)
    (y,) = _run_op("GridSampler3D", [("x", x), ("grid", grid)], {"align_corners": True},
                   [("y", (torch.float32, (1, 1, 1, 1, 5)))])
    assert y.reshape(-1).tolist() == [0.0, 1.0, 7.0, 3.5, 0.0]  # centre = mean; outside = 0


AA = [((2, 3, 9, 5), (20, 31), False, (None, None)), ((1, 2, 16, 13), (7, 2), True, (None, None)),
      ((2, 1, 16, 13), (3, 4), False, (3 / 16 * 1.07, 4 / 13 * 0.93)),
      ((1, 3, 4, 1), (1, 4), True, (1 / 4 * 0.9, 4.2)), ((1, 1, 6, 6), (6, 2), False, (None, None))]


@pytest.mark.parametrize("xs,size,align,scales", AA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_upsample_bilinear2d_aa_matches_eager(xs, size, align, scales, dtype):
    torch.manual_seed(11)
    x = torch.randn(xs)
    x.view(-1)[1] = float("inf")  # only the outputs whose window holds it see it

    def fn(x):
        return torch.ops.aten._upsample_bilinear2d_aa(x, list(size), align, *scales)
    _check_ops(fn, [x], ["GatherV2", "ReduceSum"], dtype,
               eager_in_f32=dtype != torch.float32)  # torch has no bf16 AA resize on CPU


def test_upsample_aa_to_width_one_with_resized_height_is_refused():
    fn = lambda x: F.interpolate(x, size=(7, 1), mode="bilinear", antialias=True)  # noqa: E731
    with pytest.raises(Exception) as info:
        _compile(fn)(torch.randn(1, 2, 4, 5))
    assert "_upsample_bilinear2d_aa" in str(info.value) and "width of 1" in str(info.value)
