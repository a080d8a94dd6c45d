"""Export of per-rank GE graphs: .air + dynamo.pbtxt, weights as Const or FileConstant files,
ATC configs, symlink refusal. Every exported file is parsed back and checked with the registry."""
import json
import os

import pytest
import torch

from test_ge_common import BUILT_GRAPHS, aot_compile, convert, ge_validate, stand_in_config  # noqa: F401

from torchair_dist.backends.ge.builder import GraphBuilder
from torchair_dist.backends.ge.export import ExportError, export_model, write_atc_configs
from torchair_dist.backends.ge.fx2ge import ConvertedGraph
from torchair_dist.backends.ge.proto import ModelDef
from torchair_dist.backends.ge.registry_check import validate
from torchair_dist.cpu.ge_reference import ReferenceRuntime


def _mlp(x, w1, b1, w2):
    return torch.relu(x @ w1 + b1) @ w2


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(4, 8), torch.randn(8), torch.randn(8, 2)


def _load_air(path):
    model = ModelDef()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    validate(model)
    BUILT_GRAPHS.append(model)
    return model


def test_export_mode_writes_air_and_pbtxt_with_const_weights(tmp_path):
    x, w1, b1, w2 = _inputs()
    cfg = stand_in_config(export__export_mode=True, export__export_path_dir=str(tmp_path),
                          export__export_name="mlp",
                          export__weight_name={id(w1): "layer.w1", id(w2): "layer.w2"})
    with torch.no_grad():
        out = aot_compile(_mlp, cfg, static=[1, 2, 3])(x, w1, b1, w2)
    torch.testing.assert_close(out, _mlp(x, w1, b1, w2))
    air = tmp_path / "mlp.air"  # not distributed: no rank_{r} folder
    assert air.exists() and (tmp_path / "dynamo.pbtxt").exists()
    model = _load_air(air)
    ops = model.graph[0].op
    data = [op for op in ops if op.type == "Data"]
    assert [op.attr["index"].i for op in data] == [0]
    weights = {op.attr["_weight_name"].s.decode() for op in ops if "_weight_name" in op.attr}
    assert {"layer.w1", "layer.w2"} <= weights and len(weights) == 3
    rt = ReferenceRuntime()
    rt.load(air.read_bytes())
    torch.testing.assert_close(rt.run([x])[0], _mlp(x, w1, b1, w2))
    assert 'op: "Const"' in (tmp_path / "dynamo.pbtxt").read_text()


def _converted():
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs = _inputs()
    return convert(make_fx(_mlp, tracing_mode="fake")(*inputs), inputs), inputs


def test_large_weights_become_file_constants(tmp_path):
    conv, inputs = _converted()
    air = export_model(conv, inputs, export_path=str(tmp_path), export_name="m", rank=1,
                       world_size=2, static_input_indices=[1, 3], weight_names={1: "a.w1"},
                       const_limit_bytes=0)
    assert air == str(tmp_path / "rank_1" / "m1.air")
    model = _load_air(air)
    files = {op.attr["file_path"].s.decode(): op for op in model.graph[0].op
             if op.type == "FileConstant"}
    assert set(files) == {"a_w1", "w2_1"}  # unnamed weights keep the placeholder name
    raw = (tmp_path / "rank_1" / "a_w1").read_bytes()
    assert torch.equal(torch.frombuffer(bytearray(raw), dtype=torch.float32).view(4, 8), inputs[1])
    assert list(files["a_w1"].attr["shape"].list.i) == [4, 8]
    assert [op.attr["index"].i for op in model.graph[0].op if op.type == "Data"] == [0, 1]
    assert (tmp_path / "rank_1" / "dynamo.pbtxt").exists()


def test_symlinked_export_path_is_refused(tmp_path):
    conv, inputs = _converted()
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ExportError, match="symlink"):
        export_model(conv, inputs, export_path=str(link / "out"), export_name="m")
    assert not (real / "out").exists()


def test_auto_atc_configs_on_rank0(tmp_path):
    b = GraphBuilder("g")
    x = b.data(torch.float32, (2,))
    (y,) = b.op("HcomAllReduce", [("x", x)], {"reduction": "sum", "group": "tag=;ranks=0,1"},
                [("y", (torch.float32, (2,)))])
    b.net_output([y])
    conv = ConvertedGraph(b.model(), ["tensor"], [("ge", 0)], [], "")
    for rank in (0, 1):
        export_model(conv, [torch.ones(2)], export_path=str(tmp_path), export_name="e",
                     rank=rank, world_size=2, auto_atc_config=True)
        _load_air(tmp_path / f"rank_{rank}" / f"e{rank}.air")
    relation = json.loads((tmp_path / "model_relation_config.json").read_text())
    assert relation["comm_group"] == [{"group_name": "tag=;ranks=0,1", "group_rank_list": "[0, 1]"}]
    assert [d["submodel_name"] for d in relation["deploy_config"]] == ["e0.air", "e1.air"]
    assert relation["rank_table"][1] == {"rank_id": 1, "model_instance_id": 1}
    numa = json.loads((tmp_path / "numa_config.json").read_text())
    node = numa["cluster"][0]["cluster_nodes"][0]
    assert node["node_type"] == "ATLAS800" and [i["item_id"] for i in node["item_list"]] == [0, 1]
    assert sorted(os.listdir(tmp_path)) == ["model_relation_config.json", "numa_config.json",
                                            "rank_0", "rank_1"]
    write_atc_configs(str(tmp_path), "e", [0, 1], [])
