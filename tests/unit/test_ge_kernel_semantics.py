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


# -- the matrix ops (TF-style: batched over leading dims) checked by their defining identities
def _spd(n=4, batch=2):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(batch, n, n, generator=g, dtype=torch.float64)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


def test_cholesky_is_lower_and_reconstructs():
    x = _spd()
    (low,) = run_op("Cholesky", [("x", x)])
    assert torch.equal(low, low.tril())
    torch.testing.assert_close(low @ low.mT, x)


def test_matrix_inverse_adjoint_solve_and_determinants():
    x = _spd()
    (inv,) = run_op("MatrixInverse", [("x", x)])
    torch.testing.assert_close(inv @ x, torch.eye(4, dtype=x.dtype).expand(2, 4, 4))
    (inv_adj,) = run_op("MatrixInverse", [("x", x + torch.triu(x, 1))], {"adjoint": True})
    torch.testing.assert_close((x + torch.triu(x, 1)).mT @ inv_adj,
                               torch.eye(4, dtype=x.dtype).expand(2, 4, 4))
    rhs = torch.randn(2, 4, 3, dtype=x.dtype)
    (sol,) = run_op("MatrixSolve", [("matrix", x), ("rhs", rhs)],
                    outputs=[("y", (x.dtype, (2, 4, 3)))])
    torch.testing.assert_close(x @ sol, rhs)
    (det,) = run_op("MatrixDeterminant", [("x", x)], outputs=[("y", (x.dtype, (2,)))])
    sign, logabs = run_op("LogMatrixDeterminant", [("x", -x[:, :3, :3])],
                          outputs=[("sign", (x.dtype, (2,))), ("y", (x.dtype, (2,)))])
    for b in range(2):
        lu = np.linalg.det(x[b].numpy())  # numpy's own determinant
        assert math.isclose(float(det[b]), lu, rel_tol=1e-9)
        d3 = np.linalg.det(-x[b, :3, :3].numpy())
        assert float(sign[b]) == math.copysign(1.0, d3)
        assert math.isclose(float(logabs[b]), math.log(abs(d3)), rel_tol=1e-9)


def test_svd_qr_eig_reconstruct():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    s, u, v = run_op("Svd", [("x", x)], outputs=[("sigma", (x.dtype, (2, 3))),
                                                ("u", (x.dtype, (2, 5, 3))),
                                                ("v", (x.dtype, (2, 3, 3)))])
    torch.testing.assert_close(u @ torch.diag_embed(s) @ v.mT, x)  # v, not v^H, is returned
    assert (s[:, :-1] >= s[:, 1:]).all()
    q, r = run_op("Qr", [("x", x)], outputs=[("q", (x.dtype, (2, 5, 3))),
                                             ("r", (x.dtype, (2, 3, 3)))])
    torch.testing.assert_close(q @ r, x)
    assert torch.equal(r, r.triu())
    sym = _spd(3)
    w, vec = run_op("SelfAdjointEig", [("x", sym)], outputs=[("eigen_value", (x.dtype, (2, 3))),
                                                             ("eigen_vector", (x.dtype, (2, 3, 3)))])
    torch.testing.assert_close(sym @ vec, vec * w.unsqueeze(-2))
    assert (w[:, :-1] <= w[:, 1:]).all()


def test_cdist_is_the_p_norm_of_row_differences():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    for p in (None, 1.0):
        attrs = {} if p is None else {"p": p}
        (y,) = run_op("Cdist", [("x1", a), ("x2", b)], attrs, outputs=[("y", (a.dtype, (2, 3, 5)))])
        pp = 2.0 if p is None else p
        want = [[[sum(abs(float(a[n, i, k] - b[n, j, k])) ** pp for k in range(4)) ** (1 / pp)
                  for j in range(5)] for i in range(3)] for n in range(2)]
        np.testing.assert_allclose(y.numpy(), np.array(want), rtol=1e-5)


@pytest.mark.parametrize("exclusive", [True, False])
def test_avg_pool_v2_padding_count(exclusive):
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)
    (y,) = run_op("AvgPoolV2", [("x", x)], {"ksize": [1, 1, 3, 3], "strides": [1, 1, 2, 2],
                                            "pads": [1, 1, 1, 1], "exclusive": exclusive},
                  outputs=[("y", (x.dtype, (1, 1, 2, 2)))])
    grid = x[0, 0].tolist()
    want = []
    for oi in range(2):
        row = []
        for oj in range(2):
            cells = [grid[i][j] for i in range(oi * 2 - 1, oi * 2 + 2)
                     for j in range(oj * 2 - 1, oj * 2 + 2) if 0 <= i < 4 and 0 <= j < 4]
            row.append(sum(cells) / (len(cells) if exclusive else 9))
        want.append(row)
    np.testing.assert_allclose(y[0, 0].numpy(), np.array(want), rtol=1e-6)


def test_special_functions():
    x = torch.tensor([2.0, 3.0, 4.5], dtype=torch.float64)
    q = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    (z,) = run_op("Zeta", [("x", x), ("q", q)], outputs=[("z", None)])
    hurwitz = [sum((qq + k) ** -xx for k in range(200000)) for xx, qq in zip(x.tolist(), q.tolist())]
    np.testing.assert_allclose(z.numpy(), hurwitz, rtol=1e-4)  # the series, truncated
    a, v = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.5, 3.0], dtype=torch.float64)
    (lo,) = run_op("Igamma", [("a", a), ("x", v)], outputs=[("z", None)])
    (hi,) = run_op("Igammac", [("a", a), ("x", v)], outputs=[("z", None)])
    # P(1, x) = 1 - e^-x; P(2, x) = 1 - e^-x (1 + x); Q = 1 - P
    want = [1 - math.exp(-0.5), 1 - math.exp(-3.0) * 4.0]
    np.testing.assert_allclose(lo.numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(hi.numpy(), [1 - w for w in want], rtol=1e-10)
    (g,) = run_op("Gcd", [("x1", torch.tensor([12, -18, 7])), ("x2", torch.tensor([18, 12, 0]))])
    assert g.tolist() == [math.gcd(12, 18), math.gcd(-18, 12), math.gcd(7, 0)]
    p = torch.tensor([0.1, 0.5, 0.975], dtype=torch.float64)
    (nd,) = run_op("Ndtri", [("x", p)])
    np.testing.assert_allclose(elementwise(lambda t: 0.5 * math.erfc(-t / math.sqrt(2)), nd),
                               p.numpy(), rtol=1e-10)
    t = torch.tensor([0.5, 2.0], dtype=torch.float64)
    (i0e,) = run_op("BesselI0e", [("x", t)])
    (i1e,) = run_op("BesselI1e", [("x", t)])
    i0 = [sum((v / 2) ** (2 * k) / math.factorial(k) ** 2 for k in range(40)) for v in t.tolist()]
    i1 = [sum((v / 2) ** (2 * k + 1) / (math.factorial(k) * math.factorial(k + 1))
              for k in range(40)) for v in t.tolist()]
    np.testing.assert_allclose(i0e.numpy(), [math.exp(-v) * w for v, w in zip(t.tolist(), i0)],
                               rtol=1e-12)
    np.testing.assert_allclose(i1e.numpy(), [math.exp(-v) * w for v, w in zip(t.tolist(), i1)],
                               rtol=1e-12)
