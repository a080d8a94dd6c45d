"""TorchAir's converter API: ``register_fx_node_ge_converter`` + ``torchair_dist.ge``, used on a
user's torch.library op, and the refusal message that points to it."""
import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, ge, get_npu_backend, register_fx_node_ge_converter
from torchair_dist.errors import TorchairDistError, UnsupportedOpError

LIB = "tdist_api_test"


@torch.library.custom_op(f"{LIB}::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x + scale * y


@scaled_add.register_fake
def _(x, y, scale):
    return torch.empty_like(x)


@torch.library.custom_op(f"{LIB}::sum_and_max", mutates_args=())
def sum_and_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.sum(-1), x.amax(-1)


@sum_and_max.register_fake
def _(x):
    return x.new_empty(x.shape[:-1]), x.new_empty(x.shape[:-1])


@torch.library.custom_op(f"{LIB}::unconverted", mutates_args=())
def unconverted(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@unconverted.register_fake
def _(x):
    return torch.empty_like(x)


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                         fullgraph=True)


def test_user_converter_for_a_custom_op_runs_in_max_autotune(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")
    seen = {}

    @register_fx_node_ge_converter(torch.ops.tdist_api_test.scaled_add.default)
    def convert(x, y, scale, meta_outputs=None):
        seen["spec"] = (meta_outputs.dtype, meta_outputs.size, x.dtype, x.rank)
        scaled = ge.custom_op("Mul", inputs={"x1": y, "x2": ge.Const(scale, dtype=x.dtype)},
                              outputs=["y"])
        return ge.custom_op("Add", inputs={"x1": x, "x2": scaled}, outputs=["y"])

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    fn = _compile(lambda a, b: torch.ops.tdist_api_test.scaled_add(a, b, 0.5).relu())
    torch.testing.assert_close(fn(x, y), (x + 0.5 * y).relu(), rtol=0, atol=0)
    assert seen["spec"] == (ge.DataType.DT_FLOAT, [3, 4], ge.DataType.DT_FLOAT, 2)


def test_user_converter_with_two_outputs_cast_and_attrs(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")

    @register_fx_node_ge_converter(torch.ops.tdist_api_test.sum_and_max.default)
    def convert(x, meta_outputs=None):
        assert isinstance(meta_outputs, list) and len(meta_outputs) == 2
        axes = ge.Const([x.rank - 1], dtype=ge.DataType.DT_INT64)
        s = ge.custom_op("ReduceSum", inputs={"x": x, "axes": axes}, outputs=["y"],
                         attrs={"keep_dims": ge.attr.Bool(False)})
        m = ge.custom_op("ReduceMax", inputs={"x": x, "axes": axes}, outputs=["y"],
                         attrs={"keep_dims": False})
        s = ge.Cast(ge.Cast(s, dst_type=ge.DataType.DT_DOUBLE), dst_type=torch.float32)
        return s, ge.Clone(m, dependencies=[s])

    x = torch.randn(2, 5)
    fn = _compile(lambda a: torch.ops.tdist_api_test.sum_and_max(a))
    s, m = fn(x)
    torch.testing.assert_close(s, x.sum(-1))
    torch.testing.assert_close(m, x.amax(-1), rtol=0, atol=0)


def test_unknown_op_type_is_refused():
    @register_fx_node_ge_converter(torch.ops.tdist_api_test.scaled_add.default)
    def convert(x, y, scale, meta_outputs=None):
        return ge.custom_op("NoSuchGeOp", inputs={"x": x})

    fn = _compile(lambda a, b: torch.ops.tdist_api_test.scaled_add(a, b, 1.0))
    with pytest.raises(Exception, match="NoSuchGeOp.*not an op type of the GE operator registry"):
        fn(torch.randn(2), torch.randn(2))


def test_ge_ops_outside_a_converter_raise():
    with pytest.raises(TorchairDistError, match="inside a GE converter"):
        ge.Const(1.0)


def test_refusal_names_the_public_api():
    fn = _compile(lambda a: torch.ops.tdist_api_test.unconverted(a))
    with pytest.raises(Exception) as info:
        fn(torch.randn(2))
    root = info.value
    while not isinstance(root, UnsupportedOpError) and (root.__cause__ or getattr(
            root, "inner_exception", None)):
        root = getattr(root, "inner_exception", None) or root.__cause__
    assert isinstance(root, UnsupportedOpError)
    assert "tdist_api_test.unconverted" in str(root)
    assert "register_fx_node_ge_converter" in str(root)


def test_public_names():
    assert torchair_dist.register_fx_node_ge_converter is register_fx_node_ge_converter
    for name in ("custom_op", "Const", "Cast", "Clone", "DataType", "Format", "Tensor",
                 "TensorSpec"):
        assert hasattr(torchair_dist.ge, name)
    assert ge.Format.FORMAT_ND == 2
