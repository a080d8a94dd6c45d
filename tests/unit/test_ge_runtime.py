"""The GE runtimes: the reference executor's generated code and the CANN adapter's guard."""
import pytest
import torch

from test_ge_common import ge_roundtrip, ge_validate  # noqa: F401

from torchair_dist.backends.ge.runtime import GeRuntime, GeRuntimeError, ReferenceRuntime, create_runtime
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
    assert body[-1].strip().startswith("return [")
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
