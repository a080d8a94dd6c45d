"""Inputs eager refuses (a matmul of two dtypes, abs of bool) make the compiled max-autotune call
raise eager's error when CALLED, with eager's message (issue 41: mm(float32, int64) returned a
tensor: the GE converters carried the int64 operand as float32). bmm, baddbmm, dot and conv2d
of two dtypes are refused by Dynamo itself while tracing (their meta functions check dtypes:
TorchRuntimeError with another text), before any backend runs."""
import pytest
import torch

from test_ge_common import compile_ge, ge_validate  # noqa: F401
from torchair_dist.errors import EagerOpError, TorchairDistError

f32, i64 = torch.randn(3, 4), torch.ones(4, 2, dtype=torch.int64)

CASES = {
    "mm": (torch.mm, (f32, i64)),
    "mm_int_first": (torch.mm, (torch.ones(3, 4, dtype=torch.int64), torch.randn(4, 5))),
    "matmul": (torch.matmul, (f32, i64)),
    "addmm": (torch.addmm, (torch.zeros(3, 2), f32, i64)),
    "addmm_bias": (torch.addmm, (torch.zeros(3, 2, dtype=torch.int64), f32, i64.float())),
    "mv": (torch.mv, (f32, torch.ones(4, dtype=torch.int64))),
    "linear": (torch.nn.functional.linear, (f32, torch.ones(2, 4, dtype=torch.float64))),
    "abs_bool": (torch.abs, (torch.tensor([True, False]),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_at_call_like_eager(name):
    fn, args = CASES[name]
    with pytest.raises(Exception) as eager:
        fn(*args)
    compiled = compile_ge(lambda *a: fn(*a) + 0 if name != "abs_bool" else fn(*a))
    for _ in range(2):  # every call, not only the first
        with pytest.raises(type(eager.value)) as got:
            compiled(*args)
        assert str(eager.value) in str(got.value)
        assert not isinstance(got.value, torch._dynamo.exc.BackendCompilerFailed)
    if type(eager.value) is RuntimeError:
        assert isinstance(got.value, EagerOpError) and isinstance(got.value, TorchairDistError)


def test_same_dtypes_still_run():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    torch.testing.assert_close(compile_ge(torch.mm)(a, b), a @ b)
    fn = lambda x, w: torch.nn.functional.conv2d(x, w)  # noqa: E731
    x, w = torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(compile_ge(fn)(x, w), fn(x, w), rtol=1e-4, atol=1e-4)


def test_refusal_found_at_conversion():
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchair_dist.backends.ge.eager_checks import call_errors

    gm = make_fx(lambda a, b: torch.mm(a, b), tracing_mode="fake")(f32, i64)
    (cls, message), = call_errors(gm)
    assert cls is EagerOpError and "expected m1 and m2 to have the same dtype" in message
    assert "%mm" in message
