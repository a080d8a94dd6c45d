"""vllm-ascend's TorchAir usages, replayed on CPU with ``import torchair_dist as torchair`` (or
the ``torchair`` alias) and small stand-in models written here.

Facts taken from vllm-ascend's source (the TorchAir graph-mode runner as it stood before its
removal in December 2025, commit 0b65ac6c4b, and today's compilation package): the calls,
their arguments and the options it sets, described here in our words:

* the graph-mode model runner: ``patch_for_hcom()``; ``CompilerConfig()`` with
  ``mode``, ``experimental_config.frozen_parameter`` / ``tiling_schedule_optimize`` /
  ``enable_view_optimize``; ``torch._dynamo.config.capture_dynamic_output_shape_ops = True``;
  ``torch._dynamo.mark_static`` on input_ids, positions, attention metadata, the KV caches and
  ``get_forward_context().mc2_mask``; ``torch.compile(model, dynamic=not use_sparse,
  fullgraph=True, backend=get_npu_backend(compiler_config=config))`` called with keyword
  arguments (``kv_caches``, ``attn_metadata``, ``intermediate_tensors=None``,
  ``inputs_embeds=None``); with ``use_cached_graph``: a forward proxy per graph batch size (the
  forward's code with a new ``co_name``, bound into ``model.__dict__``) given to
  ``torchair.inference.cache_compile(proxy, dynamic=..., fullgraph=True, cache_dir=...,
  config=config, ge_cache=False)``, compiled, then ``torch._dynamo.reset()`` and loaded.
* the MTP drafter's runner: the same for the drafter (``frozen_parameter=True``,
  ``tiling_schedule_optimize=True``), with ``previous_hidden_states`` as an argument.
* the runner's TorchAir helpers: ``from torchair.scope import super_kernel, npu_stream_switch,
  npu_wait_tensor`` at import; wrappers calling ``npu_stream_switch(tag, priority)``,
  ``npu_wait_tensor(self, dependency)``, ``super_kernel(prefix, option)``.
* fused MoE / w8a8 MoE: the shared expert on ``npu_stream_switch("moe_secondary", 0)`` with
  ``npu_wait_tensor``, ``super_kernel(prefix, "stream-fusion=1")`` around the MoE; MLA: q/k rope
  on ``npu_stream_switch("mla_secondary", 0)`` with ``npu_wait_tensor``.
* the compiler interface's TorchAir fallback: ``config.mode =
  "reduce-overhead"``, ``config.debug.run_eagerly = True``,
  ``config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True``,
  ``config.experimental_config.aclgraph._aclnn_static_shape_kernel`` (+ ``_sym_value_range``),
  ``backend = torchair.get_npu_backend(compiler_config=config)`` called as
  ``backend(graph, example_inputs)`` on a Dynamo FX graph.
* the base of the pattern passes: ``import torchair as nge``;
  ``nge.register_replacement(search_fn=, replace_fn=, example_inputs=, extra_check=)`` with an
  ``extra_check`` that refuses a match whose nodes carry different ``node.meta["stream_label"]``.

Each usage is one test id (``USAGES``); the README's count is the number of them that pass.
"""
import dataclasses
import glob
import logging
import os
import subprocess
import sys
import textwrap
import types
from contextlib import nullcontext
from typing import List, Optional, Tuple

import pytest
import torch

import torchair_dist as torchair
from torchair_dist.pipeline import route as compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = dict(rtol=1e-5, atol=1e-5)  # GE lowers linear/softmax as its own ops: not bit-equal


# -- vllm-ascend-shaped helpers (written here, after what its TorchAir helpers do) -----------------
def npu_stream_switch(tag: str, priority: int, *, enabled: bool = True):
    return torchair.scope.npu_stream_switch(tag, priority) if enabled else nullcontext()


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor, *, enabled: bool = True):
    return torchair.scope.npu_wait_tensor(self, dependency) if enabled else self


def super_kernel(prefix: str, option: str, enabled: bool = True):
    return torchair.scope.super_kernel(prefix, option) if enabled else nullcontext()


class _ForwardContext:
    def __init__(self, tokens: int):
        self.mc2_mask = torch.arange(tokens) % 3 != 1


_CONTEXT = _ForwardContext(4)


def get_forward_context() -> _ForwardContext:
    return _CONTEXT


@dataclasses.dataclass
class DecodeMetadata:
    block_table: torch.Tensor
    input_positions: torch.Tensor
    sin: torch.Tensor
    cos: torch.Tensor


@dataclasses.dataclass
class AttnMetadata:
    slot_mapping: torch.Tensor
    decode: DecodeMetadata


E, H = 8, 16  # experts, hidden size


class MoE(torch.nn.Module):
    """Routed experts plus a shared expert on the "moe_secondary" stream; the MC2 mask comes
    from the forward context; the routed-token count is a bincount (data-dependent)."""

    def __init__(self, multistream: bool = True, count_tokens: bool = True):
        super().__init__()
        self.gate = torch.nn.Linear(H, E, bias=False)
        self.experts = torch.nn.Parameter(torch.randn(E, H, H) * 0.1)
        self.shared = torch.nn.Linear(H, H)
        self.multistream, self.count_tokens = multistream, count_tokens

    def forward(self, x):
        logits = self.gate(x)
        with npu_stream_switch("moe_secondary", 0, enabled=self.multistream):
            npu_wait_tensor(x, logits, enabled=self.multistream)
            shared = self.shared(x)
        with super_kernel("model.layers.0.mlp", "stream-fusion=1", enabled=self.multistream):
            weights, ids = torch.topk(torch.softmax(logits, -1), 2)
            picked = self.experts[ids[:, 0]]
            routed = torch.bmm(picked, x[:, :, None])[:, :, 0] * weights[:, :1]
        mask = get_forward_context().mc2_mask
        routed = routed * mask[:, None].to(routed.dtype)
        out = routed + shared
        if self.count_tokens:
            load = torch.bincount(ids.flatten(), minlength=E)
            return out, load
        return out, ids


class MLAish(torch.nn.Module):
    """Query/key projections with the rope part on the "mla_secondary" stream, and a KV cache
    written at the slot mapping."""

    def __init__(self, multistream: bool = True):
        super().__init__()
        self.q = torch.nn.Linear(H, H)
        self.kv = torch.nn.Linear(H, H)
        self.multistream = multistream

    def forward(self, x, kv_cache: Tuple[torch.Tensor, torch.Tensor], meta: AttnMetadata):
        q = self.q(x)
        with npu_stream_switch("mla_secondary", 0, enabled=self.multistream):
            npu_wait_tensor(x, q, enabled=self.multistream)
            kv = self.kv(x)
            k_pe = kv * meta.decode.cos + kv.roll(1, -1) * meta.decode.sin
        k_pe = npu_wait_tensor(k_pe, q, enabled=self.multistream)
        kv_cache[0].index_copy_(0, meta.slot_mapping, k_pe)
        kv_cache[1].index_copy_(0, meta.slot_mapping, kv)
        scores = q @ kv_cache[0].t()
        return torch.softmax(scores, -1) @ kv_cache[1]


class TinyDecoder(torch.nn.Module):
    """The model the runner compiles: forward(input_ids, positions, intermediate_tensors,
    inputs_embeds, kv_caches=, attn_metadata=), as vLLM models take them."""

    def __init__(self, multistream: bool = True, count_tokens: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(32, H)
        self.attn = MLAish(multistream)
        self.moe = MoE(multistream, count_tokens)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None,
                kv_caches: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None,
                attn_metadata: Optional[AttnMetadata] = None):
        h = self.embed(input_ids) + positions[:, None].to(torch.float32) * 0.01
        h = h + self.attn(h, kv_caches[0], attn_metadata)
        out, load = self.moe(h)
        return out, load


def _inputs(tokens: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 32, (tokens,), generator=g)
    positions = torch.arange(tokens) + 3
    meta = AttnMetadata(slot_mapping=torch.randperm(8, generator=g)[:tokens],
                        decode=DecodeMetadata(block_table=torch.zeros(tokens, 2, dtype=torch.int32),
                                              input_positions=positions.clone(),
                                              sin=torch.rand(tokens, H, generator=g),
                                              cos=torch.rand(tokens, H, generator=g)))
    return ids, positions, meta


def _kv_caches():
    return [(torch.zeros(8, H), torch.zeros(8, H))]


def _run(model, ids, positions, meta, kv_caches):
    return model(input_ids=ids, positions=positions, intermediate_tensors=None,
                 inputs_embeds=None, kv_caches=kv_caches, attn_metadata=meta)


def _check(got, want, kv_got, kv_want):
    out, load = got
    ref_out, ref_load = want
    torch.testing.assert_close(out, ref_out, **TOL)
    assert torch.equal(load, ref_load)  # integer results: exact
    for (a, b), (c, d) in zip(kv_got, kv_want):
        torch.testing.assert_close(a, c, **TOL)
        torch.testing.assert_close(b, d, **TOL)


def runner_config(mode: Optional[str] = None, view_optimize: bool = True,
                  frozen_parameter: bool = False) -> torchair.CompilerConfig:
    """``_get_torchair_lazy_compiled_model``'s config."""
    config = torchair.CompilerConfig()
    if mode:
        config.mode = mode
    config.experimental_config.frozen_parameter = frozen_parameter
    config.experimental_config.tiling_schedule_optimize = True
    config.experimental_config.enable_view_optimize = view_optimize
    return config


def _compile_runner_model(model, config, dynamic=True):
    backend = torchair.get_npu_backend(compiler_config=config)
    return torch.compile(model, dynamic=dynamic, fullgraph=True, backend=backend)


def _equal_to_eager(compiled_factory, tokens=(4,), multistream=True, count_tokens=True,
                    mark_static=False):
    """Run the compiled stand-in and an eager twin on the same calls; compare everything."""
    global _CONTEXT
    eager = TinyDecoder(multistream, count_tokens).eval()
    model = TinyDecoder(multistream, count_tokens).eval()
    compiled = compiled_factory(model)
    kv, kv_ref = _kv_caches(), _kv_caches()
    saved = _CONTEXT
    try:
        for n in tokens:
            _CONTEXT = _ForwardContext(n)
            ids, positions, meta = _inputs(n, seed=n)
            if mark_static:  # what the runner marks while compiling
                for t in (ids, positions, meta.decode.block_table, meta.decode.input_positions,
                          get_forward_context().mc2_mask, meta.decode.sin, meta.decode.cos,
                          meta.slot_mapping, kv[0][0], kv[0][1]):
                    torch._dynamo.mark_static(t)
            with torch.no_grad():
                got = _run(compiled, ids, positions, meta, kv)
                want = _run(eager, ids, positions, meta, kv_ref)
            _check(got, want, kv, kv_ref)
    finally:
        _CONTEXT = saved
    return compiled


def _forward_proxy(model: torch.nn.Module, batch_size: int):
    """The runner's per-batch-size forward proxy: forward's code under a new co_name, bound to
    the model and kept in its ``__dict__``."""
    name = f"{model.__class__.__name__}_forward_with_batch_size_{batch_size}"
    fn = model.forward
    code = fn.__code__.replace(co_name=name)
    proxy = types.FunctionType(code, fn.__globals__, name=name, argdefs=fn.__defaults__)
    model.__dict__[name] = proxy.__get__(model, torch.nn.Module)
    return model.__dict__[name]


def _cache_compile_proxy(model, config, cache_dir, batch_size=4, dynamic=True):
    return torchair.inference.cache_compile(_forward_proxy(model, batch_size), dynamic=dynamic,
                                            fullgraph=True, cache_dir=cache_dir, config=config,
                                            ge_cache=False)


def _entries(cache_dir):
    return glob.glob(os.path.join(cache_dir, "**", "entry-*.json"), recursive=True)


# -- the usages ---------------------------------------------------------------------------------
def u_patch_for_hcom(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, "torchair_dist"):
        assert torchair.patch_for_hcom() is None
    assert "patch_for_hcom" in caplog.text


def u_compiler_config_options(tmp_path, caplog):
    config = runner_config(mode="max-autotune", frozen_parameter=True)
    for path in ("frozen_parameter", "tiling_schedule_optimize", "enable_view_optimize"):
        assert config.get(f"experimental_config.{path}") is True
    assert torchair.get_npu_backend(compiler_config=config) is not None


def u_enable_view_optimize_true_is_honest(tmp_path, caplog):
    """The runner's default ``enable_view_optimize = True``: it takes effect, or the one
    warning of ineffective options names it (never silently accepted)."""
    import warnings

    from torchair_dist.pipeline import option_support

    config = runner_config()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torchair.get_npu_backend(compiler_config=config)
    named = " ".join(str(w.message) for w in caught if "do not take effect" in str(w.message))
    effective = "experimental_config.enable_view_optimize" in option_support.effective_options(config)
    assert effective or "enable_view_optimize" in named


def u_torch_compile_max_autotune_dynamic(tmp_path, caplog):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    _equal_to_eager(lambda m: _compile_runner_model(m, runner_config()), tokens=(4, 6, 5))


def u_torch_compile_dynamic_false(tmp_path, caplog):
    _equal_to_eager(lambda m: _compile_runner_model(m, runner_config(), dynamic=False),
                    tokens=(4,))


def u_mark_static_while_compiling(tmp_path, caplog):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    _equal_to_eager(lambda m: _compile_runner_model(m, runner_config()), tokens=(4,),
                    mark_static=True)


def u_torch_compile_reduce_overhead(tmp_path, caplog):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    _equal_to_eager(lambda m: _compile_runner_model(m, runner_config(mode="reduce-overhead"),
                                                    dynamic=False), tokens=(4, 4))


def u_bincount_minlength_dynamic(tmp_path, caplog):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    fn = torch.compile(lambda ids: torch.bincount(ids.flatten(), minlength=E), dynamic=True,
                       fullgraph=True,
                       backend=torchair.get_npu_backend(compiler_config=runner_config()))
    for n in (3, 5):
        ids = torch.randint(0, E, (n, 2))
        assert torch.equal(fn(ids), torch.bincount(ids.flatten(), minlength=E))


def u_masked_select_dynamic(tmp_path, caplog):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    fn = torch.compile(lambda x, m: torch.masked_select(x, m[:, None]), dynamic=True,
                       fullgraph=True,
                       backend=torchair.get_npu_backend(compiler_config=runner_config()))
    for n in (3, 5):
        x, m = torch.randn(n, 4), torch.arange(n) % 2 == 0
        assert torch.equal(fn(x, m), torch.masked_select(x, m[:, None]))


def u_moe_side_stream_and_super_kernel(tmp_path, caplog):
    """The MoE alone: shared expert on "moe_secondary", super_kernel scope, both modes."""
    for mode in ("max-autotune", "reduce-overhead"):
        torch._dynamo.reset()
        torch.manual_seed(1)
        moe = MoE(count_tokens=False).eval()
        fn = torch.compile(moe, dynamic=False, fullgraph=True,
                           backend=torchair.get_npu_backend(compiler_config=runner_config(mode)))
        x = torch.randn(4, H)
        with torch.no_grad():
            out, ids = fn(x)
            ref, ref_ids = moe(x)
        torch.testing.assert_close(out, ref, **TOL)
        assert torch.equal(ids, ref_ids)


def u_mla_side_stream(tmp_path, caplog):
    for mode in ("max-autotune", "reduce-overhead"):
        torch._dynamo.reset()
        torch.manual_seed(2)
        mla = MLAish().eval()
        fn = torch.compile(mla, dynamic=False, fullgraph=True,
                           backend=torchair.get_npu_backend(compiler_config=runner_config(mode)))
        x = torch.randn(4, H)
        _, _, meta = _inputs(4)
        kv, kv_ref = _kv_caches()[0], _kv_caches()[0]
        with torch.no_grad():
            torch.testing.assert_close(fn(x, kv, meta), mla(x, kv_ref, meta), **TOL)
        torch.testing.assert_close(kv[0], kv_ref[0], **TOL)


def u_stream_switch_positional_priority(tmp_path, caplog):
    """``npu_stream_switch(tag, priority)`` positional, and ``npu_wait_tensor`` returning
    its first argument."""
    def f(x, w):
        h = x @ w
        with torchair.scope.npu_stream_switch("moe_secondary", 0):
            y = torchair.scope.npu_wait_tensor(x, h) * 2
        return h + y

    fn = torch.compile(f, fullgraph=True, backend=torchair.get_npu_backend(
        compiler_config=runner_config("max-autotune")))
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(fn(x, w), f(x, w), **TOL)


def _saved_then_loaded(tmp_path, mode, dynamic=True, mc2_tokens=4):
    """Process 1 compiles and saves through the forward proxy; ``torch._dynamo.reset()`` (as
    the runner does after compiling every batch size); process 2 loads; both equal eager."""
    global _CONTEXT
    cache_dir = str(tmp_path / "torchair_cache")
    config = runner_config(mode)
    eager = TinyDecoder(count_tokens=False).eval()
    saved = _CONTEXT
    try:
        _CONTEXT = _ForwardContext(mc2_tokens)
        ids, positions, meta = _inputs(4)
        kv, kv_ref = _kv_caches(), _kv_caches()
        model = TinyDecoder(count_tokens=False).eval()
        fn = _cache_compile_proxy(model, config, cache_dir, dynamic=dynamic)
        with torch.no_grad():
            _check(_run(fn, ids, positions, meta, kv), _run(eager, ids, positions, meta, kv_ref),
                   kv, kv_ref)
        assert len(_entries(cache_dir)) == 1, "not saved"
        torch._dynamo.reset()
        model2 = TinyDecoder(count_tokens=False).eval()
        fn2 = _cache_compile_proxy(model2, runner_config(mode), cache_dir, dynamic=dynamic)
        _CONTEXT.mc2_mask = ~_CONTEXT.mc2_mask  # values are read at call time
        ids, positions, meta = _inputs(4, seed=9)
        with torch.no_grad():
            _check(_run(fn2, ids, positions, meta, kv), _run(eager, ids, positions, meta, kv_ref),
                   kv, kv_ref)
        assert fn2.last_source == "cache" and fn2.rejections == []
    finally:
        _CONTEXT = saved


def u_cache_compile_runner_signature(tmp_path, caplog):
    """``cache_compile(proxy, dynamic=, fullgraph=True, cache_dir=, config=, ge_cache=False)``
    is accepted (TorchAir's ``**kwargs``)."""
    fn = _cache_compile_proxy(TinyDecoder().eval(), runner_config(), str(tmp_path / "c"))
    assert fn.func_name == "TinyDecoder_forward_with_batch_size_4" and fn.fullgraph is True


def u_cache_compile_saves_and_loads_max_autotune(tmp_path, caplog):
    _saved_then_loaded(tmp_path, "max-autotune")


def u_cache_compile_saves_and_loads_reduce_overhead(tmp_path, caplog):
    _saved_then_loaded(tmp_path, "reduce-overhead")


def u_cache_compile_dynamic_false(tmp_path, caplog):
    _saved_then_loaded(tmp_path, "max-autotune", dynamic=False)


def u_cache_compile_one_proxy_per_batch_size(tmp_path, caplog):
    """Two graph batch sizes: two proxies, two cache functions, two entries."""
    cache_dir = str(tmp_path / "c")
    model, eager = TinyDecoder(count_tokens=False).eval(), TinyDecoder(count_tokens=False).eval()
    global _CONTEXT
    saved = _CONTEXT
    try:
        for n in (4, 8):
            _CONTEXT = _ForwardContext(n)
            fn = _cache_compile_proxy(model, runner_config(), cache_dir, batch_size=n)
            ids, positions, meta = _inputs(n, seed=n)
            kv, kv_ref = _kv_caches(), _kv_caches()
            with torch.no_grad():
                _check(_run(fn, ids, positions, meta, kv),
                       _run(eager, ids, positions, meta, kv_ref), kv, kv_ref)
    finally:
        _CONTEXT = saved
    assert len(_entries(cache_dir)) == 2
    assert {os.path.basename(os.path.dirname(p)) for p in _entries(cache_dir)} == {
        "TinyDecoder_forward_with_batch_size_4", "TinyDecoder_forward_with_batch_size_8"}


class Drafter(torch.nn.Module):
    """The MTP drafter: the target model's hidden states come in as an argument."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(32, H)
        self.fuse = torch.nn.Linear(2 * H, H)
        self.moe = MoE(count_tokens=False)

    def forward(self, input_ids, positions, kv_caches=None, attn_metadata=None,
                previous_hidden_states=None, inputs_embeds=None):
        h = torch.cat([self.embed(input_ids), previous_hidden_states], -1)
        out, _ = self.moe(self.fuse(h))
        return out


def _mtp_config():
    config = torchair.CompilerConfig()
    config.experimental_config.frozen_parameter = True
    config.experimental_config.tiling_schedule_optimize = True
    config.experimental_config.enable_view_optimize = True
    return config


def u_mtp_torch_compile(tmp_path, caplog):
    drafter = Drafter().eval()
    fn = torch.compile(drafter, dynamic=True, fullgraph=True,
                       backend=torchair.get_npu_backend(compiler_config=_mtp_config()))
    for n in (4, 6):
        global _CONTEXT
        saved, _CONTEXT = _CONTEXT, _ForwardContext(n)
        try:
            ids, positions, meta = _inputs(n)
            prev = torch.randn(n, H)
            with torch.no_grad():
                torch.testing.assert_close(
                    fn(ids, positions, kv_caches=None, attn_metadata=meta,
                       previous_hidden_states=prev, inputs_embeds=None),
                    drafter(ids, positions, None, meta, prev, None), **TOL)
        finally:
            _CONTEXT = saved


def u_mtp_cache_compile(tmp_path, caplog):
    cache_dir = str(tmp_path / "mtp")
    drafter = Drafter().eval()
    ids, positions, meta = _inputs(4)
    prev = torch.randn(4, H)
    for process in range(2):
        torch._dynamo.reset()
        model = Drafter().eval()
        fn = torchair.inference.cache_compile(_forward_proxy(model, 4), dynamic=True,
                                              fullgraph=True, cache_dir=cache_dir,
                                              config=_mtp_config(), ge_cache=False)
        with torch.no_grad():
            got = fn(input_ids=ids, positions=positions, kv_caches=None, attn_metadata=meta,
                     previous_hidden_states=prev, inputs_embeds=None)
        torch.testing.assert_close(got, drafter(ids, positions, None, meta, prev, None), **TOL)
        assert fn.last_source == ("compiled" if process == 0 else "cache")


def _fallback_config():
    """``compiler_interface._configure_backend`` for TorchAir (no npugraph_ex installed)."""
    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.run_eagerly = True
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    return config


def _vllm_graph(fn, *args):
    """The FX graph and example inputs vLLM's compiler interface receives from Dynamo."""
    seen = []

    def grab(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    torch.compile(fn, backend=grab, fullgraph=True)(*args)
    return seen[0]


def _f_for_fallback(x, w):
    return (torch.nn.functional.gelu(x @ w) + 1,)


def u_compiler_interface_backend_call(tmp_path, caplog):
    """``backend(graph, example_inputs)`` with the fallback config (run_eagerly)."""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    gm, example_inputs = _vllm_graph(_f_for_fallback, x, w)
    backend = torchair.get_npu_backend(compiler_config=_fallback_config())
    compiled = backend(gm, example_inputs)
    torch.testing.assert_close(compiled(x, w)[0], _f_for_fallback(x, w)[0], **TOL)


def u_compiler_interface_capture_without_run_eagerly(tmp_path, caplog):
    """The same graph captured (run_eagerly off, reinplace pass off)."""
    config = _fallback_config()
    config.debug.run_eagerly = False
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    gm, example_inputs = _vllm_graph(_f_for_fallback, x, w)
    compiled = torchair.get_npu_backend(compiler_config=config)(gm, example_inputs)
    for _ in range(2):
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x, w)[0], _f_for_fallback(x, w)[0], **TOL)


def u_static_shape_kernel_options(tmp_path, caplog):
    """``experimental_config.aclgraph._aclnn_static_shape_kernel`` and its sym value range:
    NPU kernels; accepted, and named by the ineffective-options warning off NPU."""
    import warnings

    config = _fallback_config()
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range = [1, 2, 4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torchair.get_npu_backend(compiler_config=config)
    named = " ".join(str(w.message) for w in caught)
    assert "_aclnn_static_shape_kernel" in named


def _search(x, w):
    return torch.relu(x @ w)


def _replace(x, w):
    return torch.clamp_min(x @ w, 0)


def u_register_replacement_extra_check(tmp_path, caplog):
    """``nge.register_replacement(search_fn=, replace_fn=, example_inputs=, extra_check=)``:
    the pattern is applied when the check passes, not when it refuses."""
    from torchair_dist.passes import user_patterns

    for allow in (True, False):
        user_patterns.clear_replacements()
        torch._dynamo.reset()
        calls = []

        def extra_check(match, allow=allow):
            calls.append(len(match.nodes))
            return allow

        assert torchair.register_replacement(search_fn=_search, replace_fn=_replace,
                                             example_inputs=[torch.empty(4, 4),
                                                             torch.empty(4, 4)],
                                             extra_check=extra_check)
        try:
            with compiler.record_graphs() as graphs:
                fn = torch.compile(lambda x, w: _search(x, w) * 2, fullgraph=True,
                                   backend=torchair.get_npu_backend(
                                       compiler_config=runner_config("reduce-overhead")))
                x, w = torch.randn(4, 4), torch.randn(4, 4)
                torch.testing.assert_close(fn(x, w), _search(x, w) * 2, **TOL)
        finally:
            user_patterns.clear_replacements()
        targets = {n.target for n in graphs[0].gm.graph.nodes if n.op == "call_function"}
        assert calls, "extra_check was not called"
        assert (torch.ops.aten.clamp_min.default in targets) is allow


def _stream_scope_check(match) -> bool:
    """vllm-ascend's extra_stream_scope_check: all matched nodes on one stream."""
    streams = {n.meta.get("stream_label") for n in match.nodes if n.op == "call_function"}
    return len(streams) <= 1


def u_stream_label_refuses_cross_stream_fusion(tmp_path, caplog):
    """The pattern's nodes on two streams: ``node.meta["stream_label"]`` differs, the check
    refuses; on one stream it fuses."""
    from torchair_dist.passes import user_patterns

    def across(x, w):
        h = x @ w
        with torchair.scope.npu_stream_switch("side", 0):
            y = torch.relu(h)
        return y * 2

    def same(x, w):
        return torch.relu(x @ w) * 2

    found = {}
    for name, f in (("across", across), ("same", same)):
        user_patterns.clear_replacements()
        torch._dynamo.reset()
        torchair.register_replacement(search_fn=_search, replace_fn=_replace,
                                      example_inputs=[torch.empty(4, 4), torch.empty(4, 4)],
                                      extra_check=_stream_scope_check)
        try:
            with compiler.record_graphs() as graphs:
                fn = torch.compile(f, fullgraph=True, backend=torchair.get_npu_backend(
                    compiler_config=runner_config("reduce-overhead")))
                x, w = torch.randn(4, 4), torch.randn(4, 4)
                torch.testing.assert_close(fn(x, w), f(x, w), **TOL)
        finally:
            user_patterns.clear_replacements()
        found[name] = {n.target for n in graphs[0].gm.graph.nodes if n.op == "call_function"}
        labels = {n.meta.get("stream_label") for n in graphs[0].gm.graph.nodes
                  if n.op == "call_function"}
        if name == "across":  # the labels vllm-ascend's check reads are there
            assert "side" in labels and None in labels, labels
    assert torch.ops.aten.clamp_min.default in found["same"]
    assert torch.ops.aten.clamp_min.default not in found["across"]


# -- import-time usages: run in a fresh interpreter with the alias ------------------------------
_IMPORTS = {
    # the graph-mode model runner / the MTP drafter
    "import_torchair_and_patch_for_hcom": "import torchair\nfrom torchair import patch_for_hcom\n"
                                          "patch_for_hcom()\nassert torchair.inference.cache_compile",
    # the runner's TorchAir helpers
    "import_scope_names": "from torchair.scope import super_kernel as _super_kernel\n"
                          "from torchair.scope import npu_stream_switch as _npu_stream_switch\n"
                          "from torchair.scope import npu_wait_tensor as _npu_wait_tensor",
    # the base of the pattern passes
    "import_torchair_as_nge": "try:\n    import npugraph_ex as nge\nexcept ImportError:\n"
                              "    import torchair as nge\nassert nge.register_replacement",
    # the CompilerConfig class a caller builds through torchair's own module path
    "compiler_config_module_path": "from torchair.configs.compiler_config import CompilerConfig\n"
                                   "import torchair_dist, torch\n"
                                   "assert CompilerConfig is torchair_dist.CompilerConfig\n"
                                   "c = CompilerConfig(); c.mode = 'reduce-overhead'\n"
                                   "f = torch.compile(lambda x: x + 1, fullgraph=True, "
                                   "backend=torchair_dist.get_npu_backend(compiler_config=c))\n"
                                   "assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))",
}


@pytest.fixture(scope="module")
def import_results():
    """Every import form in one fresh interpreter with the alias installed: {name: "ok"|error}."""
    lines = ["import torchair_dist", "torchair_dist.install_torchair_alias()", "results = {}"]
    for name, code in _IMPORTS.items():
        lines.append(f"try:\n{textwrap.indent(code, '    ')}\n    results[{name!r}] = 'ok'\n"
                     f"except Exception as e:\n    results[{name!r}] = repr(e)")
    lines.append("print(repr(results))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=ROOT,
               TORCHAIR_DIST_CPU_CAPTURE="record")
    r = subprocess.run([sys.executable, "-c", "\n".join(lines)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import ast

    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


def _import_usage(name):
    def check(tmp_path, caplog, results):
        assert results[name] == "ok", results[name]
    return check


USAGES = {
    # runner / MTP proposer: imports and config
    "import_torchair_and_patch_for_hcom": _import_usage("import_torchair_and_patch_for_hcom"),
    "patch_for_hcom": u_patch_for_hcom,
    "compiler_config_options": u_compiler_config_options,
    "enable_view_optimize": u_enable_view_optimize_true_is_honest,
    "compiler_config_module_path": _import_usage("compiler_config_module_path"),
    # runner: torch.compile with our backend
    "torch_compile_max_autotune_dynamic": u_torch_compile_max_autotune_dynamic,
    "torch_compile_dynamic_false": u_torch_compile_dynamic_false,
    "torch_compile_reduce_overhead": u_torch_compile_reduce_overhead,
    "mark_static_while_compiling": u_mark_static_while_compiling,
    "bincount_minlength_dynamic": u_bincount_minlength_dynamic,
    "masked_select_dynamic": u_masked_select_dynamic,
    # runner: use_cached_graph
    "cache_compile_runner_signature": u_cache_compile_runner_signature,
    "cache_compile_saves_and_loads_max_autotune": u_cache_compile_saves_and_loads_max_autotune,
    "cache_compile_saves_and_loads_reduce_overhead":
        u_cache_compile_saves_and_loads_reduce_overhead,
    "cache_compile_dynamic_false": u_cache_compile_dynamic_false,
    "cache_compile_one_proxy_per_batch_size": u_cache_compile_one_proxy_per_batch_size,
    # MTP proposer
    "mtp_torch_compile": u_mtp_torch_compile,
    "mtp_cache_compile": u_mtp_cache_compile,
    # the runner's TorchAir helpers and the side streams
    "import_scope_names": _import_usage("import_scope_names"),
    "stream_switch_positional_priority": u_stream_switch_positional_priority,
    "moe_side_stream_and_super_kernel": u_moe_side_stream_and_super_kernel,
    "mla_side_stream": u_mla_side_stream,
    # the compiler interface's TorchAir fallback
    "compiler_interface_backend_call": u_compiler_interface_backend_call,
    "compiler_interface_capture": u_compiler_interface_capture_without_run_eagerly,
    "static_shape_kernel_options": u_static_shape_kernel_options,
    # the base of the pattern passes
    "import_torchair_as_nge": _import_usage("import_torchair_as_nge"),
    "register_replacement_extra_check": u_register_replacement_extra_check,
    "stream_label_refuses_cross_stream_fusion": u_stream_label_refuses_cross_stream_fusion,
}


@pytest.mark.parametrize("usage", list(USAGES))
def test_vllm_ascend_usage(usage, tmp_path, caplog, request):
    fn = USAGES[usage]
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        if fn.__name__ == "check":
            fn(tmp_path, caplog, request.getfixturevalue("import_results"))
        else:
            fn(tmp_path, caplog)
