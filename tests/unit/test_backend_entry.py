"""get_npu_backend: signature, partials, decomposition merge, options=, mode dispatch."""
import functools
import inspect

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_compiler, get_npu_backend
from torchair_dist.pipeline import entry as backend_mod
from torchair_dist.pipeline import decomposition_table as decomp_mod
from torchair_dist.pipeline.route import NpuFxCompiler, backend_for_mode
from torchair_dist.configs import COMPILE_OPTIONS, apply_compile_options
from torchair_dist.errors import ConfigError, ConfigTypeError

aten = torch.ops.aten


def test_signature_is_keyword_only_with_torchair_defaults():
    sig = inspect.signature(get_npu_backend)
    params = sig.parameters
    assert list(params) == ["compiler_config", "custom_decompositions"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["compiler_config"].default is None
    assert params["custom_decompositions"].default == {}
    with pytest.raises(TypeError):
        get_npu_backend(CompilerConfig())  # positional is refused


def test_returns_a_new_partial_per_call():
    cfg = CompilerConfig()
    a = get_npu_backend(compiler_config=cfg)
    b = get_npu_backend(compiler_config=cfg)
    assert isinstance(a, functools.partial) and a is not b
    assert a.func is backend_mod._npu_backend
    assert a.keywords["compiler_config"] is cfg


def test_none_gives_a_fresh_default_config():
    a = get_npu_backend()
    b = get_npu_backend()
    assert a.keywords["compiler_config"] == CompilerConfig()
    assert a.keywords["compiler_config"] is not b.keywords["compiler_config"]


def test_rejects_a_non_config():
    with pytest.raises(ConfigTypeError, match="CompilerConfig"):
        get_npu_backend(compiler_config={"mode": "npugraph_ex"})
    with pytest.raises(ConfigTypeError, match="custom_decompositions"):
        get_npu_backend(custom_decompositions=[1])
    with pytest.raises(ConfigTypeError, match="not a function"):
        get_npu_backend(custom_decompositions={aten.add.Tensor: 3})


def test_decomposition_merge_order(monkeypatch):
    default_fn, user_fn, user_other, patch_fn = (lambda *a: 1), (lambda *a: 2), (lambda *a: 3), (
        lambda *a: 4)
    monkeypatch.setattr(decomp_mod, "default_decompositions",
                        lambda: {aten.mul.Tensor: default_fn, aten.sub.Tensor: default_fn})
    monkeypatch.setattr(decomp_mod, "decomposition_patches", lambda: {aten.div.Tensor: patch_fn})
    merged = get_npu_backend(custom_decompositions={
        aten.mul.Tensor: user_fn, aten.div.Tensor: user_other}).keywords["decompositions"]
    assert merged[aten.sub.Tensor] is default_fn       # default kept
    assert merged[aten.mul.Tensor] is user_fn          # user overrides default
    assert merged[aten.div.Tensor] is patch_fn         # patch has the last word


def test_custom_decomposition_is_applied():
    def fake_gelu(x, approximate="none"):
        return x * 2.0

    backend = get_npu_backend(compiler_config=_acl(),
                              custom_decompositions={aten.gelu.default: fake_gelu})
    f = torch.compile(lambda x: torch.nn.functional.gelu(x), backend=backend, fullgraph=True)
    x = torch.randn(5)
    assert torch.equal(f(x), x * 2.0)


def _acl(mode="npugraph_ex"):
    cfg = CompilerConfig()
    cfg.mode = mode
    return cfg


def test_options_mapping_covers_every_key():
    base = CompilerConfig()
    for key, (path, transform) in COMPILE_OPTIONS.items():
        opt = base.option(path)
        if transform is not None:
            value, expected = True, False
        elif key in ("capture_limit", "_vllm_aclnn_static_kernel_sym_index"):
            value = expected = 7
        elif key == "_vllm_aclnn_static_kernel_sym_range":
            value = expected = [1, 2]
        elif key.endswith("_options"):
            value = expected = {"a": 1}
        elif key.startswith("post_grad"):
            value = expected = print
        elif key == "data_dump_stage":
            value = expected = "original"
        elif key == "data_dump_dir":
            value = expected = "/tmp"
        elif key == "capture_error_mode":
            value = expected = "relaxed"
        elif key == "use_graph_pool":
            value = expected = (0, 1)
        else:
            value = expected = not opt.raw
        cfg = apply_compile_options(base, {key: value})
        assert cfg.get(path) == expected, key
    assert base == CompilerConfig(), "options must not leak into the backend's config"


def test_unknown_option_lists_allowed_keys():
    with pytest.raises(ValueError, match=r"Invalid option 'clone_inputs', allowed options: \["):
        apply_compile_options(CompilerConfig(), {"clone_inputs": True})
    with pytest.raises(ValueError, match="capture_limit|static_capture_size_limit"):
        apply_compile_options(CompilerConfig(), {"capture_limit": -1})


def test_options_through_torch_compile_take_effect_and_do_not_leak():
    from torchair_dist.pipeline import route as compiler

    cfg = _acl()
    backend = get_npu_backend(compiler_config=cfg)
    f = torch.compile(lambda x: x.view(-1) + 1, backend=backend,
                      options={"remove_noop_ops": False, "post_grad_custom_post_pass": _tag})
    with compiler.record_graphs() as graphs:
        assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))
    seen = graphs[0].config
    assert seen.experimental_config.remove_noop_ops.raw is False  # the graph's config has it
    assert seen.post_grad_custom_post_pass.raw is _tag
    assert any(n.meta.get("tagged") for n in graphs[0].gm.graph.nodes)  # the pass really ran
    assert cfg.experimental_config.remove_noop_ops.raw is True  # the backend's config does not
    assert cfg.post_grad_custom_post_pass.raw is None


def _tag(graph):
    for node in graph.nodes:
        node.meta["tagged"] = True


def test_bad_option_through_torch_compile_names_it():
    backend = get_npu_backend(compiler_config=_acl())
    f = torch.compile(lambda x: x + 1, backend=backend, options={"bogus": 1})
    with pytest.raises(Exception, match="Invalid option 'bogus'"):
        f(torch.ones(2))


def test_named_backend_entry_point():
    from torchair_dist.pipeline import route as compiler

    assert "npugraph_ex" in torch._dynamo.list_backends()
    f = torch.compile(lambda x: x * 3, backend="npugraph_ex", options={"clone_output": True},
                      fullgraph=True)
    with compiler.record_graphs() as graphs:
        assert torch.equal(f(torch.ones(3)), torch.full((3,), 3.0))
    assert graphs[0].config.mode.raw == "npugraph_ex"
    assert graphs[0].config.debug.aclgraph.enable_output_clone.raw is True


def test_dispatch_table_and_unknown_mode():
    from torchair_dist.backends import aclgraph
    from torchair_dist.backends.interface import Backend

    backend = backend_for_mode("npugraph_ex")
    assert isinstance(backend, Backend) and backend is aclgraph.BACKEND
    assert backend_for_mode("reduce-overhead") is backend
    with pytest.raises(ValueError, match="Unsupported npu backend mode: turbo"):
        backend_for_mode("turbo")


def test_max_autotune_is_ge():
    from torchair_dist.backends import ge

    backend = backend_for_mode("max-autotune")
    assert backend is ge.BACKEND and backend.name == "ge"


def test_get_compiler():
    assert isinstance(get_compiler(), NpuFxCompiler)
    cfg = _acl()
    assert get_compiler(cfg).config is cfg


def test_torch_compile_mode_argument():
    cfg = CompilerConfig()
    with pytest.raises(ConfigError, match="not a torchair_dist mode"):
        backend_mod._apply_torch_compile_mode(cfg, "max-autotune-no-cudagraphs")
    # the configuration decides; a different torch.compile mode is named in a warning
    with pytest.warns(UserWarning, match="mode='npugraph_ex'.*'max-autotune' runs"):
        assert backend_mod._apply_torch_compile_mode(cfg, "npugraph_ex") is cfg
    assert cfg.mode.raw == "max-autotune"


def test_public_api():
    assert set(torchair_dist.__all__) >= {"get_npu_backend", "get_compiler", "CompilerConfig"}


def test_dynamo_reset_restarts_graph_numbering():
    from torchair_dist.pipeline import route as compiler

    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    names = []
    for _ in range(3):  # the first round may follow graphs compiled without our backend
        with compiler.record_graphs() as graphs:
            torch.compile(lambda x: x + 1, backend=get_npu_backend(compiler_config=cfg))(
                torch.ones(2))
            torch.compile(lambda x: x * 2, backend=get_npu_backend(compiler_config=cfg))(
                torch.ones(2))
        names.append([g.graph_name for g in graphs])
        torch._dynamo.reset()
    assert names[1] == names[2] == ["graph_0", "graph_1"], names


def test_thread_ranks_on_torch_before_2_13_are_warned_about(monkeypatch, caplog):
    """Thread ranks are tested from torch 2.13 (2.11's Dynamo crashed the process): one
    warning per process below it, none from it."""
    import logging

    from torchair_dist.pipeline import route

    for version, warned in (("2.13.0", False), ("2.11.0", True), ("2.11.0", False)):
        monkeypatch.setattr(torch, "__version__", version)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="torchair_dist"):
            route._warn_thread_ranks_on_old_torch()
        assert ("thread ranks" in caplog.text and "2.11.0" in caplog.text) == warned, version
    route._warned_old_torch.clear()
