"""Inference graphs whose AOT runtime wrapper has nothing to do are called without it
(torchair_dist/pipeline/aot.py); every other graph keeps AOT's forward."""
import logging

import pytest
import torch

from torchair_dist import CompilerConfig, get_npu_backend

MODES = ["npugraph_ex", "max-autotune"]


def _compile(fn, mode, dynamic=False):
    """(compiled fn, the callables our backend returned to Dynamo, debug log lines)."""
    cfg = CompilerConfig()
    cfg.mode = mode
    backend = get_npu_backend(compiler_config=cfg)
    returned = []

    def spy(gm, example_inputs, **kwargs):
        out = backend(gm, example_inputs, **kwargs)
        returned.append(out)
        return out

    return torch.compile(fn, backend=spy, fullgraph=True, dynamic=dynamic), returned


@pytest.fixture
def debug_lines():
    from torchair_dist.base.log import init_logging

    log = init_logging()  # once per process: it must not reset the level set below
    lines = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: lines.append(record.getMessage())
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    yield lines
    log.removeHandler(handler)
    log.setLevel(old)


def _is_direct(forward) -> bool:
    return getattr(forward, "skips_aot_wrapper", False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_pure_graph_is_called_directly_and_equals_eager(mode, dynamic, debug_lines):
    def fn(x, w):
        return torch.relu(x @ w) + 1, (x * 2).sum()

    f, returned = _compile(fn, mode, dynamic)
    with torch.enable_grad():
        for n in (4, 4, 4, 6, 6):
            x, w = torch.randn(n, 5), torch.randn(5, 3)
            got, want = f(x, w), fn(x, w)
            assert all(torch.equal(g, e) for g, e in zip(got, want))
            assert torch.is_grad_enabled()  # restored after the call
            assert not got[0].requires_grad
    direct = [r for r in returned if _is_direct(r)]
    assert direct, returned
    assert any("without AOT's runtime wrapper" in line for line in debug_lines)
    # AOT's forward stays reachable, with its attributes
    assert all(hasattr(d, "named_parameters") and d.__wrapped__ is not d for d in direct)


@pytest.mark.parametrize("mode", MODES)
def test_a_mutated_input_keeps_aots_wrapper(mode, debug_lines):
    def fn(x, y):
        x.add_(1)
        return y * 2

    f, returned = _compile(fn, mode)
    x, y = torch.zeros(3), torch.randn(3)
    for i in range(1, 4):
        assert torch.equal(f(x, y), y * 2)
        assert torch.equal(x, torch.full((3,), float(i)))  # mutated once per call
    assert not any(_is_direct(r) for r in returned)
    assert any("an input is mutated" in line for line in debug_lines)


@pytest.mark.parametrize("mode", MODES)
def test_an_output_aliasing_an_input_keeps_aots_wrapper(mode, debug_lines):
    def fn(x):
        return x.view(-1), x + 1

    f, returned = _compile(fn, mode)
    for _ in range(3):
        x = torch.randn(2, 3)
        view, plus = f(x)
        assert view.data_ptr() == x.data_ptr() and view.shape == (6,)
        assert torch.equal(plus, x + 1)
    assert not any(_is_direct(r) for r in returned)
    assert any("aliases an input" in line for line in debug_lines)


def test_a_training_graph_keeps_aots_wrapper_and_its_gradients():
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x):
        return (x @ w).relu().sum()

    f, returned = _compile(fn, "npugraph_ex")
    x = torch.randn(3, 4)
    f(x).backward()
    got = w.grad.clone()
    w.grad = None
    fn(x).backward()
    assert torch.allclose(got, w.grad)
    assert not any(_is_direct(r) for r in returned)


def test_autocast_at_compile_time_keeps_aots_wrapper(debug_lines):
    f, returned = _compile(lambda x: x @ x, "npugraph_ex")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.randn(4, 4)
        f(x), f(x)
    assert not any(_is_direct(r) for r in returned)
    assert any("autocast is on" in line for line in debug_lines)


def test_grad_mode_is_restored_when_the_call_fails():
    f, returned = _compile(lambda x: x.reshape(2, -1) + 1, "npugraph_ex")
    x = torch.randn(6)
    f(x), f(x)
    assert _is_direct(returned[0])
    # Called directly with a shape the graph cannot take: the runner's capture fails.
    with torch.enable_grad(), pytest.raises(RuntimeError, match="invalid"):
        returned[0](torch.randn(5))
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("mode", MODES)
def test_hf_llama_forward_is_called_directly_and_equals_eager(mode):
    """transformers' Llama (not our code): a cache-free forward mutates nothing, so it skips
    AOT's wrapper; logits equal eager's on every call."""
    pytest.importorskip("transformers")
    from hf_tiny import tiny_llama

    _, model = tiny_llama()
    f, returned = _compile(lambda ids: model(ids, use_cache=False).logits, mode)
    with torch.no_grad():
        for _ in range(3):
            ids = torch.randint(0, 64, (2, 5))
            torch.testing.assert_close(f(ids), model(ids, use_cache=False).logits,
                                       rtol=1e-5, atol=1e-5)
    assert returned and all(_is_direct(r) for r in returned), returned


def test_hf_static_cache_decode_keeps_aots_wrapper_and_equals_eager(debug_lines):
    """The decode step writes the static KV cache (mutated inputs): AOT's wrapper stays."""
    pytest.importorskip("transformers")
    from hf_tiny import decode_matches_eager, tiny_llama

    cfg, model = tiny_llama()
    step, returned = _compile(model.forward, "npugraph_ex")
    decode_matches_eager(cfg, model, step)
    assert returned and not any(_is_direct(r) for r in returned)
    assert any("an input is mutated" in line for line in debug_lines)


@pytest.mark.parametrize("mode", MODES)
def test_a_tensor_subclass_input_or_output_keeps_aots_wrapper(mode, debug_lines):
    """AOT unwraps subclasses before our compiler sees the graph (its metadata there is all
    plain): the check runs on Dynamo's graph, for inputs and for outputs."""
    from torch.testing._internal.subclasses import WrapperSubclass

    f, returned = _compile(lambda x: x * 2 + 1, mode)
    for _ in range(3):
        x = WrapperSubclass(torch.randn(4))
        got = f(x)
        assert isinstance(got, WrapperSubclass) and torch.equal(got.a, x.a * 2 + 1)
    g, returned_out = _compile(lambda x: WrapperSubclass(x * 2), mode)
    for _ in range(3):
        x = torch.randn(4)
        got = g(x)
        assert isinstance(got, WrapperSubclass) and torch.equal(got.a, x * 2)
    assert not any(_is_direct(r) for r in returned + returned_out)
    assert sum("tensor subclasses" in line for line in debug_lines) >= 2, debug_lines


class _Doubling(torch.overrides.TorchFunctionMode):
    """Doubles what every add returns: a mode whose effect Dynamo traces into the graph."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in ("add", "__add__"):
            return out * 2
        return out


@pytest.mark.parametrize("mode", MODES)
def test_a_torch_function_mode_is_applied_once(mode):
    """Dynamo keeps the user's mode active while the compiled code runs; a replay that called
    the add's Python binding would apply it a second time."""
    fn = lambda x: torch.add(x, 1) * 3  # noqa: E731
    f, _ = _compile(fn, mode)
    for _ in range(4):
        x = torch.randn(5)
        want = torch.add(x, 1) * 2 * 3  # the add doubled once (computed outside the mode)
        with _Doubling():
            assert torch.equal(fn(x), want)  # eager under the mode
            assert torch.equal(f(x), want)
