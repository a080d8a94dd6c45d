"""Our backend in transformers' ``CompileConfig``: ``generate`` and ``generate_batch``
deep-copy the configuration on every call, and the copy is still our backend, so the second
call compiles nothing (before, every call compiled the model again: the copied
``functools.partial`` failed Dynamo's backend match). A max-autotune configuration under
``CompileConfig``'s default ``mode="reduce-overhead"`` runs max-autotune and a warning says so.
Tokens equal the same path run eagerly. One process (a tiny random Llama, no network)."""
import os
import sys
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

import torchair_dist
from torchair_dist.pipeline import route

_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

import hf_decode  # noqa: E402
import tiny_config as tc  # noqa: E402

transformers = pytest.importorskip("transformers")
from transformers import CompileConfig, GenerationConfig  # noqa: E402

NEW_TOKENS = 5


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = transformers.AutoModelForCausalLM.from_config(tc.tiny_config("llama"),
                                                          dtype=torch.float32)
    return m.eval()


def _backend(mode):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torchair_dist.get_npu_backend(compiler_config=cfg)


def _compile_config(backend, mode=None):
    cc = CompileConfig(backend=backend, fullgraph=False, mode=mode)
    cc._compile_all_devices = True  # transformers compiles on CPU only when told to
    return cc


def _generate(model, ids, compile_config):
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                           cache_implementation="static", compile_config=compile_config,
                           disable_compile=compile_config is None)
    return model.generate(ids, generation_config=gen)


def _calls(fn, times=2):
    """Run ``fn`` ``times`` times: [(result, Dynamo frames compiled, modes our backend ran)]."""
    done = []
    for _ in range(times):
        before = counters["frames"]["ok"]
        with route.record_graphs() as graphs:
            out = fn()
        done.append((out, counters["frames"]["ok"] - before,
                     sorted({g.config.mode.raw for g in graphs})))
    return done


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
@pytest.mark.parametrize("cc_mode", [None, "reduce-overhead"])
def test_second_generate_compiles_nothing(model, mode, cc_mode):
    torch._dynamo.reset()
    ids = hf_decode.prompt_ids(2, 6, model.config.vocab_size)
    eager = _generate(model, ids, None)
    cc = _compile_config(_backend(mode), cc_mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (first, n1, ran1), (second, n2, ran2) = _calls(lambda: _generate(model, ids, cc))
    assert n1 >= 1 and ran1 == [mode]  # the configuration's mode ran
    assert n2 == 0 and ran2 == [], f"the second generate compiled {n2} frame(s)"
    assert torch.equal(first, eager) and torch.equal(second, eager)
    named = [str(w.message) for w in caught if "torch.compile(mode=" in str(w.message)]
    if cc_mode is not None and mode == "max-autotune":  # transformers' default mode differs
        assert named and all(w.category is UserWarning for w in caught
                             if str(w.message) in named)
        assert "'max-autotune' runs" in named[0]
    else:
        assert named == []


def _generate_batch(model, prompts, compile_config):
    from transformers import ContinuousBatchingConfig

    cb = ContinuousBatchingConfig(varlen_compile_config=compile_config,
                                  decode_compile_config=compile_config, num_blocks=8,
                                  page_size=16, max_batch_tokens=64, max_requests_per_batch=4)
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                           eos_token_id=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate_batch(prompts, generation_config=gen,
                                   continuous_batching_config=cb)
    return sorted((r.request_id, list(r.generated_tokens)) for r in out.values())


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_second_generate_batch_compiles_nothing(model, mode):
    torch._dynamo.reset()
    prompts = hf_decode.prompt_ids(2, 6, model.config.vocab_size).tolist()
    eager = _generate_batch(model, prompts, None)
    assert all(len(tokens) == NEW_TOKENS for _, tokens in eager), eager
    cc = _compile_config(_backend(mode))
    (first, n1, ran1), (second, n2, ran2) = _calls(lambda: _generate_batch(model, prompts, cc))
    assert n1 >= 1 and ran1 == [mode]
    assert n2 == 0 and ran2 == [], f"the second generate_batch compiled {n2} frame(s)"
    assert [t for _, t in first] == [t for _, t in eager] == [t for _, t in second]
