"""A backend is the same backend after a copy: ``get_npu_backend`` results made from equal
configurations compare equal and hash alike, ``copy``/``deepcopy`` return the backend itself,
pickling rebuilds an equal one, and Dynamo reuses what an equal backend compiled (transformers
deep-copies its ``CompileConfig`` on every ``generate``). And ``torch.compile(mode=...)`` never
silently replaces the configuration's mode."""
import copy
import os
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.base.torch_support import torch_at_least
from torchair_dist.pipeline import route
from torchair_dist.pipeline.entry import NpuBackend

aten = torch.ops.aten


def _config(mode="npugraph_ex", **debug):
    cfg = CompilerConfig()
    cfg.mode = mode
    for key, value in debug.items():
        setattr(cfg.debug.aclgraph, key, value)
    return cfg


def my_gelu(x, approximate="none"):  # a module-level decomposition: pickled by reference
    return x * torch.sigmoid(1.702 * x)


def other_gelu(x, approximate="none"):
    return x * torch.sigmoid(1.5 * x)


def _frames():
    return counters["frames"]["ok"]


def test_equal_configs_make_equal_backends_with_one_hash():
    a = get_npu_backend(compiler_config=_config())
    b = get_npu_backend(compiler_config=_config())
    assert isinstance(a, NpuBackend) and a is not b
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != get_npu_backend(compiler_config=_config("max-autotune"))
    assert a != get_npu_backend(compiler_config=_config(clone_input=False))
    assert a != "inductor" and a != torchair_dist.pipeline.entry._npu_backend


def test_a_config_changed_after_the_backend_was_made_changes_its_identity():
    cfg = _config()
    a, b = get_npu_backend(compiler_config=cfg), get_npu_backend(compiler_config=_config())
    assert a == b
    cfg.debug.aclgraph.clone_input = False  # the backend compiles with what the config says now
    assert a != b and hash(a) != hash(get_npu_backend(compiler_config=_config()))
    cfg.debug.aclgraph.clone_input = True
    assert a == b
    cfg.npugraphex_config.capture_sizes.raw.append(4)  # a list value changed in place counts
    assert a != b


def test_custom_decompositions_are_part_of_the_identity():
    def make(fn, mode="npugraph_ex"):
        return get_npu_backend(compiler_config=_config(mode),
                               custom_decompositions={aten.gelu.default: fn})

    assert make(my_gelu) == make(my_gelu) and hash(make(my_gelu)) == hash(make(my_gelu))
    assert make(my_gelu) != make(other_gelu)
    assert make(my_gelu) != get_npu_backend(compiler_config=_config())
    custom = {aten.gelu.default: my_gelu}
    backend = get_npu_backend(compiler_config=_config(), custom_decompositions=custom)
    custom[aten.gelu.default] = other_gelu  # the merge already happened: nothing changes
    assert backend == make(my_gelu)


def test_copy_and_deepcopy_return_the_backend_itself():
    backend = get_npu_backend(compiler_config=_config())
    assert copy.copy(backend) is backend and copy.deepcopy(backend) is backend
    holder = copy.deepcopy({"backend": backend, "mode": "npugraph_ex"})  # a CompileConfig's
    assert holder["backend"] is backend                                    # to_dict()


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_pickled_backend_is_equal_and_compiles_with_the_same_config(mode):
    backend = get_npu_backend(compiler_config=_config(mode),
                              custom_decompositions={aten.gelu.default: my_gelu})
    again = pickle.loads(pickle.dumps(backend))
    assert again == backend and hash(again) == hash(backend)
    assert again.keywords["compiler_config"] is not backend.keywords["compiler_config"]
    assert again.keywords["compiler_config"] == backend.keywords["compiler_config"]
    assert again.keywords["decompositions"][aten.gelu.default] is my_gelu
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with route.record_graphs() as graphs:
        out = torch.compile(lambda t: torch.nn.functional.gelu(t) + 1, backend=again)(x)
    assert [g.config.mode.raw for g in graphs] == [mode]
    torch.testing.assert_close(out, my_gelu(x) + 1)  # the custom decomposition ran


def test_a_packet_key_survives_pickling():
    backend = get_npu_backend(compiler_config=_config(),
                              custom_decompositions={aten.gelu: my_gelu})
    again = pickle.loads(pickle.dumps(backend))
    assert again == backend and again._custom == {aten.gelu: my_gelu}


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_dynamo_reuses_what_an_equal_backend_compiled(mode):
    def f(x):
        return torch.relu(x @ x.T) * 2

    torch._dynamo.reset()
    x = torch.randn(4, 4)
    first = get_npu_backend(compiler_config=_config(mode))
    torch.testing.assert_close(torch.compile(f, backend=first)(x), f(x))
    before = _frames()
    for equal in (copy.deepcopy(first), pickle.loads(pickle.dumps(first)),
                  get_npu_backend(compiler_config=_config(mode))):
        with route.record_graphs() as graphs:
            out = torch.compile(f, backend=equal)(x)
        assert graphs == [] and _frames() == before
        torch.testing.assert_close(out, f(x))
    other = "max-autotune" if mode == "npugraph_ex" else "npugraph_ex"
    with route.record_graphs() as graphs:  # another configuration compiles again
        torch.compile(f, backend=get_npu_backend(compiler_config=_config(other)))(x)
    assert [g.config.mode.raw for g in graphs] == [other] and _frames() == before + 1


# -- torch.compile(mode=...) against CompilerConfig.mode ---------------------------------------
def _compile_with_mode(config_mode, compile_mode):
    torch._dynamo.reset()
    backend = get_npu_backend(compiler_config=_config(config_mode))
    with warnings.catch_warnings(record=True) as caught, route.record_graphs() as graphs:
        warnings.simplefilter("always")
        out = torch.compile(lambda t: t * 3 + 1, backend=backend, mode=compile_mode)(
            torch.ones(3))
    assert torch.equal(out, torch.full((3,), 4.0))
    named = [str(w.message) for w in caught if "torch.compile(mode=" in str(w.message)]
    return [g.config.mode.raw for g in graphs], named, caught


@pytest.mark.parametrize("config_mode,compile_mode", [
    ("npugraph_ex", None), ("npugraph_ex", "default"), ("npugraph_ex", "npugraph_ex"),
    ("npugraph_ex", "reduce-overhead"),  # transformers' default: the same compiler, no warning
    ("max-autotune", "max-autotune")])
def test_the_same_mode_or_none_passes_silently(config_mode, compile_mode):
    ran, named, caught = _compile_with_mode(config_mode, compile_mode)
    assert ran == [config_mode] and named == []
    assert not any(issubclass(w.category, DeprecationWarning) for w in caught)


@pytest.mark.parametrize("config_mode,compile_mode", [
    ("max-autotune", "reduce-overhead"), ("max-autotune", "npugraph_ex"),
    ("npugraph_ex", "max-autotune")])
def test_another_mode_is_named_and_the_configuration_runs(config_mode, compile_mode):
    ran, named, caught = _compile_with_mode(config_mode, compile_mode)
    assert ran == [config_mode]
    assert len(named) == 1, named
    assert f"torch.compile(mode={compile_mode!r})" in named[0]
    assert f"CompilerConfig.mode={config_mode!r}: {config_mode!r} runs" in named[0]
    assert all(w.category is UserWarning for w in caught if w.message.args[0] in named)


def test_the_mode_warning_is_visible_with_default_warning_filters():
    code = ("import torch, torchair_dist\n"
            "cfg = torchair_dist.CompilerConfig()\n"
            "b = torchair_dist.get_npu_backend(compiler_config=cfg)\n"
            "torch.compile(lambda t: t + 1, backend=b, mode='reduce-overhead')(torch.ones(2))\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "UserWarning: torchair_dist: torch.compile(mode='reduce-overhead') differs" in \
        done.stderr and "'max-autotune' runs" in done.stderr, done.stderr[-2000:]


def test_an_unknown_compile_mode_is_an_error():
    backend = get_npu_backend(compiler_config=_config())
    f = torch.compile(lambda t: t + 1, backend=backend, mode="max-autotune-no-cudagraphs")
    with pytest.raises(Exception, match="not a torchair_dist mode"):
        f(torch.ones(2))


# -- thread ranks: one process, Dynamo's cache shared by every rank's thread ------------------
@pytest.mark.skipif(not torch_at_least(2, 13), reason="thread ranks need torch >= 2.13")
def test_backends_made_on_different_thread_ranks_stay_apart():
    """The advice WrongRankError gives (one backend per rank, made in the rank's thread) keeps
    working with equal configurations: a group given by ranks does not tell Dynamo's guards
    the ranks apart, the backend does."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.testing._internal.common_distributed import spawn_threads_and_init_comms

    def fn(x):
        return funcol.all_reduce(x * 2, "sum", group=[0, 1]) * x

    backends, results = {}, {}

    @spawn_threads_and_init_comms(world_size=2)
    def run(_):
        rank = dist.get_rank()
        backends[rank] = backend = get_npu_backend(compiler_config=_config())
        assert backend == get_npu_backend(compiler_config=_config())  # same rank: equal
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        outs = []
        for i in range(3):  # rank r holds r + i: the sum of 2x over both ranks is 4i + 2
            out = compiled(torch.full((4,), float(rank + i)))
            outs.append(torch.equal(out, torch.full((4,), float((4 * i + 2) * (rank + i)))))
        results[rank] = outs

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch: groups by ranks are deprecated
        run(None)
    assert backends[0] != backends[1]
    assert results == {0: [True] * 3, 1: [True] * 3}, results
