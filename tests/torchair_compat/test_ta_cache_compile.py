"""``torchair.inference.cache_compile`` as TorchAir documents it: ``model.forward =
cache_compile(model.forward, ...)``, save on the first process, load (no compile) on the next,
results equal eager; dataclass arguments; a KV cache kept in a plain list attribute;
``dynamic=True`` (TorchAir's default); ``readable_cache``; ``set_dim_gears``."""
import dataclasses
import glob
import logging
import os

import pytest
import torch

import torchair_dist as torchair
from torchair_dist.errors import ConfigError


@dataclasses.dataclass
class Meta:
    positions: torch.Tensor
    scale: float


class Decoder(torch.nn.Module):
    """A decode step with its KV cache in a list attribute and a dataclass argument."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(4, 4)
        self.kv_caches = [torch.zeros(8, 4), torch.zeros(8, 4)]

    def forward(self, x, meta: Meta):
        h = self.proj(x) * meta.scale
        self.kv_caches[0].index_copy_(0, meta.positions, h)
        self.kv_caches[1].index_copy_(0, meta.positions, h * 2)
        return self.kv_caches[0].sum(0) + self.kv_caches[1].sum(0)


def _cfg(mode="npugraph_ex"):
    cfg = torchair.CompilerConfig()
    cfg.mode = mode
    return cfg


def _entries(cache_dir):
    return glob.glob(os.path.join(cache_dir, "**", "entry-*.json"), recursive=True)


def _fresh_process():
    """What a new process starts from: no Dynamo cache."""
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_forward_assigned_saved_then_loaded_with_dataclass_and_list_cache(tmp_path, mode):
    cache_dir = str(tmp_path / "cache")
    ref = Decoder().eval()
    model = Decoder().eval()
    model.forward = torchair.inference.cache_compile(model.forward, config=_cfg(mode),
                                                     cache_dir=cache_dir, dynamic=False)
    calls = [(torch.randn(2, 4), Meta(torch.tensor(p), 0.5)) for p in ([0, 3], [5, 1], [2, 7])]
    with torch.no_grad():
        for x, meta in calls[:2]:
            assert torch.equal(model(x, meta), ref(x, meta))
            assert all(torch.equal(a, b) for a, b in zip(model.kv_caches, ref.kv_caches))
    assert model.forward.last_source in ("compiled", "memory")
    assert len(_entries(cache_dir)) == 1  # saved: the dataclass and the list cache are inputs

    _fresh_process()
    again = Decoder().eval()
    again.kv_caches = [t.clone() for t in model.kv_caches]
    again.forward = torchair.inference.cache_compile(again.forward, config=_cfg(mode),
                                                     cache_dir=cache_dir, dynamic=False)
    x, meta = calls[2]
    with torch.no_grad():
        out = again(x, meta)
        assert again.forward.last_source == "cache"
        assert torch.equal(out, ref(x, meta))
        assert all(torch.equal(a, b) for a, b in zip(again.kv_caches, ref.kv_caches))
    assert again.forward.rejections == []


def test_a_different_dataclass_shape_is_another_entry(tmp_path):
    cache_dir = str(tmp_path / "cache")
    model, ref = Decoder().eval(), Decoder().eval()
    fn = torchair.inference.cache_compile(model.forward, config=_cfg(), cache_dir=cache_dir,
                                          dynamic=False)
    with torch.no_grad():
        for n in (2, 3):
            x, meta = torch.randn(n, 4), Meta(torch.arange(n), 1.0)
            assert torch.equal(fn(x, meta), ref(x, meta))
            assert fn.last_source == "compiled"
    assert len(_entries(cache_dir)) == 2


def test_dynamic_true_is_accepted_with_a_warning_and_caches(tmp_path, caplog):
    cache_dir = str(tmp_path / "cache")
    model, ref = Decoder().eval(), Decoder().eval()
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        fn = torchair.inference.cache_compile(model.forward, config=_cfg(),
                                              cache_dir=cache_dir, dynamic=True)
    assert any("dynamic=True" in r.getMessage() for r in caplog.records)
    x, meta = torch.randn(2, 4), Meta(torch.tensor([1, 4]), 2.0)
    with torch.no_grad():
        assert torch.equal(fn(x, meta), ref(x, meta))
    assert len(_entries(cache_dir)) == 1
    with pytest.raises(ConfigError, match="dynamic"):
        torchair.inference.cache_compile(model.forward, dynamic="yes")


def test_readable_cache_shows_the_stored_graph(tmp_path, capsys):
    cache_dir = str(tmp_path / "cache")
    model = Decoder().eval()
    fn = torchair.inference.cache_compile(model.forward, config=_cfg(), cache_dir=cache_dir)
    with torch.no_grad():
        fn(torch.randn(2, 4), Meta(torch.tensor([0, 1]), 1.0))
    entry, = _entries(cache_dir)
    out_file = str(tmp_path / "readable.txt")
    text = torchair.inference.readable_cache(entry, file=out_file)
    assert "index_copy" in text and "def forward" in text
    assert capsys.readouterr().out.strip() == text.strip()
    assert open(out_file).read() == text
    whole = torchair.inference.readable_cache(cache_dir, print_output=False)
    assert whole == text  # the cache directory: its one entry
    with pytest.raises(ConfigError, match="not a torchair_dist cache entry"):
        bad = tmp_path / "bad.json"
        bad.write_text("[]")
        torchair.inference.readable_cache(str(bad))


def test_set_dim_gears_marks_the_dims_dynamic_and_checks_them(caplog):
    x = torch.randn(4, 8)
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        torchair.inference.set_dim_gears(x, {0: [2, 4, 8]})
    assert x._dynamo_dynamic_indices == {0}
    assert x._torchair_dim_gears == {0: [2, 4, 8]}
    assert any("set_dim_gears" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="dim 5"):
        torchair.inference.set_dim_gears(x, {5: [1]})
    with pytest.raises(ConfigError, match="positive ints"):
        torchair.inference.set_dim_gears(x, {1: []})


class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.proj(x))


class WithMeta(Plain):
    def forward(self, x, meta: Meta):
        return self.proj(x)[meta.positions] * meta.scale


class WithListCache(Plain):
    def __init__(self):
        super().__init__()
        self.caches = [torch.zeros(8, 4)]

    def forward(self, x, positions):
        self.caches[0].index_copy_(0, positions, self.proj(x))
        return self.caches[0].sum(0)


# One fix each (each failed before it): the method is taken when cache_compile is called; a
# dataclass argument's tensors are call inputs; a tensor in a list attribute is module state.
@pytest.mark.parametrize("case", ["forward_assigned", "dataclass_arg", "list_attribute"])
def test_each_fix_alone_saves_an_entry(tmp_path, case):
    cache_dir = str(tmp_path / "cache")
    x = torch.randn(2, 4)
    if case == "forward_assigned":
        model, ref, args = Plain().eval(), Plain().eval(), (x,)
        model.forward = torchair.inference.cache_compile(model.forward, config=_cfg(),
                                                         cache_dir=cache_dir, dynamic=False)
        fn = model.forward
        run = model
    elif case == "dataclass_arg":
        model, ref, args = WithMeta().eval(), WithMeta().eval(), (x, Meta(torch.tensor([1]), 3.0))
        fn = run = torchair.inference.cache_compile(model.forward, config=_cfg(),
                                                    cache_dir=cache_dir, dynamic=False)
    else:
        model, ref, args = WithListCache().eval(), WithListCache().eval(), (x, torch.tensor([2, 6]))
        fn = run = torchair.inference.cache_compile(model.forward, config=_cfg(),
                                                    cache_dir=cache_dir, dynamic=False)
    with torch.no_grad():
        assert torch.equal(run(*args), ref(*args))
    assert fn.last_source == "compiled"
    assert len(_entries(cache_dir)) == 1


class ArgAndListCache(Plain):
    def __init__(self):
        super().__init__()
        self.caches = [torch.zeros(8, 4)]

    def forward(self, x, positions, cache):
        cache.index_copy_(0, positions, self.proj(x))
        return cache.sum(0)


def test_a_tensor_both_in_a_list_attribute_and_an_argument_is_read_from_the_argument(tmp_path):
    cache_dir = str(tmp_path / "cache")
    ref = ArgAndListCache().eval()
    x, pos = torch.randn(2, 4), torch.tensor([1, 5])
    for process in range(2):  # the second one loads the entry
        _fresh_process()
        model = ArgAndListCache().eval()
        fn = torchair.inference.cache_compile(model.forward, config=_cfg(), cache_dir=cache_dir)
        with torch.no_grad():
            fn(x, pos, model.caches[0])  # the attribute's own tensor, as vLLM passes it
            assert fn.last_source == ("cache" if process else "compiled")
            other, expect = torch.full((8, 4), 2.0), torch.full((8, 4), 2.0)
            assert torch.equal(fn(x, pos, other), ref(x, pos, expect))
            assert torch.equal(other, expect)


def test_backend_argument_with_its_config(tmp_path):
    cfg = _cfg()
    model, ref = Plain().eval(), Plain().eval()
    fn = torchair.inference.cache_compile(model.forward, config=cfg,
                                          backend=torchair.get_npu_backend(compiler_config=cfg),
                                          cache_dir=str(tmp_path / "c"))
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(fn(x), ref(x))
    assert fn.last_source == "compiled" and len(_entries(str(tmp_path / "c"))) == 1


def test_torchair_keywords_fullgraph_and_unknown_ones(tmp_path, caplog):
    """vllm-ascend's call: ``cache_compile(fn, dynamic=..., fullgraph=True, cache_dir=...,
    config=config, ge_cache=False)``. fullgraph=True saves; fullgraph=False lets a graph
    break compile (not saved); an unknown keyword is named in one warning."""
    cache_dir = str(tmp_path / "cache")
    model, ref = Decoder().eval(), Decoder().eval()
    fn = torchair.inference.cache_compile(model.forward, dynamic=False, fullgraph=True,
                                          cache_dir=cache_dir, config=_cfg(), ge_cache=False)
    x, meta = torch.randn(2, 4), Meta(torch.tensor([1, 4]), 2.0)
    with torch.no_grad():
        assert torch.equal(fn(x, meta), ref(x, meta))
    assert fn.fullgraph is True and len(_entries(cache_dir)) == 1

    class Breaks(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            torch._dynamo.graph_break()
            return y + 1

    with caplog.at_level(logging.WARNING, "torchair_dist"):
        fn = torchair.inference.cache_compile(Breaks().forward, fullgraph=False,
                                              cache_dir=str(tmp_path / "c2"), config=_cfg(),
                                              dynamic=False, tiling_cache=True, foo=1)
    assert [r.getMessage() for r in caplog.records if "foo" in r.getMessage()] == [
        "cache_compile: keyword argument(s) foo, tiling_cache have no effect here (TorchAir's "
        "cache_compile accepts and drops them too)"]
    x = torch.randn(3)
    assert torch.equal(fn(x), x * 2 + 1)
    assert _entries(str(tmp_path / "c2")) == []  # two graphs: runs compiled, not saved
    with pytest.raises(ConfigError, match="fullgraph"):
        torchair.inference.cache_compile(Breaks().forward, fullgraph="yes")


# -- tensors read through globals, closures and objects -----------------------------------------

class _ForwardContext:
    """vllm's forward context: a global object whose tensors the model reads."""

    def __init__(self, n):
        self.mc2_mask = torch.arange(n) % 2 == 0


_FORWARD_CONTEXT = _ForwardContext(4)


def get_forward_context():
    return _FORWARD_CONTEXT


class MoE(torch.nn.Module):
    """Reads a mask through a global object and a scale captured by a closure."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.proj = torch.nn.Linear(4, 4)
        scale = torch.full((4,), 0.5)

        def mix(h):
            return h * scale
        self.mix = mix

    def forward(self, x):
        h = self.proj(x)
        mask = get_forward_context().mc2_mask
        return self.mix(torch.where(mask[:, None], h, -h))


@pytest.mark.parametrize("mode", ["max-autotune", "npugraph_ex"])
def test_tensors_read_through_a_global_object_and_a_closure_are_cached(tmp_path, mode, caplog):
    global _FORWARD_CONTEXT
    cache_dir = str(tmp_path / "cache")
    ref = MoE().eval()
    model = MoE().eval()
    model.forward = torchair.inference.cache_compile(model.forward, config=_cfg(mode),
                                                     cache_dir=cache_dir, dynamic=False)
    x = torch.randn(4, 4)
    with torch.no_grad():
        assert torch.equal(model(x), ref(x))
    assert len(_entries(cache_dir)) == 1, "the global's tensor must not stop the save"
    entry = open(_entries(cache_dir)[0]).read()
    assert '["module", "test_ta_cache_compile"]' in entry or '"global"' in entry

    _fresh_process()
    again = MoE().eval()
    again.forward = torchair.inference.cache_compile(again.forward, config=_cfg(mode),
                                                     cache_dir=cache_dir, dynamic=False)
    _FORWARD_CONTEXT.mc2_mask = ~_FORWARD_CONTEXT.mc2_mask  # read at call time: new values
    with torch.no_grad():
        assert torch.equal(again(x), ref(x))
        assert again.forward.last_source == "cache"
        _FORWARD_CONTEXT.mc2_mask[0] = False  # in place, too
        assert torch.equal(again(x), ref(x))
        assert again.forward.last_source == "memory"
        # the mask changes shape: the entry no longer fits; it recompiles (as a guard would)
        saved = _FORWARD_CONTEXT
        try:
            _FORWARD_CONTEXT = _ForwardContext(1)
            with caplog.at_level(logging.WARNING, "torchair_dist"):
                assert torch.equal(again(x), ref(x))  # broadcasts over the 4 rows
            assert again.forward.last_source == "compiled"
            assert "mc2_mask is now" in caplog.text
        finally:
            _FORWARD_CONTEXT = saved
    assert torch.equal(again(x), ref(x))


class _MLAAttn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.kv_cache = [[torch.tensor([]), torch.tensor([])]]

    def init_kv_cache(self, shape):
        for j in range(len(self.kv_cache[0])):
            if self.kv_cache[0][j].shape != torch.Size(shape):
                self.kv_cache[0][j] = torch.zeros(shape)

    def forward(self, x):
        cache = self.kv_cache[0][1]
        return x + cache if cache.numel() > 0 else x


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention = [torch.nn.Sequential()]  # a module in a plain list: not a child
        self.self_attention[0].mla_attn = _MLAAttn()

    def forward(self, x):
        return self.self_attention[0].mla_attn(x)


class _BufNotInSelf(torch.nn.Module):
    """The shape of TorchAir's smoke test ``test_cache_compile_buf_not_in_self_with_inline_false``:
    a KV cache in a list of lists of a module that is itself kept in a plain list, so the cache
    is no parameter/buffer of the compiled module; forward replaced by one with extra
    arguments."""

    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(2, 1)
        self.linear2 = torch.nn.Linear(2, 1)
        for p in self.parameters():
            torch.nn.init.ones_(p)
        self.layers = torch.nn.ModuleList([_Layer()])

    def forward(self, x):
        attn = self.layers[0].self_attention[0].mla_attn
        cache = attn.kv_cache[0][1]
        h = x + cache if cache.numel() > 0 else x
        for layer in self.layers:
            h = layer(h)
        return self.linear1(x) + self.linear2(h)


def _buf_not_in_self_model(cache_dir, mode):
    import types

    model = _BufNotInSelf()
    model.layers[0].self_attention[0].mla_attn.init_kv_cache((2, 2))
    model.layers[0].self_attention[0].mla_attn.kv_cache[0][1] += 3.0
    forward_org = model.forward

    def forward(self, x, extra_param1=None, extra_param2=None):
        return forward_org(x)

    model.forward = types.MethodType(forward, model)
    return model, torchair.inference.cache_compile(model.forward, config=_cfg(mode),
                                                   cache_dir=cache_dir, dynamic=True)


@pytest.mark.parametrize("mode", ["max-autotune", "npugraph_ex"])  # TorchAir's two variants
def test_cache_compile_buf_not_in_self(tmp_path, mode):
    cache_dir = str(tmp_path / "cache")
    x = torch.randn(2, 2)
    model, fn = _buf_not_in_self_model(cache_dir, mode)
    with torch.no_grad():
        expect = model.forward(x)
        for _ in range(2):
            out = fn(x, extra_param1=torch.tensor([1, 2, 3]), extra_param2=[10, 20])
            assert torch.equal(out, expect)
    assert len(_entries(cache_dir)) == 1
    assert '"source"' in open(_entries(cache_dir)[0]).read()  # the cache, read through its path
    _fresh_process()
    model2, fn2 = _buf_not_in_self_model(cache_dir, mode)
    with torch.no_grad():
        out = fn2(x, extra_param1=torch.tensor([1, 2, 3]), extra_param2=[10, 20])
    assert fn2.last_source == "cache" and fn2.rejections == []
    assert torch.equal(out, model2.forward(x))


@pytest.mark.parametrize("mode", ["max-autotune", "npugraph_ex"])
def test_ge_cache_true_is_named_in_every_mode(tmp_path, caplog, mode):
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        torchair.inference.cache_compile(Decoder().forward, config=_cfg(mode),
                                         cache_dir=str(tmp_path), ge_cache=True)
    assert [r for r in caplog.records if "ge_cache" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        torchair.inference.cache_compile(Decoder().forward, config=_cfg(mode),
                                         cache_dir=str(tmp_path), ge_cache=False)
    assert not [r for r in caplog.records if "ge_cache" in r.getMessage()]
