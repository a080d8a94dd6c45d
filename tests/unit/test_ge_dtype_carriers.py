"""Operands a GE op's IR refuses are carried in another dtype: bool as 0/1 integers (Transpose,
StridedSlice, Less, Maximum, ... take no DT_BOOL), bfloat16 in float32. Results equal eager and
keep eager's dtype; every graph stays valid against the registry. And the reference executor,
with GE validation on, checks each kernel's output dtype against the graph's declaration (a
kernel that followed torch's integer promotion instead of the GE op's rule gave an int32
``cumsum(dtype=int32)`` back as int64)."""
import pytest
import torch

from test_ge_common import assert_same, ge_roundtrip  # noqa: F401  (ge_validate is autouse)

from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.cpu.ge_reference import ReferenceRuntime
from torchair_dist.errors import GeRuntimeError


def _types(converted):
    return [op.type for op in converted.model.graph[0].op]


def _bools(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) > 0.5


@pytest.mark.parametrize("fn", [
    lambda a, b: a.t(),
    lambda a, b: a[:, 1:3],
    lambda a, b: torch.maximum(a, b),
    lambda a, b: torch.minimum(a, b),
    lambda a, b: a > b,
    lambda a, b: a <= b,
    lambda a, b: torch.where(a, b, a.t()),
    lambda a, b: a + b,
    lambda a, b: a.amax(0),
    lambda a, b: a.amin(1),
    lambda a, b: torch.nn.functional.pad(a, (1, 2)),
    lambda a, b: a.unbind(0),
], ids=["t", "slice", "maximum", "minimum", "gt", "le", "where", "add", "amax", "amin", "pad",
        "unbind"])
def test_bool_operands_equal_eager(fn):
    a, b = _bools(4, 4), _bools(4, 4, seed=1)
    out, converted, _ = ge_roundtrip(fn, a, b)
    assert_same(fn(a, b), out)
    assert "Cast" in _types(converted)  # carried through an integer type


def test_bool_add_reads_back_as_or_not_as_a_sum():
    # True + True is True in torch; carried as int32 it is 2, which reads back as True
    a = torch.tensor([True, True, False, False])
    b = torch.tensor([True, False, True, False])
    out, _, _ = ge_roundtrip(lambda x, y: x + y, a, b)
    assert out[0].dtype == torch.bool and out[0].tolist() == [True, True, True, False]


def test_a_port_that_takes_bool_keeps_it():
    # SelectV2's condition is DT_BOOL only: it must not be carried (the graph would be invalid)
    cond, x = _bools(6), torch.randn(6)
    out, converted, _ = ge_roundtrip(lambda c, v: torch.where(c, v, -v), cond, x)
    assert_same(torch.where(cond, x, -x), out)
    ops = {op.name: op for op in converted.model.graph[0].op}
    select = [op for op in ops.values() if op.type == "SelectV2"]
    assert select and all(ops[op.input[0].split(":")[0]].type == "Data" for op in select)


def test_bitwise_not_of_bool_is_logical_not():
    a = _bools(8)
    out, converted, _ = ge_roundtrip(lambda x: ~x, a)
    assert_same(~a, out)
    assert "LogicalNot" in _types(converted) and "Invert" not in _types(converted)


@pytest.mark.parametrize("reduce", ["amax", "amin", "sum", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_bool_scatter_reduce(reduce, include_self):
    x, src = _bools(3, 5), _bools(3, 5, seed=2)
    index = torch.tensor([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0], [1, 0, 0, 2, 2]])

    def fn(x, index, src):
        return x.scatter_reduce(1, index, src, reduce, include_self=include_self)

    out, _, _ = ge_roundtrip(fn, x, index, src)
    assert_same(fn(x, index, src), out)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_cumsum_and_cumprod_keep_the_requested_dtype(dtype):
    x = torch.arange(1, 7, dtype=dtype)

    def fn(v):
        return torch.cumsum(v, 0, dtype=dtype), torch.cumprod(v, 0, dtype=dtype)

    out, _, _ = ge_roundtrip(fn, x)
    assert_same(fn(x), out)


def test_a_kernel_returning_another_dtype_than_declared_is_an_error():
    # Cumsum of int32 declared int32 is right; declared int64 it is not what GE computes
    b = GraphBuilder("g")
    x = b.data(torch.int32, (4,))
    y = b.op("Cumsum", [("x", x), ("axis", b.const(0, torch.int64))], None,
             [("y", (torch.int64, (4,)))])
    b.net_output(y)
    runtime = ReferenceRuntime(check=True)
    runtime.load(b.model().SerializeToString())
    with pytest.raises(GeRuntimeError, match=r"Cumsum .* returned torch.int32, the graph "
                                             r"declares torch.int64"):
        runtime.run([torch.arange(4, dtype=torch.int32)])
    unchecked = ReferenceRuntime(check=False)
    unchecked.load(b.model().SerializeToString())
    assert unchecked.run([torch.arange(4, dtype=torch.int32)])[0].dtype == torch.int32
