"""Ops of training graphs and a few others issue 41 found refused in max-autotune, now lowered
and compared with eager: conv/pool/resize gradients (GE's Conv2DBackpropInput/Filter,
AvgPoolV2Grad, ResizeNearestNeighborV2Grad, ResizeBilinearV2Grad), prims.iota,
repeat_interleave.Tensor with output_size, scatter(reduce=...), as_strided of a transposed
input (read in storage order), and the clear refusals (random ops, as_strided with gaps)."""
import pytest
import torch
import torch.nn.functional as F

from test_ge_common import assert_same, compile_ge, ge_validate  # noqa: F401

aten = torch.ops.aten


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(fn, *args, tol=1e-4):
    assert_same(fn(*args), compile_ge(fn)(*args), rtol=tol, atol=tol)


def exact(fn, *args):
    assert_same(fn(*args), compile_ge(fn)(*args), rtol=0, atol=0)


@pytest.mark.parametrize("args", [
    ([4], [2], [1], [1], 1, [True, True, True]), ([4], [1], [0], [2], 1, [True, True, False]),
    (None, [1], [2], [2], 3, [True, True, False]), ([4], [2, 1], [1, 0], [1, 1], 1, [False, True, True])])
def test_convolution_backward(args):
    bias, stride, padding, dilation, groups, mask = args
    x = _r(2, 3, 7, 6, seed=1)
    w = _r(3 if groups == 3 else 4, 3 // groups, 3, 3, seed=2)
    out = aten.convolution(x, w, None, stride, padding, dilation, False, [0], groups)
    g = _r(*out.shape, seed=3)
    close(lambda g, x, w: aten.convolution_backward(g, x, w, bias, stride, padding, dilation, False,
                                                    [0], groups, mask), g, x, w)


def _grads(fn, x, params, compiled: bool):
    x = x.detach().clone().requires_grad_()
    run = compile_ge(fn) if compiled else fn
    run(x).sum().backward()
    grads = [x.grad] + [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return grads


def _training_close(module, x, fn=None):
    fn = fn or module
    params = list(module.parameters())
    assert_same(_grads(fn, x, params, False), _grads(fn, x, params, True), rtol=1e-4, atol=1e-4)


def test_conv2d_training_step():
    """A real backward graph: AOT's convolution_backward (input, weight and bias grads)."""
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    _training_close(conv, _r(2, 3, 8, 8, seed=4), lambda x: conv(x).relu())


def test_pool_and_interpolate_training_grads():
    def fn(x):
        y = F.avg_pool2d(x, 2, ceil_mode=True)
        return F.interpolate(y, scale_factor=2, mode="nearest") * 2 + F.interpolate(
            y, scale_factor=2, mode="bilinear")

    x = _r(1, 2, 8, 10, seed=9).requires_grad_()
    assert_same(_grads(fn, x, [], False), _grads(fn, x, [], True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw", [dict(k=[3, 3], s=[2, 2], p=[1, 1], ceil=False, inc=True, div=None),
                                dict(k=[3, 2], s=[2, 1], p=[1, 0], ceil=True, inc=False, div=None),
                                dict(k=[2, 2], s=[2, 2], p=[0, 0], ceil=True, inc=True, div=3)])
def test_avg_pool2d_backward(kw):
    x = _r(2, 3, 7, 6, seed=5)
    out = F.avg_pool2d(x, kw["k"], kw["s"], kw["p"], kw["ceil"], kw["inc"], kw["div"])
    close(lambda g, x: aten.avg_pool2d_backward(g, x, kw["k"], kw["s"], kw["p"], kw["ceil"],
                                                kw["inc"], kw["div"]), _r(*out.shape, seed=6), x)


@pytest.mark.parametrize("sizes", [([8, 8], [4, 4]), ([7, 5], [3, 4]), ([4, 6], [4, 3])])
def test_upsample_nearest2d_backward(sizes):
    out, inp = sizes
    close(lambda g: aten.upsample_nearest2d_backward(g, out, [2, 3, *inp], None, None),
          _r(2, 3, *out, seed=7))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("sizes", [([8, 8], [4, 4]), ([7, 9], [4, 5])])
def test_upsample_bilinear2d_backward(sizes, align):
    out, inp = sizes
    close(lambda g: aten.upsample_bilinear2d_backward(g, out, [2, 3, *inp], align, None, None),
          _r(2, 3, *out, seed=8))


def test_iota():
    exact(lambda x: torch.ops.prims.iota(5, start=2, step=3, dtype=torch.int64, device="cpu",
                                         requires_grad=False) + x, torch.tensor(1))


def test_repeat_interleave_output_size():
    exact(lambda x, r: torch.repeat_interleave(x, r, 0, output_size=6), _r(4, 2), torch.tensor([1, 0, 3, 2]))
    exact(lambda r: torch.repeat_interleave(r, output_size=6), torch.tensor([1, 0, 3, 2]))


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_legacy_reduce(reduce):
    idx = torch.tensor([[0, 1, 0], [2, 0, 2]])
    close(lambda x, i, s: (x.scatter(1, i, s, reduce=reduce), x.scatter(1, i, 2.5, reduce=reduce)),
          _r(2, 4), idx, _r(2, 3, seed=1))


def test_as_strided_transposed_input_reads_storage():
    base = torch.arange(24.).reshape(4, 6)
    exact(lambda x: torch.as_strided(x, (3, 3), (1, 2), 1), base.t())
    exact(lambda x: torch.as_strided(x.t() * 1, (3, 3), (1, 2), 1), base)
    exact(lambda x: torch.as_strided(x, (2, 2, 2), (1, 8, 2)), torch.arange(24.).reshape(2, 3, 4).permute(2, 0, 1))


def test_as_strided_input_with_gaps_is_refused():
    with pytest.raises(Exception, match="gaps in its storage"):
        compile_ge(lambda x: torch.as_strided(x, (2, 2), (6, 1), 2))(torch.arange(24.).reshape(4, 6)[:, 1:])


@pytest.mark.parametrize("fn", [lambda x: torch.randperm(3) + x,
                                lambda x: torch.multinomial(x, 2).to(x.dtype)])
def test_random_ops_without_converter_refused_with_advice(fn):
    """rand/randn/randint (and dropout, bernoulli) lower: test_ge_random_and_symbolic_pools."""
    with pytest.raises(Exception, match="a random op with no converter"):
        compile_ge(fn)(torch.full((3,), 0.5))
