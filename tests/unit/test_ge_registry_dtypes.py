"""The GE registry check validates every input/output dtype against the dtypes the operator
registry lists for its port (explicit lists plus GE's named classes such as IndexNumberType)."""
import pytest
import torch

from test_ge_common import ge_validate  # noqa: F401

from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.backends.ge.registry_check import (GeGraphInvalidError, _allowed, check_graph,
                                                      validate)


def _move(dtype):
    b = GraphBuilder("g")
    y = b.op("TensorMove", [("x", b.data(dtype, (2,)))], None, [("y", (dtype, (2,)))])
    b.net_output(y)
    return b


def test_a_dtype_outside_the_listed_ones_is_reported_with_op_port_and_dtype():
    b = _move(torch.bfloat16)
    problems = check_graph(b.graph)
    assert any("TensorMove" in p and "input 'x'" in p and "DT_BF16" in p for p in problems)
    assert any("output 'y'" in p for p in problems)
    with pytest.raises(GeGraphInvalidError, match="DT_BF16"):
        validate(b.model())
    assert check_graph(_move(torch.float32).graph) == []


def test_named_dtype_classes_are_expanded():
    # GatherV2.x is BasicType() (no bool); its indices IndexNumberType() (int32/int64 only)
    def gather(x_dtype, idx_dtype):
        b = GraphBuilder("g")
        x, i = b.data(x_dtype, (4,)), b.data(idx_dtype, (2,))
        y = b.op("GatherV2", [("x", x), ("indices", i), ("axis", b.const(0, torch.int64))], None,
                 [("y", (x_dtype, (2,)))])
        b.net_output(y)
        return check_graph(b.graph)

    assert gather(torch.float16, torch.int32) == []
    assert gather(torch.bfloat16, torch.int64) == []
    assert any("input 'x' has dtype DT_BOOL" in p for p in gather(torch.bool, torch.int64))
    assert any("input 'indices' has dtype DT_FLOAT" in p for p in gather(torch.float32, torch.float32))


def test_ports_typed_by_a_variable_or_all_are_not_checked():
    assert _allowed('"T"', ()) is None
    assert _allowed("TensorType::ALL()", ()) is None
    assert _allowed("TensorType({DT_FLOAT32})", ("DT_FLOAT32",)) == frozenset({"DT_FLOAT"})
    assert "DT_INT64" in _allowed("TensorType({BasicType(), DT_BOOL})", ("DT_BOOL",))


def test_dynamic_ports_are_checked_per_tensor():
    b = GraphBuilder("g")
    a, c = b.data(torch.float32, (2,)), b.data(torch.int64, (2,))
    y = b.op("GroupedMatmul", [("x", [a]), ("weight", [c])], {"split_item": 3},
             [("y", [(torch.float32, (2,))])])
    b.net_output(y)
    problems = check_graph(b.graph)
    assert any("input 'weight0' has dtype DT_INT64" in p for p in problems)
    assert not any("'x0'" in p for p in problems)
