"""An identity-like op (rounding an integer, abs of unsigned, clone, a same-type cast) gives a NEW
tensor in max-autotune, as GE's Identity does: an in-place update of the input after the call
must not show through the output (issue 41: x.ceil() of an int64 x returned x itself)."""
import pytest
import torch

from test_ge_common import assert_same, compile_ge, ge_validate  # noqa: F401

aten = torch.ops.aten

OPS = {
    "ceil": torch.ceil, "floor": torch.floor, "round": torch.round, "trunc": torch.trunc,
    "fix": torch.fix, "clone": torch.clone, "contiguous": lambda x: x.contiguous(),
    "to_same": lambda x: x.to(x.dtype, copy=True), "positive": torch.positive,
    "abs_uint8": torch.abs, "round_decimals0": lambda x: torch.round(x, decimals=0),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_output_is_not_the_input(name):
    op = OPS[name]
    dtype = torch.uint8 if name == "abs_uint8" else torch.int64

    def fn(x):
        tmp = op(x)
        x.add_(10)
        return tmp

    if name == "round_decimals0":
        dtype = torch.float32
    compiled = compile_ge(fn)
    got, want = compiled(torch.zeros(3, dtype=dtype)), fn(torch.zeros(3, dtype=dtype))
    assert_same(want, got, rtol=0, atol=0)


def test_identity_and_cast_kernels_copy():
    from torchair_dist.backends.ge.dtypes import ge_dtype
    from torchair_dist.cpu.ge_reference.kernels import KERNELS
    from torchair_dist.cpu.ge_reference.opspec import OpSpec

    x = torch.arange(4)
    ident = KERNELS["Identity"](OpSpec("Identity", "i", {}, ["x"], {}, []))
    cast = KERNELS["Cast"](OpSpec("Cast", "c", {"dst_type": int(ge_dtype(torch.int64))}, ["x"], {}, []))
    for out in (ident(x), cast(x)):
        assert out is not x and out.data_ptr() != x.data_ptr() and torch.equal(out, x)
