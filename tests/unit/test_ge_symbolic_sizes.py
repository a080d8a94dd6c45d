"""Symbolic sizes through GE conversion (issue 44), below the program suite
(``tests/programs/catalogue_dynamic.py`` runs the whole programs): the size expressions a
dynamic graph carries computed in the graph in the right type (float arithmetic stays float,
``round`` is half to even, ``round(n, k)`` keeps its digits), and the reference executor
refusing a -1 written as a size where GE would (a symbolic size a converter took from a
descriptor), naming the op."""
import math

import pytest
import torch

from test_ge_common import recording_conversions
from test_ge_kernel_semantics import run_op
from torchair_dist.errors import GeRuntimeError
from torchair_dist import CompilerConfig, get_npu_backend

from test_ge_common import ge_validate  # noqa: F401,E402  (autouse)


def _dynamic(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                         dynamic=True, fullgraph=True)


def test_size_arithmetic_in_floats_rounds_half_to_even_and_keeps_digits():
    def fn(x):
        n = x.size(0)
        return (x[:round(n / 2 + 1)] * (n / 2 + 0.25), x * round(n / 3, 2), x * -n,
                x * float(n), x[:math.floor(n / 3) + math.ceil(n / 4)])

    compiled = _dynamic(fn)
    with recording_conversions() as converted:
        for n in (3, 4, 5, 7):  # 3/2 + 1 = 2.5 -> 2, 5/2 + 1 = 3.5 -> 4 (half to even)
            x = torch.randn(n, 2)
            for got, want in zip(compiled(x), fn(x)):
                assert got.shape == want.shape
                torch.testing.assert_close(got, want)
    types = {op.type for c in converted for op in c.model.graph[0].op}
    assert {"Round", "RealDiv", "Neg"} <= types, types


def test_var_divisor_is_read_from_the_run_time_shape():
    def fn(x):
        return x.var(1), torch.var(x, 0, correction=0), x.std()

    compiled = _dynamic(fn)
    for n in (3, 5):
        x = torch.randn(n, n + 2)
        for got, want in zip(compiled(x), fn(x)):
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op_type,port,values,ok", [
    ("Reshape", "shape", [-1, 2], True),
    ("Reshape", "shape", [-1, -1], False),
    ("Reshape", "shape", [-2, 6], False),
    ("BroadcastTo", "shape", [-1, 6], False),
])
def test_executor_refuses_a_symbolic_size_written_as_a_constant(op_type, port, values, ok):
    x = torch.arange(6.0).reshape(1, 6) if op_type == "BroadcastTo" else torch.arange(6.0)
    args = [("x", x), (port, torch.tensor(values))]
    desc = [("y", (torch.float32, (-1,) * len(values)))]
    if ok:
        (y,) = run_op(op_type, args, outputs=desc, consts=(port,))
        assert torch.equal(y, x.reshape(values))
        return
    with pytest.raises(GeRuntimeError, match=f"{op_type}.*symbolic size written as a constant"):
        run_op(op_type, args, outputs=desc, consts=(port,))


def test_executor_refuses_a_fill_of_a_minus_one_dim():
    args = [("dims", torch.tensor([-1, 3])), ("value", torch.tensor(1.0))]
    with pytest.raises(GeRuntimeError, match="Fill.*symbolic size written as a constant"):
        run_op("Fill", args, outputs=[("y", (torch.float32, (-1, 3)))], consts=("dims", "value"))


def _r(*size, seed=0):
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed))


def _i(n):
    return torch.randint(0, 3, (n, 4), generator=torch.Generator().manual_seed(n))


F = torch.nn.functional
# ops whose converters took a size from a -1 descriptor dim (a fill, a reshape, a pick index,
# a wrap-around count) or refused a size expression; each called at three sizes
OPS_ON_SYMBOLIC_SIZES = {
    "put_negative_index": (lambda x: x.put(torch.tensor([-1, 2]), torch.tensor([9.0, 8.0])),
                           lambda n: [_r(n, 3)]),
    "median_kthvalue": (lambda x: (x.median(0)[0], x.median(1, keepdim=True)[0],
                                   x.nanmedian(0)[0], x.int().nanmedian(),
                                   x.kthvalue(2, 0, keepdim=True)[0]), lambda n: [_r(n, 5)]),
    "mode": (lambda x: torch.mode(x, 1)[0], lambda n: [_i(n)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w),
                         lambda n: [_r(n, 2, 4, 4), _r(2, 3, 3, 3, seed=1)]),
    "polygamma_isinf_int": (lambda x, i: (torch.polygamma(1, x.abs() + 1), torch.isinf(i)),
                            lambda n: [_r(n, 3), _i(n)]),
    "norms_and_float_correction": (lambda x: (F.group_norm(x, 2), torch.std_mean(x, 1)[0],
                                              F.instance_norm(x),
                                              torch.var(x, 1, correction=0.5)),
                                   lambda n: [_r(n, 4, 3)]),
}


@pytest.mark.parametrize("name", sorted(OPS_ON_SYMBOLIC_SIZES))
def test_op_on_symbolic_sizes_equals_eager(name):
    fn, inputs = OPS_ON_SYMBOLIC_SIZES[name]
    compiled = _dynamic(fn)
    for n in (3, 4, 5):
        got, want = compiled(*inputs(n)), fn(*inputs(n))
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for g, w in zip(got, want):
            assert g.shape == w.shape, (n, g.shape, w.shape)
            torch.testing.assert_close(g, w, equal_nan=True)
