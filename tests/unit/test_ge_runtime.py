"""The GE runtimes: the reference executor's generated code and the CANN adapter's guard."""
import pytest
import torch

from test_ge_common import ge_roundtrip, ge_validate  # noqa: F401

from torchair_dist.backends.ge.runtime import GeRuntime, GeRuntimeError, create_runtime
from torchair_dist.cpu.ge_reference import ReferenceRuntime
from torchair_dist.errors import BackendUnavailableError


def test_reference_executor_is_straight_line_code():
    def fn(x, w):
        return torch.softmax(torch.relu(x @ w) + 1, -1).sum(0)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    outs, conv, rt = ge_roundtrip(fn, x, w)
    torch.testing.assert_close(outs[0], fn(x, w))
    body = rt.code.splitlines()
    assert body[0] == "def ge_graph(inputs):"
    assert not any(line.strip().startswith(("for ", "while ", "if ")) for line in body)
    ops = [op for op in rt.model.graph[0].op if op.type not in ("Const", "NetOutput")]
    calls = [line for line in body if "= inputs[" in line or "= k_" in line]
    assert len(calls) == len(ops)  # one line per GE op
    assert body[-1].strip().startswith("return _as_ge_returns([")  # GE's fresh dense outputs
    assert any(line.strip().startswith("del ") for line in body)  # dead values are released


def test_reference_executor_parses_the_bytes_it_is_given():
    rt = ReferenceRuntime()
    with pytest.raises(Exception):
        rt.load(b"\xff\xff not a model")
    with pytest.raises(GeRuntimeError, match="before load"):
        ReferenceRuntime().run([])


def test_unknown_ge_op_has_no_kernel():
    from torchair_dist.backends.ge.builder import GraphBuilder

    b = GraphBuilder("g")
    x = b.data(torch.float32, (2,))
    (y,) = b.op("Mish", [("x", x)], {}, [("y", (torch.float32, (2,)))])
    b.net_output([y])
    with pytest.raises(GeRuntimeError, match="no kernel for GE op Mish"):
        ReferenceRuntime().load(b.model().SerializeToString())


def test_auto_runtime_is_the_reference_without_npu():
    rt = create_runtime("auto")
    assert isinstance(rt, GeRuntime) and rt.name == "reference"


def test_cann_runtime_reports_missing_dependencies():
    try:
        import torch_npu  # noqa: F401
        import torchair  # noqa: F401
        pytest.skip("torch_npu and torchair are importable here")
    except Exception:
        pass
    with pytest.raises(BackendUnavailableError, match="torch_npu|torchair"):
        create_runtime("cann")


@pytest.mark.parametrize("control_edge", [False, True])
def test_a_collective_folded_into_a_reshape_still_finishes_before_its_control_successor(
        one_rank_group, control_edge):
    """HcomAllReduce -> Reshape is folded into one pending ``done``; an op with a control edge
    from the HcomAllReduce itself must still run after the collective finished."""
    import torch.distributed as dist

    from torchair_dist.backends.ge.builder import GraphBuilder
    from torchair_dist.collectives import groups

    b = GraphBuilder("g")
    x = b.data(torch.float32, (2, 3))
    (ar,) = b.op("HcomAllReduce", [("x", x)], {
        "reduction": "sum", "group": groups.ge_group_attr(groups.stable_name_of(
            dist.group.WORLD)), "fusion": 0}, [("y", (torch.float32, (2, 3)))])
    shape = b.const(torch.tensor([6], dtype=torch.int64))
    (flat,) = b.op("Reshape", [("x", ar), ("shape", shape)], {},
                   [("y", (torch.float32, (6,)))])
    (neg,) = b.op("Neg", [("x", x)], {}, [("y", (torch.float32, (2, 3)))],
                  control=[ar] if control_edge else ())
    b.net_output([flat, neg])
    rt = ReferenceRuntime()
    rt.load(b.model().SerializeToString())
    value = torch.randn(2, 3)
    flat_out, neg_out = rt.run([value])
    assert torch.equal(flat_out, value.reshape(6)) and torch.equal(neg_out, -value)
    lines = rt.code.splitlines()
    finish = next(i for i, line in enumerate(lines) if "_0 = p_" in line)
    negate = next(i for i, line in enumerate(lines) if "= k_Neg(" in line)
    assert any("lambda _p=" in line for line in lines)  # the Reshape was folded
    assert (finish < negate) == control_edge, rt.code
