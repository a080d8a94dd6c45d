"""Cache entries whose inputs are read through paths (cache/sources.py): the stored grammar is
checked before anything is walked, a tampered path is refused (the function recompiles), and a
path's tensor that changed metadata recompiles instead of running the entry."""
import json
import logging
import os
import types

import pytest
import torch

import torchair_dist
from torchair_dist.cache import sources

STATE = types.SimpleNamespace(scale=torch.arange(4.0))


class UsesState(torch.nn.Module):
    def forward(self, x):
        return x * STATE.scale + 1


def _make(tmp_path):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    return torchair_dist.cache_compile(UsesState().forward, config=cfg,
                                       cache_dir=str(tmp_path / "c"))


def _entry_file(fn):
    d = fn.directory()
    (name,) = [f for f in os.listdir(d) if f.startswith("entry-")]
    return os.path.join(d, name)


@pytest.mark.parametrize("path, ok", [
    ([["self"], ["attr", "w"], ["item", 0]], True),
    ([["module", "pkg.mod"], ["attr", "_ctx"], ["item", "k"]], True),
    ([["closure", "c"]], True),
    ([["global", "os.system"]], False),           # a global name is one identifier
    ([["self"], ["attr", "a.b"]], False),         # attributes are identifiers
    ([["self"], ["call", "f"]], False),           # no other step
    ([["self"], ["item", True]], False),
    ([["eval", "x"]], False),
    ([], False),
])
def test_path_grammar(path, ok):
    assert sources.check_path(path) is ok


def test_a_tampered_path_is_refused_and_recompiled(tmp_path, caplog):
    from torchair_dist.cache.store import INDEX  # noqa: F401 - the layout the test edits

    x = torch.randn(4)
    fn = _make(tmp_path)
    assert torch.equal(fn(x), x * STATE.scale + 1)
    path = _entry_file(fn)
    data = json.load(open(path))
    (spec,) = [s for s in data["inputs"] if s[0] == "source"]
    assert spec[1] == [["global", "STATE"], ["attr", "scale"]]
    spec[1] = [["module", "os"], ["attr", "system"]]  # not a tensor; would never be called
    fn.write_entry(data["signature"], data)  # re-signed as our own write would be
    torch._dynamo.reset()
    again = _make(tmp_path)
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        assert torch.equal(again(x), x * STATE.scale + 1)
    assert again.last_source == "compiled" and again.rejections
    assert "module:os.system" in str(again.rejections[0])


def test_a_path_tensor_of_another_shape_recompiles(tmp_path):
    x = torch.randn(4)
    fn = _make(tmp_path)
    fn(x)
    torch._dynamo.reset()
    again = _make(tmp_path)
    assert torch.equal(again(x), x * STATE.scale + 1) and again.last_source == "cache"
    saved = STATE.scale
    try:
        STATE.scale = torch.tensor([2.0])  # broadcasts: still valid code, another graph
        assert torch.equal(again(x), x * 2.0 + 1) and again.last_source == "compiled"
        assert isinstance(again.rejections[-1], sources.SourceChanged)
    finally:
        STATE.scale = saved
