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


class _Holder:
    def plain(self, a, b=None, *rest, kw=None, **extra):
        pass

    def posonly(self, a, /, b):
        pass


@pytest.mark.parametrize("method_name, name, args, kwargs", [
    ("plain", "a", (1,), {}), ("plain", "a", (), {"a": 2}), ("plain", "b", (1, 3), {}),
    ("plain", "b", (1,), {"b": 4}), ("plain", "b", (1,), {}), ("plain", "kw", (1,), {"kw": 5}),
    ("plain", "rest", (1, 2, 3, 4), {}), ("plain", "a", (1,), {"a": 9}),
    ("posonly", "a", (6, 7), {}), ("posonly", "b", (6,), {"b": 8}), ("posonly", "a", (), {"a": 1}),
])
def test_the_argument_accessor_reads_what_a_full_bind_reads(method_name, name, args, kwargs):
    """The per-entry accessor takes a plain argument by position or keyword without binding the
    signature; every other case (defaulted, keyword-only, *args, a bad call) gives what
    ``inspect.signature(...).bind`` gives, the error included."""
    import inspect

    method = getattr(_Holder(), method_name)
    try:
        want = inspect.signature(method).bind(*args, **kwargs).arguments[name]
    except Exception as exc:  # noqa: BLE001
        want = type(exc)
    try:
        got = sources.accessor([["arg", name]], method)(args, kwargs)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == want


def test_a_getter_resolves_the_path_once_per_entry(monkeypatch):
    """The signature is read when the getter is made, never at a call (the hot path)."""
    import inspect

    holder = _Holder()
    t = torch.ones(2)
    get = sources.make_getter([["arg", "a"], ["item", 0]], sources.tensor_meta(t),
                              holder.plain, True)

    def no_signature(*a, **k):
        raise AssertionError("signature read at call time")

    monkeypatch.setattr(inspect, "signature", no_signature)
    for _ in range(3):
        assert get(([t],), {}) is t
    with pytest.raises(sources.SourceChanged, match="arg:a\\[0\\] is now"):
        get(([torch.ones(3)],), {})
