"""One execution rule for every level of the stage table (issue 32).

* a stage declared with ``gate=`` runs only when its gate says so, whatever its level, though
  its function checks nothing (a planted pass);
* no pass of the table re-checks its own gate (read from the source);
* a backend step removed from a mode's row does not run, and its option is named in the one
  warning, as for the route level;
* the README's table numbers each mode's steps in the order that runs: the stages a compile
  really calls, recorded, are the rendered order filtered by the rule;
* the second pass list (``COMMON_PASSES`` / ``run_common_passes``) is gone.
"""
import inspect
import os
import re
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist.configs import CompilerConfig
from torchair_dist.pipeline import stages as pipeline
from torchair_dist.tools import docs

MODES = ("max-autotune", "npugraph_ex")


def _compile(cfg, fn, *inputs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                            fullgraph=True)(*inputs)
    torch._dynamo.reset()
    named = [str(w.message) for w in caught if w.category is UserWarning
             and "do not take effect" in str(w.message)]
    return out, named


def _with_row(monkeypatch, mode, stages):
    row = pipeline.MODE_TABLE[mode]
    monkeypatch.setitem(pipeline.MODE_TABLE, mode, pipeline.ModeRow(
        row.mode, row.backend, tuple(stages), row.cache_format, row.doc))


# -- a planted pass: gate= and no check inside ---------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_a_gated_pass_without_a_check_of_its_own_runs_only_when_its_gate_is_on(
        mode, monkeypatch):
    calls = []

    def planted(gm, example_inputs, config):  # checks no option: the table's gate decides
        calls.append(len(gm.graph.nodes))
        return gm

    stage = pipeline.Stage("planted", planted, "aot-pass", "a planted pass",
                           gate="debug.deadlock_check")
    monkeypatch.setitem(pipeline.STAGES, "planted", stage)
    row = pipeline.MODE_TABLE[mode].stages
    at = row.index("validate")
    _with_row(monkeypatch, mode, row[:at] + ("planted",) + row[at:])

    x = torch.randn(4)
    cfg = CompilerConfig()
    cfg.mode = mode
    out, _ = _compile(cfg, lambda t: t * 2 + 1, x)
    assert torch.equal(out, x * 2 + 1)
    assert calls == []  # gate off: not run
    cfg.debug.deadlock_check = True
    out, _ = _compile(cfg, lambda t: t * 3 + 1, x)
    assert torch.equal(out, x * 3 + 1)
    assert len(calls) == 1  # gate on: run once, on the one graph


def test_a_stage_off_its_platforms_does_not_run(monkeypatch):
    calls = []

    def planted(gm, example_inputs, config):
        calls.append(1)
        return gm

    stage = pipeline.Stage("planted", planted, "aot-pass", "a planted pass",
                           needs="cann")
    monkeypatch.setitem(pipeline.STAGES, "planted", stage)
    row = pipeline.MODE_TABLE["npugraph_ex"].stages
    _with_row(monkeypatch, "npugraph_ex", ("planted",) + row)
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    _compile(cfg, lambda t: t + 1, torch.randn(2))
    assert calls == []
    monkeypatch.setattr(pipeline, "current_platform", lambda: "npu")
    _compile(cfg, lambda t: t + 2, torch.randn(2))
    assert calls == [1]


def test_no_pass_checks_its_own_gate():
    """The table's gate is the only switch: a stage function that returns early on its own
    gate option would be a second rule (a pass may still read an option's value to use it,
    as topology_sort reads its strategy)."""
    found = []
    for stage in pipeline.STAGES.values():
        if stage.gate is None:
            continue
        source = inspect.getsource(stage.fn)
        early = (r"if [^\n]*\.get\(\s*[\"']" + re.escape(stage.gate)
                 + r"[\"']\)[^\n]*:\s*\n\s*return")
        if re.search(early, source):
            found.append(f"{stage.name} ({docs.qualified_name(stage.fn)}) returns early on its "
                         f"gate {stage.gate}")
    assert not found, "\n".join(found)


def test_the_second_pass_list_is_gone():
    from torchair_dist.passes import common

    assert not hasattr(common, "COMMON_PASSES") and not hasattr(common, "run_common_passes")
    assert not hasattr(pipeline, "passes_of")


# -- backend steps run from the row ---------------------------------------------------------
def _spy_levels(monkeypatch, levels=None):
    """Record every stage the pipeline calls (all levels, or ``levels``), in call order: each
    stage of the table is replaced by one whose function records its name, then calls the
    real one."""
    import dataclasses

    seen = []

    def spy(stage):
        def call(*args, **kwargs):
            seen.append(stage.name)
            return stage.fn(*args, **kwargs)
        return call

    for name, stage in list(pipeline.STAGES.items()):
        if levels is None or stage.level in levels:
            monkeypatch.setitem(pipeline.STAGES, name, dataclasses.replace(stage, fn=spy(stage)))
    return seen


def test_a_removed_acl_backend_step_does_not_run_and_its_option_is_named(monkeypatch, tmp_path):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.debug.graph_dump.type = "py"
    cfg.debug.graph_dump.path = str(tmp_path)
    seen = _spy_levels(monkeypatch, {"backend"})
    x = torch.randn(4)
    out, named = _compile(cfg, lambda t: torch.relu(t) * 2, x)
    assert torch.equal(out, torch.relu(x) * 2) and named == []
    assert seen == ["acl_codegen", "acl_dump", "value_ints", "capture"]  # the row's order
    assert os.listdir(tmp_path), "acl_dump wrote nothing"

    seen.clear()
    dump_dir = tmp_path / "second"
    dump_dir.mkdir()
    cfg.debug.graph_dump.path = str(dump_dir)
    row = pipeline.MODE_TABLE["npugraph_ex"].stages
    _with_row(monkeypatch, "npugraph_ex", [s for s in row if s != "acl_dump"])
    out, named = _compile(cfg, lambda t: torch.relu(t) * 3, x)
    assert torch.equal(out, torch.relu(x) * 3)
    assert "acl_dump" not in seen and os.listdir(dump_dir) == []
    assert len(named) == 1 and "config.debug.graph_dump.type='py'" in named[0]


def test_a_removed_ge_backend_step_does_not_run_and_its_option_is_named(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = CompilerConfig()
    cfg.mode = "max-autotune"
    cfg.debug.graph_dump.type = "txt"
    cfg.debug.graph_dump.path = str(tmp_path / "dump")
    os.makedirs(tmp_path / "dump")
    seen = _spy_levels(monkeypatch, {"backend"})
    x = torch.randn(4)
    out, named = _compile(cfg, lambda t: torch.relu(t) * 2, x)
    assert torch.equal(out, torch.relu(x) * 2) and named == []
    assert seen == ["ge_convert", "ge_dump", "ge_run"]
    assert os.listdir(tmp_path / "dump")

    seen.clear()
    os.makedirs(tmp_path / "dump2")
    cfg.debug.graph_dump.path = str(tmp_path / "dump2")
    row = pipeline.MODE_TABLE["max-autotune"].stages
    _with_row(monkeypatch, "max-autotune", [s for s in row if s != "ge_dump"])
    out, named = _compile(cfg, lambda t: torch.relu(t) * 3, x)
    assert torch.equal(out, torch.relu(x) * 3)
    assert seen == ["ge_convert", "ge_run"] and os.listdir(tmp_path / "dump2") == []
    assert len(named) == 1 and "config.debug.graph_dump.type='txt'" in named[0]


# -- the README's order is the order that runs ---------------------------------------------
def rendered_order(mode):
    """The stages of ``mode`` in the order of their step numbers in the README's stage table."""
    lines = docs.render_stage_table().splitlines()
    head = next(line for line in lines if line.startswith("| stage |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    col = cols.index(f"`{mode}`")
    numbered = []
    for line in lines[lines.index(head) + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[col]:
            numbered.append((int(cells[col]), cells[0]))
    numbers = [n for n, _ in numbered]
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), f"{mode}: steps {numbers}"
    return [name for _, name in sorted(numbered)]


def _busy_config(mode, tmp_path):
    """A config under which most gated stages of ``mode`` run on CPU."""
    cfg = CompilerConfig()
    cfg.mode = mode
    cfg.post_grad_custom_pre_pass = lambda gm, example_inputs, config: None
    cfg.post_grad_custom_post_pass = lambda gm, example_inputs, config: None
    cfg.experimental_config.npu_fx_pass = True
    cfg.debug.deadlock_check = True
    cfg.debug.graph_dump.type = "py" if mode == "npugraph_ex" else "txt"
    cfg.debug.graph_dump.path = str(tmp_path)
    if mode == "max-autotune":
        cfg.ge_config.oo_constant_folding = True
        cfg.ge_config.oo_dead_code_elimination = True
        cfg.experimental_config.topology_sorting_strategy = "BFS"
    else:
        cfg.debug.aclgraph.remove_cat_ops = True
    return cfg


@pytest.mark.parametrize("mode", ["max-autotune", "npugraph_ex", "reduce-overhead"])
def test_the_rendered_order_is_the_order_that_runs(mode, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = _busy_config(mode, tmp_path)
    seen = _spy_levels(monkeypatch)
    x = torch.randn(4, 4)

    def f(t):
        return torch.cat([t @ t, t + 1]).view(-1).relu()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out, _ = _compile(cfg, f, x)
    torch.testing.assert_close(out, f(x))
    rule = [name for name in rendered_order(mode)
            if pipeline.applies(pipeline.STAGES[name], cfg)]
    assert seen == rule
    assert len(seen) >= 20  # the busy config really exercises the row


def test_the_table_reads_top_down_in_every_mode():
    """The README's rows are in an order every mode's numbers increase down."""
    names = list(pipeline.STAGES)
    for mode in pipeline.MODE_TABLE:
        order = rendered_order(mode)
        assert order == sorted(order, key=names.index), mode


def test_mode_rows_are_data_not_slices():
    """Each row is a tuple of names written once (no slicing of a shared tuple)."""
    source = inspect.getsource(pipeline)
    assert "_SPLIT" not in source and "_ENTRY" not in source
    for row in pipeline.MODE_TABLE.values():
        assert len(set(row.stages)) == len(row.stages), row.mode


def test_backends_start_no_step_themselves():
    """A backend only starts and finishes a build: the route runs the row's steps between;
    finishing a build no step worked on refuses, naming the missing step."""
    from torchair_dist.backends import aclgraph, ge
    from torchair_dist.base.graph_context import GraphContext

    gm = torch.fx.symbolic_trace(lambda t: t + 1)
    ctx = GraphContext(gm=gm, example_inputs=[torch.ones(2)], config=CompilerConfig(),
                       static_input_indices=[], mutated_input_indices=[], graph_name="g")
    with pytest.raises(RuntimeError, match="made no forward"):
        aclgraph.BACKEND.finish(aclgraph.BACKEND.start(ctx))
    with pytest.raises(RuntimeError, match="made no runner"):
        ge.BACKEND.finish(ge.BACKEND.start(ctx))


def test_stage_bodies_read_no_other_stage_gate_and_no_platform_name():
    """remove_cat_ops yields to inductor_kernels in the table, fx_summary's eager run is its own
    stage, the GE reference executor is told whether to overlap: none of them reads another
    stage's gate; no pass or backend compares a device name (platform/ answers)."""
    import pathlib

    import torchair_dist
    from torchair_dist import platform

    root = pathlib.Path(torchair_dist.__file__).parent
    for rel, gate in (("passes/remove_cat.py", "experimental_config.inductor_kernels"),
                      ("tools/fx_summary.py", "debug.data_dump.type"),
                      ("cpu/stand_ins.py", "distributed_config.overlap_collectives")):
        assert f'get("{gate}")' not in (root / rel).read_text(), rel
    names = re.compile(r"(==|!=|\bin)\s*\(?[\"'](npu|cuda|cpu)[\"']")
    for sub in ("passes", "backends", "pipeline", "tools", "cache"):
        for path in (root / sub).rglob("*.py"):
            assert not names.search(path.read_text()), path
    assert pipeline.STAGES["remove_cat_ops"].yields_to == "inductor_kernels"
    assert all(s.needs is None or s.needs in platform.CAPABILITIES
               for s in pipeline.STAGES.values())


def test_only_the_stage_table_reads_a_gate_and_only_platform_names_a_platform():
    """Everywhere in the library: a module reads a stage's gate (``.get``/``.peek`` of that
    option) only when a stage whose body lives in that module has it as its gate or declares it
    in ``reads`` (or lives in the package of such a stage: ``backends.ge``'s CANN options);
    the dump helpers in base/, the data-dump's 'original' copy, p2p's ordering and inductor's
    kernels used to read other stages' gates. Outside ``platform/`` and the CPU wing ``cpu/`` (the
    stand-ins themselves), no code compares a device or platform name."""
    import pathlib

    import torchair_dist

    root = pathlib.Path(torchair_dist.__file__).parent
    owners = {}
    for stage in pipeline.STAGES.values():
        module = stage.fn.__module__
        for option in stage.all_options():
            owners.setdefault(option, set()).add(module)
    gates = {s.gate for s in pipeline.STAGES.values() if s.gate}
    names = re.compile(r"(==|!=|\bin)\s*\(?[\"'](npu|cuda|cpu)[\"']")
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("platform/") or rel == "pipeline/stages.py":
            continue
        module = "torchair_dist." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        text = path.read_text()
        for gate in gates:
            if re.search(r"\.(get|peek)\(\s*[\"']" + re.escape(gate) + r"[\"']", text) \
                    and not any(module == o or module.startswith(o + ".") for o in owners[gate]):
                found.append(f"{rel} reads the gate {gate} (owned by {sorted(owners[gate])})")
        if not rel.startswith("cpu/"):
            found += [f"{rel}:{i} compares a platform name: {line.strip()}"
                      for i, line in enumerate(text.splitlines(), 1) if names.search(line)]
    assert not found, "\n".join(found)


def test_mode_argument_does_not_replace_the_configured_mode():
    """torch.compile(mode="reduce-overhead") on a max-autotune config: the configuration's mode
    runs, a UserWarning names both (no deprecation: reduce-overhead does not run)."""
    from torchair_dist.pipeline import route
    from torchair_dist.pipeline.entry import _npu_backend

    gm = torch.fx.symbolic_trace(lambda t: (t + 1,))
    with warnings.catch_warnings(record=True) as caught, route.record_graphs() as graphs:
        warnings.simplefilter("always")
        _npu_backend(gm, [torch.ones(2)], compiler_config=CompilerConfig(), decompositions={},
                     mode="reduce-overhead")
    assert [g.config.mode.raw for g in graphs] == ["max-autotune"]
    texts = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert any(t.startswith("UserWarning") and "mode='reduce-overhead'" in t
               and "'max-autotune' runs" in t for t in texts), texts
    assert not any(t.startswith("DeprecationWarning") for t in texts), texts
