"""The second truth: each reference kernel the Core ATen converters use, run alone on a GE graph
built by hand (no converter involved) and compared with the op's documented semantics written
independently (numpy / Python's math, element by element): broadcasting, attribute defaults,
sign conventions. Every graph is also validated against the GE operator registry."""
import math

import numpy as np
import pytest
import torch

from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.backends.ge.registry_check import validate
from torchair_dist.cpu.ge_reference.executor import ReferenceRuntime


def run_op(op_type, inputs, attrs=None, outputs=(("y", None),), consts=()):
    """One GE op: tensor inputs become Data (fed), ``consts`` ports become Const inputs."""
    b = GraphBuilder("single")
    feeds, ins = [], []
    for port, value in inputs:
        if port in consts:
            ins.append((port, b.const(value)))
        else:
            ins.append((port, b.data(value.dtype, tuple(value.shape))))
            feeds.append(value)
    first = inputs[0][1]
    descs = [(name, desc or (first.dtype, tuple(first.shape))) for name, desc in outputs]
    refs = b.op(op_type, ins, attrs or {}, descs, name=op_type)
    b.net_output(refs)
    model = b.model()
    validate(model)
    rt = ReferenceRuntime()
    rt.load(model.SerializeToString())
    return rt.run(feeds)


def elementwise(fn, *arrays):
    """fn applied to each element (numpy broadcasting), in float64 Python math."""
    bcast = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in arrays])
    out = np.empty(bcast[0].shape)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*[float(a[idx]) for a in bcast])
    return out


UNARY = {"Acos": math.acos, "Asin": math.asin, "Atan": math.atan, "Asinh": math.asinh,
         "Atanh": math.atanh, "Cosh": math.cosh, "Sinh": math.sinh, "Tan": math.tan,
         "Erfc": math.erfc}


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary_math(op_type):
    x = torch.linspace(-0.9, 0.9, 7)
    (y,) = run_op(op_type, [("x", x)])
    np.testing.assert_allclose(y.numpy(), elementwise(UNARY[op_type], x), rtol=1e-5, atol=1e-6)


def test_acosh_domain():
    x = torch.tensor([1.0, 1.5, 10.0])
    (y,) = run_op("Acosh", [("x", x)])
    np.testing.assert_allclose(y.numpy(), elementwise(math.acosh, x), rtol=1e-5)


def test_erfinv_inverts_erf():
    x = torch.tensor([-0.99, -0.3, 0.0, 0.5, 0.9])
    (y,) = run_op("Erfinv", [("input_x", x)], outputs=[("output_y", None)])
    np.testing.assert_allclose(elementwise(math.erf, y), x.numpy(), rtol=1e-5, atol=1e-6)


def test_atan2_is_angle_of_x2_x1_and_broadcasts():
    x1 = torch.tensor([[1.0], [-1.0], [0.5]])       # the y coordinate
    x2 = torch.tensor([-2.0, 0.0, 3.0, -0.5])       # the x coordinate
    (y,) = run_op("Atan2", [("x1", x1), ("x2", x2)], outputs=[("y", (torch.float32, (3, 4)))])
    np.testing.assert_allclose(y.numpy(), elementwise(math.atan2, x1, x2), rtol=1e-6)


def test_floormod_takes_the_divisor_sign_mod_the_dividend_sign():
    a = torch.tensor([7, -7, 7, -7], dtype=torch.int32)
    b = torch.tensor([3, 3, -3, -3], dtype=torch.int32)
    (floor,) = run_op("FloorMod", [("x1", a), ("x2", b)])
    (trunc,) = run_op("Mod", [("x1", a), ("x2", b)])
    assert floor.tolist() == [x % y for x, y in zip(a.tolist(), b.tolist())]  # Python: floor
    assert trunc.tolist() == [int(math.fmod(x, y)) for x, y in zip(a.tolist(), b.tolist())]
    fa, fb = torch.tensor([5.5, -5.5]), torch.tensor([-2.0, 2.0])
    (ff,) = run_op("Mod", [("x1", fa), ("x2", fb)])
    assert ff.tolist() == [math.fmod(5.5, -2.0), math.fmod(-5.5, 2.0)]


def test_shifts_and_xor():
    x = torch.tensor([1, -16, 5, 1024], dtype=torch.int64)
    s = torch.tensor([3, 2, 0, 4], dtype=torch.int64)
    (left,) = run_op("LeftShift", [("x", x), ("y", s)], outputs=[("z", None)])
    (right,) = run_op("RightShift", [("x", x), ("y", s)], outputs=[("z", None)])
    (xor,) = run_op("BitwiseXor", [("x1", x), ("x2", s)])
    assert left.tolist() == [a << b for a, b in zip(x.tolist(), s.tolist())]
    assert right.tolist() == [a >> b for a, b in zip(x.tolist(), s.tolist())]  # arithmetic
    assert xor.tolist() == [a ^ b for a, b in zip(x.tolist(), s.tolist())]


def test_isnan_isinf_give_bool():
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")], dtype=torch.float16)
    (nan,) = run_op("IsNan", [("x", x)], outputs=[("y", (torch.bool, (4,)))])
    (inf,) = run_op("IsInf", [("x", x)], outputs=[("y", (torch.bool, (4,)))])
    assert nan.tolist() == [math.isnan(v) for v in x.float().tolist()]
    assert inf.tolist() == [math.isinf(v) for v in x.float().tolist()]


@pytest.mark.parametrize("base,scale,shift", [(-1.0, 1.0, 0.0), (2.0, 1.0, 0.0), (10.0, 1.0, 0.0),
                                              (3.0, 2.0, 1.0)])
def test_log_exp_base_scale_shift(base, scale, shift):
    x = torch.tensor([0.5, 1.0, 4.0, 9.0], dtype=torch.float64)
    attrs = {"base": base, "scale": scale, "shift": shift}
    (log,) = run_op("Log", [("x", x)], attrs)
    (exp,) = run_op("Exp", [("x", x)], attrs)
    b = math.e if base == -1.0 else base
    np.testing.assert_allclose(log.numpy(), elementwise(lambda v: math.log(shift + scale * v, b), x),
                               rtol=1e-12)
    np.testing.assert_allclose(exp.numpy(), elementwise(lambda v: b ** (shift + scale * v), x),
                               rtol=1e-12)


def test_nextafter():
    a, b = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([2.0, 0.0, -1.0])
    (y,) = run_op("NextAfter", [("x1", a), ("x2", b)], outputs=[("output", None)])
    assert y.tolist() == np.nextafter(a.numpy(), b.numpy()).tolist()


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_cumprod_attrs(exclusive, reverse):
    x = torch.tensor([[2.0, 3.0, 4.0], [1.0, -1.0, 5.0]])
    attrs = {} if not (exclusive or reverse) else {"exclusive": exclusive, "reverse": reverse}
    (y,) = run_op("Cumprod", [("x", x), ("axis", torch.tensor(1))], attrs, consts=("axis",))
    rows = []
    for row in x.tolist():
        seq = row[::-1] if reverse else row
        acc, out = 1.0, []
        for v in seq:
            if exclusive:
                out.append(acc)
                acc *= v
            else:
                acc *= v
                out.append(acc)
        rows.append(out[::-1] if reverse else out)
    assert y.tolist() == rows


def test_cummax_cummin_values_and_indices():
    x = torch.tensor([[3.0, 1.0, 4.0, 2.0, 5.0]])
    vmax, imax = run_op("Cummax", [("x", x)], {"dim": 1},
                        outputs=[("y", None), ("indices", (torch.int64, (1, 5)))])
    vmin, imin = run_op("Cummin", [("x", x)], {"axis": 1},
                        outputs=[("y", None), ("indices", (torch.int64, (1, 5)))])
    row = x[0].tolist()
    run_max = [max(row[:i + 1]) for i in range(5)]
    run_min = [min(row[:i + 1]) for i in range(5)]
    assert vmax[0].tolist() == run_max and imax[0].tolist() == [row.index(v) for v in run_max]
    assert vmin[0].tolist() == run_min and imin[0].tolist() == [row.index(v) for v in run_min]


@pytest.mark.parametrize("reduction", [None, "none", "add", "mul", "max", "min"])
def test_scatter_elements_onnx_semantics(reduction):
    data = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    idx = torch.tensor([[2, 0, 1, 2], [0, 0, 2, 1]])
    upd = torch.tensor([[10.0, 20.0, 30.0, 40.0], [-1.0, -2.0, -3.0, -4.0]])
    attrs = {} if reduction is None else {"reduction": reduction}  # axis: default 0
    (y,) = run_op("ScatterElements", [("data", data), ("indices", idx), ("updates", upd)], attrs)
    want = data.tolist()
    combine = {None: lambda a, b: b, "none": lambda a, b: b, "add": lambda a, b: a + b,
               "mul": lambda a, b: a * b, "max": max, "min": min}[reduction]
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            k = int(idx[i, j])
            want[k][j] = combine(want[k][j], float(upd[i, j]))
    assert y.tolist() == want


def test_reduce_prod_default_drops_axes():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    (y,) = run_op("ReduceProd", [("x", x), ("axes", torch.tensor([1]))], consts=("axes",),
                  outputs=[("y", (torch.float32, (2,)))])
    assert y.tolist() == [math.prod(r) for r in x.tolist()]
