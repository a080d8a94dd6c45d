"""The public dynamo_export: files written, parsed back, valid against the GE registry."""
import os

import pytest
import torch

import torchair_dist
from torchair_dist.backends.ge.proto.ge_ir_pb2 import ModelDef
from torchair_dist.backends.ge.registry_check import validate as validate_ge
from torchair_dist.errors import ConfigError


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


def test_export_writes_a_parsable_valid_model(tmp_path):
    out = torchair_dist.dynamo_export(torch.randn(2, 8), model=Net(),
                                      export_path=str(tmp_path / "exp"), export_name="net")
    files = sorted(os.listdir(out))
    assert "dynamo.pbtxt" in files and "net.air" in files
    model = ModelDef()
    model.ParseFromString(open(os.path.join(out, "net.air"), "rb").read())
    graph = model.graph[0]
    validate_ge(graph)
    types = [op.type for op in graph.op]
    assert "MatMulV2" in types or "MatMul" in types or "BatchMatMulV2" in types
    assert "Const" in types, "weights are embedded below the size threshold"


def test_export_does_not_touch_the_callers_config(tmp_path):
    cfg = torchair_dist.CompilerConfig()
    torchair_dist.dynamo_export(torch.randn(2, 8), model=Net(), export_path=str(tmp_path),
                                config=cfg)
    assert cfg == torchair_dist.CompilerConfig()


def test_export_refuses_symlinks_and_non_modules(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="symlink"):
        torchair_dist.dynamo_export(torch.randn(2, 8), model=Net(), export_path=str(link))
    with pytest.raises(TypeError, match="nn.Module"):
        torchair_dist.dynamo_export(torch.randn(2, 8), model=lambda x: x)
