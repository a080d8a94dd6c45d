"""The GE IR schema (wire compatibility), the graph builder and the registry checker."""
import os
import subprocess
import sys

import pytest
import torch

from test_ge_common import BUILT_GRAPHS, ge_validate  # noqa: F401

from torchair_dist.backends.ge import builder as gb
from torchair_dist.backends.ge.dtypes import ge_dtype, torch_dtype
from torchair_dist.backends.ge.proto import AttrDef, DataType, ModelDef
from torchair_dist.backends.ge.registry_check import (ENV_REGISTRY, GeGraphInvalidError,
                                                      GeRegistryError, check_graph, load_registry,
                                                      validate)
from torchair_dist.backends.ge.decode import decode_attr, decode_tensor
from torchair_dist.errors import TorchairDistError

PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "torchair_dist", "backends", "ge",
                         "proto")

# Field numbers of GE's ge_ir.proto (package ge.proto), the wire contract.
GE_FIELDS = {
    "ModelDef": {"name": 1, "version": 2, "custom_version": 3, "graph": 7, "attr": 11},
    "GraphDef": {"name": 1, "input": 4, "output": 5, "op": 6, "attr": 11},
    "OpDef": {"name": 1, "type": 2, "input": 5, "attr": 10, "has_out_attr": 20, "id": 21,
              "stream_id": 22, "input_name": 23, "src_name": 24, "src_index": 25,
              "dst_name": 26, "dst_index": 27, "input_i": 28, "output_i": 29, "workspace": 30,
              "workspace_bytes": 31, "is_input_const": 32, "input_desc": 33, "output_desc": 34,
              "subgraph_name": 35},
    "TensorDescriptor": {"name": 1, "dtype": 2, "shape": 3, "layout": 4, "attr": 5,
                         "has_out_attr": 9, "size": 10, "weight_size": 11, "reuse_input": 12,
                         "output_tensor": 13, "device_type": 14, "input_tensor": 15,
                         "real_dim_cnt": 16, "reuse_input_index": 17, "data_offset": 18,
                         "cmps_size": 19, "cmps_tab": 20, "cmps_tab_offset": 21},
    "ShapeDef": {"dim": 1},
    "TensorDef": {"desc": 1, "data": 2},
    "NamedAttrs": {"name": 1, "attr": 2},
    "AttrDef": {"list": 1, "s": 2, "i": 3, "f": 4, "b": 5, "bt": 7, "func": 10, "td": 11, "t": 12,
                "g": 13, "list_list_int": 14, "dt": 15, "list_list_float": 16, "expression": 17},
    "AttrDef.ListValue": {"s": 2, "i": 3, "f": 4, "b": 5, "bt": 7, "td": 8, "t": 9, "g": 10,
                          "na": 11, "dt": 12, "val_type": 20},
}


def _descriptor(name):
    from torchair_dist.backends.ge.proto import ge_ir_pb2

    parts = name.split(".")
    desc = ge_ir_pb2.DESCRIPTOR.message_types_by_name[parts[0]]
    for p in parts[1:]:
        desc = desc.nested_types_by_name[p]
    return desc


@pytest.mark.parametrize("message", sorted(GE_FIELDS))
def test_proto_field_numbers_match_ge(message):
    desc = _descriptor(message)
    assert desc.full_name.startswith("ge.proto.")
    for field, number in GE_FIELDS[message].items():
        assert desc.fields_by_name[field].number == number, f"{message}.{field}"


def test_datatype_numbers_match_ge():
    assert (DataType.DT_FLOAT, DataType.DT_FLOAT16, DataType.DT_INT32, DataType.DT_INT64,
            DataType.DT_BOOL, DataType.DT_DOUBLE, DataType.DT_BF16) == (1, 2, 7, 8, 11, 12, 27)


def test_committed_pb2_is_reproducible(tmp_path):
    """Regenerate with the pinned protoc when it is installed (see proto/README.md)."""
    tools = os.path.join(os.path.dirname(__file__), "..", "..", "build", "grpc_tools_1_62")
    if not os.path.isdir(os.path.join(tools, "grpc_tools")):
        pytest.skip("pinned grpcio-tools not installed in build/grpc_tools_1_62 (make proto)")
    env = dict(os.environ, PYTHONPATH=tools)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO_DIR,
                    f"--python_out={tmp_path}", os.path.join(PROTO_DIR, "ge_ir.proto")],
                   check=True, env=env)
    with open(os.path.join(PROTO_DIR, "ge_ir_pb2.py")) as a, open(tmp_path / "ge_ir_pb2.py") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                   torch.bool, torch.complex64])
def test_dtype_mapping_round_trips(dtype):
    assert torch_dtype(ge_dtype(dtype)) == dtype
    t = (torch.arange(6) % 2).to(dtype).reshape(2, 3)
    tdef = gb.fill_tensor_def(ModelDef().graph.add().op.add().attr["v"].t, t)
    assert torch.equal(decode_tensor(tdef), t)


def _small_graph():
    b = gb.GraphBuilder("g")
    x = b.data(torch.float32, (2, -1))
    n = b.data(torch.int64, (), placement="CPU")
    w = b.const(torch.ones(3, 4))
    (mm,) = b.op("MatMulV2", [("x1", x), ("x2", w), ("bias", None)],
                 {"transpose_x1": False, "transpose_x2": False}, [("y", (torch.float32, (2, 4)))])
    (ar,) = b.op("HcomAllReduce", [("x", mm)], {"reduction": "sum", "group": "tag=;ranks=0"},
                 [("y", (torch.float32, (2, 4)))], control=[n])
    b.net_output([ar, n], control=[mm])
    return b


def test_builder_writes_edges_descs_and_attrs():
    g = _small_graph().graph
    ops = {op.name: op for op in g.op}
    assert [op.type for op in g.op] == ["Data", "Data", "Const", "MatMulV2", "HcomAllReduce",
                                        "NetOutput"]
    assert list(ops["MatMulV2"].input) == ["arg0:0", "Const:0"]
    assert [d.name for d in ops["MatMulV2"].input_desc] == ["x1", "x2"]
    assert list(ops["arg0"].output_desc[0].shape.dim) == [2, -1]
    assert ops["arg1"].output_desc[0].device_type == "CPU"
    assert list(ops["HcomAllReduce"].input) == ["MatMulV2:0", "arg1:-1"]
    assert list(ops["NetOutput"].input) == ["HcomAllReduce:0", "arg1:0", "MatMulV2:-1"]
    assert [d.name for d in ops["NetOutput"].input_desc] == ["x0", "x1"]
    assert ops["HcomAllReduce"].attr["group"].s == b"tag=;ranks=0"
    assert ops["arg1"].attr["index"].i == 1
    assert check_graph(g) == []
    BUILT_GRAPHS.append(_small_graph().model())


def test_attr_encoding_by_python_type():
    for value, field in [(True, "b"), (3, "i"), (2.5, "f"), ("s", "s"), (torch.float16, "dt"),
                         ([1, 2], "list"), ([], "list"), ([[1, 2], [3]], "list_list_int"),
                         (torch.zeros(2), "t"), ([1.0, 2.0], "list"), (["a"], "list"),
                         ([torch.int32], "list")]:
        attr = AttrDef()
        gb.set_attr(attr, value)
        assert attr.WhichOneof("value") == field
    attr = AttrDef()
    gb.set_attr(attr, [])
    assert attr.list.val_type == AttrDef.ListValue.VT_LIST_INT
    for value in ([1, 2], [1.5], [True], ["x"], [[1], [2, 3]]):
        attr = AttrDef()
        gb.set_attr(attr, value)
        assert decode_attr(attr) == value
    with pytest.raises(gb.GeBuildError):
        gb.set_attr(AttrDef(), object())


def test_serialized_model_parses_back_identically():
    model = _small_graph().model()
    data = model.SerializeToString()
    again = ModelDef()
    again.ParseFromString(data)
    assert again == model


def _problems(mutate):
    b = _small_graph()
    mutate(b.graph)
    return check_graph(b.graph)


def test_registry_check_reports_every_problem():
    def unknown_type(g):
        g.op[3].type = "NoSuchOp"
    assert any("not in the GE operator registry" in p for p in _problems(unknown_type))

    def missing_required_attr(g):
        del g.op[4].attr["group"]
    assert any("required attribute 'group'" in p for p in _problems(missing_required_attr))

    def wrong_attr_type(g):
        g.op[4].attr["fusion"].s = b"1"
    assert any("'fusion' is not of type Int" in p for p in _problems(wrong_attr_type))

    def swapped_inputs(g):
        d = g.op[3].input_desc
        d[0].name, d[1].name = "x2", "x1"
    assert any("inputs:" in p for p in _problems(swapped_inputs))

    def dangling(g):
        g.op[3].input[0] = "nowhere:0"
    assert any("not an output of an earlier op" in p for p in _problems(dangling))

    def data_after_control(g):
        g.op[4].input[:] = ["arg1:-1", "MatMulV2:0"]
    assert any("after a control edge" in p for p in _problems(data_after_control))

    def undeclared_attr(g):
        g.op[3].attr["bogus"].i = 1
    assert any("'bogus' is not declared" in p for p in _problems(undeclared_attr))

    b = _small_graph()
    b.graph.op[3].type = "NoSuchOp"
    with pytest.raises(GeGraphInvalidError, match="NoSuchOp"):
        validate(b.model())


def test_missing_registry_raises_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_REGISTRY, str(tmp_path / "nope.json"))
    with pytest.raises(GeRegistryError, match="TORCHAIR_DIST_GE_REGISTRY") as e:
        load_registry()
    assert isinstance(e.value, TorchairDistError)


def test_every_converter_declares_registered_ge_ops():
    from torchair_dist.backends.ge.converters import CONVERTERS

    registry = load_registry()
    missing = {c.target: [t for t in c.emits if t not in registry] for c in CONVERTERS.values()}
    assert not {k: v for k, v in missing.items() if v}
