"""Every option takes effect or is named in the one warning — checked against the code's reads.

For each option of ``CompilerConfig`` and each mode family, the option is set alone to a valid
non-default value and a small collective program is compiled and run once on this (CPU)
platform, with option reads tracked. Then:
- the options the pipeline declares ineffective are exactly the ones the warning names;
- an option declared effective was really read by the code during the compile and first call;
- the code read no option that the pipeline declares ineffective (the table would lie).
"""
import dataclasses
import warnings

import pytest
import torch
import torch.distributed as dist

import torchair_dist
from torchair_dist.pipeline import option_support
from torchair_dist.pipeline import stages as pipeline
from torchair_dist.configs import CompilerConfig, track_option_reads
from torchair_dist.configs.option import (CallableOption, ChoiceOption,
                                          DictOption, IntListOption, IntRangeOption,
                                          OpNameListOption, PathOption,
                                          PoolHandleOption, RegexOption, StrOption)

MODES = ("max-autotune", "npugraph_ex")


pytestmark = pytest.mark.usefixtures("one_rank_group")


def non_default_value(opt, tmp_path):
    """A valid value that differs from the option's default (None: there is none)."""
    if isinstance(opt, ChoiceOption):  # BoolOption included
        others = [c for c in opt.choices if c != opt.default or type(c) is not type(opt.default)]
        others = [c for c in others if c is not None] or others
        return others[0] if others else None
    if isinstance(opt, IntRangeOption):
        for v in (opt.lo, opt.lo + 1, (opt.default or 0) + 1):
            if v != opt.default and opt.lo <= v <= opt.hi:
                return v
    if isinstance(opt, PathOption):
        if opt.must_exist == "dir" or (opt.must_exist is None and not opt.suffix):
            (tmp_path / "dir").mkdir(exist_ok=True)
            return str(tmp_path / "dir")  # not the default (the working directory)
        path = tmp_path / f"f{opt.suffix or '.txt'}"
        path.write_text("{}")
        return str(path)
    if isinstance(opt, RegexOption):
        return opt.example
    if isinstance(opt, StrOption):
        return "x"
    if isinstance(opt, OpNameListOption):
        return ["aten.mm"]
    if isinstance(opt, IntListOption):
        return [1, 2]
    if isinstance(opt, DictOption):
        return {"k": "v"}
    if isinstance(opt, CallableOption):
        return lambda *args: None
    if isinstance(opt, PoolHandleOption):
        return (0, 1)
    raise AssertionError(f"no test value for {type(opt).__name__}")


def program(x, w):
    y = x @ w
    dist.all_reduce(y)
    return torch.relu(y) + 1


def compile_once(cfg):
    """Warnings from get_npu_backend and the reads of compile + first call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = torchair_dist.get_npu_backend(compiler_config=cfg)
        torch._dynamo.reset()
        x, w = torch.randn(4, 8), torch.randn(8, 8)
        with track_option_reads() as reads:
            out = torch.compile(program, backend=backend, fullgraph=True)(x, w)
        torch._dynamo.reset()
    assert torch.allclose(out, program(x, w))
    named = [str(w.message) for w in caught if w.category is UserWarning
             and "do not take effect" in str(w.message)]
    return named, reads


PATHS = [p for p, _ in CompilerConfig().leaves() if p != "mode"]


@pytest.mark.parametrize("mode", MODES)
def test_every_option_is_honest(mode, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # dumps and exports land here
    problems = []
    for path in PATHS:
        cfg = CompilerConfig()
        cfg.mode = mode
        value = non_default_value(cfg.option(path), tmp_path)
        if value is None:
            continue  # an option with a single accepted value (e.g. jit_compile="auto")
        cfg.option(path).set(value)
        declared_off = option_support.ineffective_options(cfg)
        named, reads = compile_once(cfg)
        warned = bool(named) and f"config.{path}=" in named[0]
        if len(named) > 1:
            problems.append(f"{path}: {len(named)} warnings")
        if (path in declared_off) != warned:
            problems.append(f"{path}: declared ineffective={path in declared_off}, warned={warned}")
        if path not in declared_off and path not in reads:
            problems.append(f"{path}: declared effective but never read")
        lying = reads - option_support.effective_options(cfg)
        if lying:
            problems.append(f"{path}: code read {sorted(lying)}, declared ineffective")
    assert not problems, "\n".join(problems)


def test_warning_names_the_reason():
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.ge_config.enable_single_stream = True
    cfg.export.export_name = "m"
    cfg.debug.fx_summary.skip_compile = False
    cfg.experimental_config.memory_efficiency = True
    cfg.debug.aclgraph.clone_input = False
    cfg.npugraphex_config.capture_error_mode = "relaxed"
    found = option_support.ineffective_options(cfg, platform="cpu")
    assert "nowhere" not in found["ge_config.enable_single_stream"][1]
    assert found["export.export_name"][1] == "only in mode max-autotune"
    assert found["debug.fx_summary.skip_compile"][1] == "only when debug.fx_summary.type is on"
    assert "not implemented" in found["experimental_config.memory_efficiency"][1]
    assert found["npugraphex_config.capture_error_mode"][1] == "only on cuda/npu"
    assert "npugraphex_config.capture_error_mode" not in option_support.ineffective_options(cfg, "cuda")
    assert "debug.aclgraph.clone_input" not in found  # the CPU stand-in captures too
    cfg.mode = "max-autotune"
    found = option_support.ineffective_options(cfg, platform="cpu")
    assert found["export.export_name"][1] == "only when export.export_mode is on"


def test_one_warning_per_compile_lists_every_ineffective_option():
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.ge_config.enable_single_stream = True
    cfg.experimental_config.topology_sorting_strategy = "BFS"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        option_support.check_config_support(cfg, platform="cpu")
    user = [w for w in rec if w.category is UserWarning]
    assert len(user) == 1
    text = str(user[0].message)
    assert "npugraph_ex" in text and "config.ge_config.enable_single_stream=True" in text
    assert "config.experimental_config.topology_sorting_strategy='BFS'" in text


def test_default_config_warns_nothing():
    for mode in ("max-autotune", "npugraph_ex"):
        cfg = CompilerConfig()
        cfg.mode = mode
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert option_support.check_config_support(cfg) == []


def test_reduce_overhead_is_deprecated():
    cfg = CompilerConfig()
    cfg.mode = "reduce-overhead"
    with pytest.warns(DeprecationWarning, match="npugraph_ex"):
        option_support.check_config_support(cfg)


def test_options_argument_goes_through_the_same_check():
    cfg = CompilerConfig()
    cfg.mode = "max-autotune"
    backend = torchair_dist.get_npu_backend(compiler_config=cfg)
    fn = torch.compile(lambda x: x * 2, backend=backend, options={"clone_input": False})
    with pytest.warns(UserWarning, match=r"debug\.aclgraph\.clone_input=False \(only in mode"):
        fn(torch.ones(3))


def test_every_stage_function_exists_and_every_mode_row_is_complete():
    for stage in pipeline.STAGES.values():
        assert callable(stage.fn), stage.name
        assert stage.level in ("dynamo-pass", "aot", "aot-pass", "route", "backend", "runtime")
        for path in stage.all_options():
            CompilerConfig().option(path)  # raises for an unknown option
    for row in pipeline.MODE_TABLE.values():
        assert set(row.stages) <= set(pipeline.STAGES)
        assert row.mode in torchair_dist.configs.MODES
        route = [s for s in row.stages if pipeline.STAGES[s].level == "route"]
        assert route[-1] == "compile", row.mode  # the route ends in the mode's backend


@pytest.mark.parametrize("mode", MODES)
def test_the_table_runs_the_route(mode, monkeypatch):
    """The compiler calls the route and runtime stages the table lists, in its order: a stage
    removed from the mode's row is not run."""
    from torchair_dist.pipeline import route as compiler

    cfg = CompilerConfig()
    cfg.mode = mode
    cfg.debug.run_eagerly = True
    seen = []

    def spy(stage):
        def call(*args):
            seen.append(stage.name)
            return stage.fn(*args)
        return call

    for name, stage in list(pipeline.STAGES.items()):
        if stage.level in ("route", "runtime"):
            monkeypatch.setitem(pipeline.STAGES, name, dataclasses.replace(stage, fn=spy(stage)))
    x = torch.randn(3)
    out = torch.compile(lambda t: t * 3, backend=torchair_dist.get_npu_backend(
        compiler_config=cfg), fullgraph=True)(x)
    assert torch.equal(out, x * 3)
    assert seen == ["run_eagerly", "consistency"]  # the eager runner ends the route
    seen.clear()
    row = pipeline.MODE_TABLE[mode]
    monkeypatch.setitem(pipeline.MODE_TABLE, mode, pipeline.ModeRow(
        row.mode, row.backend, tuple(s for s in row.stages if s != "run_eagerly"),
        row.cache_format, row.doc))
    torch._dynamo.reset()
    out = torch.compile(lambda t: t * 4, backend=torchair_dist.get_npu_backend(
        compiler_config=cfg), fullgraph=True)(x)
    assert torch.equal(out, x * 4)
    assert seen[-2:] == ["compile", "consistency"] and "run_eagerly" not in seen
    assert compiler is not None


def test_record_graphs_after_a_stage_sees_that_stage_output():
    from torchair_dist.pipeline import route as compiler

    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.experimental_config.remove_noop_ops = True

    def f(x):
        return (x + 1).view(-1)

    with compiler.record_graphs(after="view_to_reshape") as graphs:
        out = torch.compile(f, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                            fullgraph=True)(torch.ones(2, 2))
    assert torch.equal(out, f(torch.ones(2, 2)))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert "aten.view.default" not in targets and "aten.reshape.default" in targets
    with pytest.raises(ValueError, match="not an AOT-pass stage"):
        with compiler.record_graphs(after="ge_convert"):
            pass

