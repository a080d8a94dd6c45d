"""Bit-level ops in max-autotune against eager, exactly: bitwise and/or/not on bool (prims
twins included), signbit (-0.0 and -NaN), shifts (counts outside [0, bits), negative counts),
view.dtype (GE Bitcast, bfloat16 through its float32 widening) and the GE Bitcast kernel."""
import pytest
import torch

from test_ge_common import assert_same, compile_ge, ge_validate  # noqa: F401

NAN = float("nan")


def exact(fn, *args):
    assert_same(fn(*args), compile_ge(fn)(*args), rtol=0, atol=0)


def test_not_signbit_and_int():
    """issue 41: (~signbit(-x)) & 1 gave [1, 1, 1, 1]: prims.bitwise_and (from the & of a bool
    and an int) was converted as BitwiseOr."""
    exact(lambda x: (~torch.signbit(-x)) & 1, torch.tensor([1., 1., -1., -1.]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_signbit_zero_nan_inf(dtype):
    x = torch.tensor([0., -0., NAN, -NAN, float("inf"), -float("inf"), -2., 3.]).to(dtype)
    exact(torch.signbit, x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8])
def test_signbit_int(dtype):
    exact(torch.signbit, torch.tensor([0, 3, 100]).to(dtype) - (0 if dtype == torch.uint8 else 5))


def test_bool_and_or_not_prims():
    """The refs of & | ~ on a bool and an int scalar go through prims.bitwise_*."""
    a = torch.tensor([True, False, True, False])
    exact(lambda a: ((a & 1), (a | 2), (~a) & 1, ~a), a)
    exact(lambda a: (a & 6, a | 9, ~a), torch.tensor([1, -2, 7], dtype=torch.int32))


COUNTS = [0, 1, 3, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, -1, -64, -100]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8])
@pytest.mark.parametrize("op", ["lshift", "rshift"])
def test_shift_counts_signed(dtype, op):
    info = torch.iinfo(dtype)
    n = len(COUNTS)
    x = torch.tensor([1, -1, 5, -8, info.max, info.min, 7, -7] * 2)[:n].to(dtype)
    s = torch.tensor(COUNTS).clamp(info.min, info.max).to(dtype)
    fn = (lambda a, b: a << b) if op == "lshift" else (lambda a, b: a >> b)
    exact(fn, x, s)


def test_shift_uint8_and_broadcast():
    u = torch.tensor([1, 255, 3, 128, 200], dtype=torch.uint8)
    exact(lambda a, b: (a << b, a >> b), u, torch.tensor([1, 1, 8, 9, 7], dtype=torch.uint8))
    exact(lambda a, b: (a << b, a >> b), torch.tensor([[1], [-9]]), torch.tensor([0, 2, 64, -3]))


@pytest.mark.parametrize("count", [2, 31, 32, 63, 64, 70])
def test_shift_python_count(count):
    x = torch.tensor([1, -1, 5, -8, 1 << 40, -(1 << 40)])
    exact(lambda a: (a >> count, a << count, torch.bitwise_left_shift(a, count),
                     torch.bitwise_right_shift(a, count)), x)
    exact(lambda a: (a >> count, a << count), x.int())


def test_shift_scalar_tensor():
    exact(lambda b: (torch.bitwise_left_shift(3, b), torch.bitwise_right_shift(-300, b)),
          torch.tensor([0, 2, 63, 64, -1]))


@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.int32), (torch.float32, torch.uint8), (torch.float32, torch.int16),
    (torch.int16, torch.float16), (torch.uint8, torch.float32), (torch.int8, torch.int64),
    (torch.float64, torch.int32), (torch.bfloat16, torch.int16), (torch.int16, torch.bfloat16),
    (torch.bfloat16, torch.uint8), (torch.float32, torch.bfloat16), (torch.bool, torch.uint8)])
def test_view_dtype(src, dst):
    if src == torch.bool:
        x = torch.tensor([[True, False, True, True]])
    elif src.is_floating_point:
        x = torch.tensor([[1.5, -0., NAN, -3.25, 65504., 1e-3, 7., -1e4]]).to(src)
    else:
        x = torch.arange(-8, 8, dtype=torch.int64).reshape(2, 8).to(src) * 3
    exact(lambda t: (t + 0 if src != torch.bool else t | t).view(dst), x)


def test_view_dtype_3d_dynamic():
    fn = lambda t: (t * 2).view(torch.uint8)  # noqa: E731
    from torchair_dist import CompilerConfig, get_npu_backend

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                             dynamic=True)
    for n in (3, 5):
        x = torch.randn(2, n, 4)
        assert_same(fn(x), compiled(x), rtol=0, atol=0)


def test_bitcast_kernel_tf_shapes():
    from torchair_dist.backends.ge.dtypes import ge_dtype
    from torchair_dist.cpu.ge_reference.kernels_core import _bitcast
    from torchair_dist.cpu.ge_reference.opspec import GeRuntimeError, OpSpec

    def spec(dtype):
        return OpSpec("Bitcast", "b", {"type": int(ge_dtype(dtype))}, ["x"], {}, [])
    x = torch.randn(2, 3)
    assert _bitcast(spec(torch.uint8))(x).shape == (2, 3, 4)
    assert torch.equal(_bitcast(spec(torch.float32))(_bitcast(spec(torch.uint8))(x)), x)
    with pytest.raises(GeRuntimeError, match="last dimension of 4"):
        _bitcast(spec(torch.float32))(torch.zeros(2, 3, dtype=torch.uint8))
