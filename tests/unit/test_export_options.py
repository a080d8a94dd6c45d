"""export.inputs_name and export.experimental.enable_record_nn_module_stack: read back from the
exported .air (and checked against the GE registry and the reference executor)."""
import json
import os

import pytest
import torch

import torchair_dist
from torchair_dist.backends.ge.export import ExportError
from torchair_dist.backends.ge.proto import ModelDef
from torchair_dist.backends.ge.registry_check import validate
from torchair_dist.cpu.ge_reference import ReferenceRuntime

LINEAR = "torch.nn.modules.linear.Linear"
SEQUENTIAL = "torch.nn.modules.container.Sequential"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 4)
        self.seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 2))

    def forward(self, x, y):
        return self.seq(self.fc(x) + y)


def _export(tmp_path, **options):
    cfg = torchair_dist.CompilerConfig()
    for path, value in options.items():
        cfg.option(path).set(value)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    out_dir = torchair_dist.dynamo_export(x, y, model=Net(), export_path=str(tmp_path),
                                          export_name="net", config=cfg)
    model = ModelDef()
    with open(os.path.join(out_dir, "net.air"), "rb") as f:
        model.ParseFromString(f.read())
    validate(model)
    return model, (x, y), out_dir


def _inputs(model):
    return {op.attr["index"].i: op.name for op in model.graph[0].op if op.type == "Data"}


def test_inputs_name_names_the_data_ops_and_every_reference(tmp_path):
    plain, _, _ = _export(tmp_path / "plain")
    old = _inputs(plain)
    model, (x, y), out_dir = _export(tmp_path / "named",
                                     **{"export.inputs_name": {0: "tokens", 1: "residual"}})
    assert _inputs(model) == {0: "tokens", 1: "residual"}
    sources = [s.rpartition(":")[0] for op in model.graph[0].op for s in op.input]
    assert "tokens" in sources and "residual" in sources
    assert not set(old.values()) & set(sources)  # nothing refers to the old names
    assert "tokens" in open(os.path.join(out_dir, "dynamo.pbtxt")).read()
    runtime = ReferenceRuntime()
    runtime.load(model.SerializeToString())
    with torch.no_grad():
        torch.testing.assert_close(runtime.run([x, y])[0], Net()(x, y))


def test_inputs_name_may_name_some_inputs(tmp_path):
    model, _, _ = _export(tmp_path, **{"export.inputs_name": {1: "residual"}})
    names = _inputs(model)
    assert names[1] == "residual" and names[0] != "residual"


@pytest.mark.parametrize("value, match", [
    ({2: "z"}, r"key 2 is not an input index .*0\.\.1"),
    ({"0": "x"}, r"key '0' is not an input index"),
    ({0: ""}, r"inputs_name\[0\] = '': expected a non-empty str"),
    ({0: 7}, r"inputs_name\[0\] = 7"),
    ({0: "a", 1: "a"}, r"\['a'\] are used twice"),
    ({0: "a", 1: "b", 2: "c"}, r"names 3 inputs but the exported graph has 2"),
])
def test_bad_inputs_name_is_a_clear_error(tmp_path, value, match):
    with pytest.raises(ExportError, match=match):
        _export(tmp_path, **{"export.inputs_name": value})


def _stacks(model):
    return {op.name: json.loads(op.attr["_nn_module_stack"].s)
            for op in model.graph[0].op if "_nn_module_stack" in op.attr}


def test_nn_module_stack_is_recorded_on_ops(tmp_path):
    model, _, _ = _export(tmp_path,
                          **{"export.experimental.enable_record_nn_module_stack": True})
    stacks = _stacks(model)
    found = {json.dumps(s) for s in stacks.values()}
    assert json.dumps([["fc", LINEAR]]) in found
    assert json.dumps([["seq", SEQUENTIAL], ["seq.1", LINEAR]]) in found
    assert any(s[-1][0] == "seq.0" for s in stacks.values())  # the ReLU
    ops = model.graph[0].op
    unannotated = [op for op in ops if op.name not in stacks]
    assert any(op.type == "Data" for op in unannotated)
    assert any(op.type not in ("Data", "Const", "NetOutput") for op in unannotated)  # the add


def test_nn_module_stack_is_off_by_default(tmp_path):
    model, _, _ = _export(tmp_path)
    assert _stacks(model) == {}
