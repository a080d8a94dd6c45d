"""The compile cache against misuse: an entry is loaded only by the model and values it was
compiled for, and every wrong argument is a ``ConfigError`` that names it.

Before the key covered the values a graph bakes in and entries recorded their key, the first
three cases loaded the wrong entry and computed a wrong result silently.
"""
import os
import shutil

import pytest
import torch
import torch.nn as nn

import torchair_dist
from torchair_dist.errors import ConfigError, ConfigTypeError

GAIN = 2.0  # a global the forward reads


class Scaled(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = scale  # a plain attribute: Dynamo bakes it into the graph

    def forward(self, x):
        return self.lin(x) * self.scale


class WithGlobal(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * GAIN


class Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) - 1


def _fresh(module, tmp_path, mode):
    """What a new process does: a new cache_compile over the same directory."""
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    torch._dynamo.reset()
    return torchair_dist.cache_compile(module, config=cfg, cache_dir=str(tmp_path))


MODES = ["npugraph_ex", "max-autotune"]


@pytest.mark.parametrize("mode", MODES)
def test_a_changed_plain_attribute_misses_the_cache(tmp_path, mode):
    torch.manual_seed(0)
    model = Scaled(2.0).eval()
    x = torch.randn(2, 4)
    first = _fresh(model, tmp_path, mode)
    with torch.no_grad():
        assert torch.allclose(first(x), model(x))
    assert first.last_source == "compiled"
    model.scale = 3.0  # the same class, the same weights: a later run with another value
    second = _fresh(model, tmp_path, mode)
    with torch.no_grad():
        out, want = second(x), model(x)
    assert second.last_source == "compiled", "loaded the entry compiled with scale=2.0"
    assert torch.allclose(out, want)
    model.scale = 2.0  # and the first value still hits its own entry
    third = _fresh(model, tmp_path, mode)
    with torch.no_grad():
        assert torch.allclose(third(x), model(x))
    assert third.last_source == "cache"


def test_a_changed_global_misses_the_cache(tmp_path):
    global GAIN
    model = WithGlobal().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        _fresh(model, tmp_path, "npugraph_ex")(x)
        GAIN = 5.0
        try:
            second = _fresh(model, tmp_path, "npugraph_ex")
            out = second(x)
            assert second.last_source == "compiled"
            assert torch.allclose(out, model(x))
        finally:
            GAIN = 2.0


@pytest.mark.parametrize("mode", MODES)
def test_an_entry_copied_from_another_models_directory_is_refused(tmp_path, mode):
    x = torch.randn(2, 4)
    donor, victim = Scaled(2.0).eval(), Other().eval()
    d = _fresh(donor, tmp_path, mode)
    with torch.no_grad():
        d(x)
    v = _fresh(victim, tmp_path, mode)
    donor_dir, victim_dir = d.directory(), v.directory()
    assert donor_dir != victim_dir
    os.makedirs(os.path.dirname(victim_dir), exist_ok=True)
    shutil.copytree(donor_dir, victim_dir)  # the entry and its index, as they were
    with torch.no_grad():
        out = v(x)
        assert torch.allclose(out, victim(x))
    assert v.last_source == "compiled"
    assert any("saved under model key" in str(r) for r in v.rejections), v.rejections


@pytest.mark.parametrize("argument,value", [
    ("config", "npugraph_ex"), ("dynamic", "yes"), ("cache_dir", 3), ("global_rank", "0"),
    ("tp_rank", 1.5), ("pp_rank", True), ("custom_decompositions", [1]), ("ge_cache", 1),
    ("backend", "npugraph_ex")])
def test_cache_compile_names_a_wrong_argument(argument, value):
    with pytest.raises(ConfigError, match=f"cache_compile: {argument} must be"):
        torchair_dist.cache_compile(Other(), **{argument: value})


@pytest.mark.parametrize("argument,value,error", [
    ("compiler_config", "npugraph_ex", ConfigTypeError),
    ("custom_decompositions", [1], ConfigTypeError),
    ("custom_decompositions", {torch.ops.aten.add.Tensor: 3}, ConfigTypeError)])
def test_get_npu_backend_names_a_wrong_argument(argument, value, error):
    with pytest.raises(error, match=argument):
        torchair_dist.get_npu_backend(**{argument: value})
