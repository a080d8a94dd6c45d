"""The compile cache's key across processes: a user pass is keyed by what it is, never by its
address, and the library's own graph-shaping code is part of the key (issue 32).

Each run is a fresh process sharing one cache directory, compiling the same model in both
modes with a user ``post_grad_custom_post_pass`` (as TorchAir users set it):
same pass -> the second process loads; changed pass body -> compiled; the library's pass code
changed (a copy of the package whose ``passes/common.py`` differs) -> compiled.
"""
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import torchair_dist
from torchair_dist.cache import identity, keys
from torchair_dist.pipeline import stages as pipeline

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(torchair_dist.__file__)))

SCRIPT = """
import sys, pathlib, torch, torchair_dist
sys.path.insert(0, {here!r})
from test_cache import Net, X, check

def user_pass(gm, example_inputs, config):
    {body}

sources = []
for mode in ("npugraph_ex", "max-autotune"):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.post_grad_custom_post_pass = user_pass
    net = Net().eval()
    fn = torchair_dist.cache_compile(net.forward, config=cfg,
                                     cache_dir=str(pathlib.Path({cache!r}) / mode))
    check(net, fn(X))
    sources.append(fn.last_source)
print(torchair_dist.__file__)
print(" ".join(sources))
"""


def _run(cache, body, pythonpath):
    """One fresh process importing torchair_dist from ``pythonpath`` (run outside the
    checkout: ``python -c`` puts the working directory first on sys.path)."""
    script = textwrap.dedent(SCRIPT).format(here=HERE, cache=str(cache), body=body)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=pythonpath)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=env, cwd=str(cache.parent))
    assert r.returncode == 0, r.stderr[-4000:]
    where, sources = r.stdout.strip().splitlines()[-2:]
    return where, sources.split()


def test_user_pass_and_library_code_in_the_key_across_processes(tmp_path):
    cache = tmp_path / "cache"
    same = "gm.graph.lint()"
    where, first = _run(cache, same, PACKAGE)
    assert where.startswith(PACKAGE) and first == ["compiled", "compiled"]
    assert _run(cache, same, PACKAGE)[1] == ["cache", "cache"]  # the same pass: a hit
    changed = "gm.graph.lint(); gm.recompile()"
    assert _run(cache, changed, PACKAGE)[1] == ["compiled", "compiled"]  # its body changed

    copy = tmp_path / "lib"
    shutil.copytree(os.path.join(PACKAGE, "torchair_dist"), copy / "torchair_dist",
                    ignore=shutil.ignore_patterns("__pycache__"))
    common = copy / "torchair_dist" / "passes" / "common.py"
    text = common.read_text()
    common.write_text(text.replace('    """Replace ``aten.view`` by ``aten.reshape``',
                                   '    """(changed) Replace ``aten.view`` by ``aten.reshape``'))
    assert common.read_text() != text
    where, sources = _run(cache, same, str(copy))
    assert where.startswith(str(copy))
    assert sources == ["compiled", "compiled"]  # a library pass changed, same __version__
    assert _run(cache, same, PACKAGE)[1] == ["cache", "cache"]  # the original still hits


# -- the identity functions themselves (in process) -----------------------------------------
def _make(scale):
    def user_pass(gm, example_inputs, config):
        return gm if scale > 1 else None
    return user_pass


def test_callable_identity_is_what_the_function_is():
    a, b = _make(2), _make(2)
    assert a is not b and identity.callable_identity(a) == identity.callable_identity(b)
    assert "0x" not in identity.callable_identity(a)
    assert identity.callable_identity(_make(3)) != identity.callable_identity(a)  # a closure value

    def other(gm, example_inputs, config):
        return gm if gm is None else None

    assert identity.callable_identity(other) != identity.callable_identity(a)
    assert identity.callable_identity(functools.partial(a, 1)) != \
        identity.callable_identity(functools.partial(a, 2))

    class WithUuid:
        def __call__(self, graph):
            pass

        def uuid(self):
            return "v1"

    assert identity.callable_identity(WithUuid()).endswith("uuid='v1'")


def test_config_part_of_the_key_holds_no_address():
    cfg = torchair_dist.CompilerConfig()
    cfg.post_grad_custom_post_pass = _make(2)
    cfg.post_grad_custom_pre_pass = lambda gm, example_inputs, config: None
    parts = keys.config_parts(cfg)
    assert not [p for p in parts if " at 0x" in p], parts


# -- the library part of the key: derived from the stages that shaped the entry ------------
def _module_file(name: str) -> str:
    import importlib.util

    return importlib.util.find_spec(name).origin


def _imports(name: str):
    """The torchair_dist modules ``name``'s source imports (top level or inside functions), found
    here independently of the library's own reading (importlib's specs, not the files)."""
    import ast

    path = _module_file(name)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)] \
                if node.level else []
            full = ".".join(base + ([node.module] if node.module else []))
            found.add(full)
            found.update(f"{full}.{a.name}" for a in node.names if _is_module(f"{full}.{a.name}"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("torchair_dist.") and m != name}


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += _imports(m)
    return seen


def _forget_library():
    keys.library_digest.cache_clear()
    keys.library_sources.cache_clear()
    keys.imports_of.cache_clear()


@pytest.fixture
def edited_source(monkeypatch):
    """``edit(module)``: from now on the key reads ``module``'s source with a line appended (as
    if the file had been changed); the per-process memo is cleared before and after."""
    real = keys._module_source
    edited = set()

    def source(name):
        data = real(name)
        return data + b"\n# fixed\n" if name in edited else data

    monkeypatch.setattr(keys, "_module_source", source)
    _forget_library()
    yield edited.add
    monkeypatch.undo()
    _forget_library()


@pytest.mark.parametrize("mode", sorted(pipeline.MODE_TABLE))
def test_the_library_part_is_the_import_closure_of_the_shaping_stages(mode):
    """No list is kept by hand: the modules keyed are those of the stages up to the observation
    point (and the import-time remaps, the decomposition table), and everything they import,
    transitively, as found from their source here by another reading."""
    roots = pipeline.shaping_modules(mode)
    assert {s.fn.__module__ for s in pipeline.stages_of(mode)
            if s.level in pipeline.SHAPING_LEVELS} <= set(roots)
    sources = keys.library_sources(mode)
    assert set(sources) == _closure(roots)
    assert len(sources) == len(set(sources))
    assert not [m for m in sources if m.startswith("torchair_dist.backends")
                or m.startswith("torchair_dist.cpu") or m.startswith("torchair_dist.cache")]


@pytest.mark.parametrize("mode", sorted(pipeline.MODE_TABLE))
def test_library_part_follows_the_row(mode):
    sources = keys.library_sources(mode)
    assert "torchair_dist.passes.stream_ordering" in sources  # stream_labels / stream_order
    assert "torchair_dist.passes.scope_lowering" in sources  # scope_ops
    assert "torchair_dist.streams.scope_ops" in sources  # imported by scope_lowering
    assert "torchair_dist.collectives.remap" in sources  # installed at import
    # handed to the aot stage by the entry, and what the table is merged from
    assert {"torchair_dist.pipeline.decomposition_table", "torchair_dist.pipeline.torch_patches",
            "torchair_dist.collectives.decompositions"} <= set(sources)
    assert all(os.path.exists(_module_file(m)) for m in sources)
    if mode == "max-autotune":
        assert "torchair_dist.passes.topo_sort" in sources
        assert "torchair_dist.passes.remove_cat" not in sources
    else:
        assert "torchair_dist.passes.remove_cat" in sources


def test_a_module_imported_only_indirectly_changes_the_key(edited_source):
    """A helper no stage module imports itself, reached through another module's imports: a
    change to its source is a miss in every mode that reaches it."""
    mode = "npugraph_ex"
    roots = pipeline.shaping_modules(mode)
    direct = set(roots).union(*(_imports(r) for r in roots))
    indirect = [m for m in keys.library_sources(mode) if m not in direct]
    assert indirect, "every keyed module is imported by a stage module itself"
    before = {m: keys.library_digest(m) for m in pipeline.MODE_TABLE}
    for module in indirect:
        _forget_library()
        edited_source(module)
        after = {m: keys.library_digest(m) for m in pipeline.MODE_TABLE}
        changed = {m for m in before if before[m] != after[m]}
        assert changed == {m for m in before if module in keys.library_sources(m)}, module
        assert mode in changed, module
        before = after


def test_a_module_outside_the_closure_leaves_the_key(edited_source):
    """Code that runs after the observation point (the capture stand-in, a backend's steps, the
    cache itself) is not part of what shaped a stored graph: changing it keeps every key."""
    outside = ["torchair_dist.cpu.record", "torchair_dist.backends.ge.export",
               "torchair_dist.cache.store"]
    for mode in pipeline.MODE_TABLE:
        assert not set(outside) & set(keys.library_sources(mode))
    before = {m: keys.library_digest(m) for m in pipeline.MODE_TABLE}
    for module in outside:
        edited_source(module)
    _forget_library()
    assert {m: keys.library_digest(m) for m in pipeline.MODE_TABLE} == before


def test_a_new_shaping_stage_brings_its_module_and_imports_into_the_key(monkeypatch):
    """Adding a stage needs no declaration: its function's module, and what that imports, are
    keyed from then on."""
    from torchair_dist.base import layout

    fn = next(v for v in vars(layout).values()
              if callable(v) and getattr(v, "__module__", None) == layout.__name__)
    stage = pipeline.Stage("mystery", fn, "aot-pass", "doc")
    row = pipeline.MODE_TABLE["npugraph_ex"]
    before = keys.library_sources("npugraph_ex")
    assert layout.__name__ not in before
    monkeypatch.setitem(pipeline.STAGES, "mystery", stage)
    monkeypatch.setitem(pipeline.MODE_TABLE, "npugraph_ex",
                        dataclasses.replace(row, stages=row.stages + ("mystery",)))
    _forget_library()
    try:
        after = keys.library_sources("npugraph_ex")
        assert layout.__name__ in after and _imports(layout.__name__) <= set(after)
    finally:
        monkeypatch.undo()
        _forget_library()


def test_changing_stream_ordering_misses_the_cache(edited_source):
    """The stream-ordering stages' source is part of the key: a fixed event-insertion bug is a
    miss, never a load of a graph the old code shaped."""
    before = {mode: keys.library_digest(mode) for mode in pipeline.MODE_TABLE}
    edited_source("torchair_dist.passes.stream_ordering")
    _forget_library()
    after = {mode: keys.library_digest(mode) for mode in pipeline.MODE_TABLE}
    assert all(before[m] != after[m] for m in before)


# -- what a pass or a decomposition calls is part of what it is ------------------------------
def _helper_module(source: str):
    """A fresh module (as a user's file would be) holding ``source``."""
    import types

    module = types.ModuleType("user_passes_for_test")
    exec(compile(textwrap.dedent(source), "user_passes_for_test.py", "exec"), module.__dict__)
    return module


_PASS = """
import math
LIMIT = {limit}

def inner(gm):
    return gm.graph.{call}()

def helper(gm):
    return inner(gm) if LIMIT > math.pi else None

def user_pass(gm, example_inputs, config):
    return helper(gm)
"""


def test_a_helper_the_pass_calls_is_in_its_identity():
    """The pass's own bytecode is the same in all four; what it calls differs (a helper's
    helper, a module constant): a different identity each time, the same for the same code."""
    def of(**kw):
        return identity.callable_identity(_helper_module(_PASS.format(**kw)).user_pass)

    base = of(limit=4, call="lint")
    assert base == of(limit=4, call="lint")
    assert of(limit=5, call="lint") != base          # a constant the helper reads
    assert of(limit=4, call="eliminate_dead_code") != base  # the helper's helper
    assert "module math" in base and "0x" not in base      # a library module by name


def test_decompositions_are_keyed_by_what_they_compute():
    """Two decompositions with the same bytecode and other constants (x * 2 vs x * 3) give two
    model keys (they were keyed by bytecode alone)."""
    import torch

    aten = torch.ops.aten
    net = torch.nn.Linear(2, 2)
    cfg = torchair_dist.CompilerConfig()
    key2 = keys.model_key(net, "forward", cfg, {aten.gelu.default: lambda x: x * 2})
    key3 = keys.model_key(net, "forward", cfg, {aten.gelu.default: lambda x: x * 3})
    assert key2 != key3
    assert key2 == keys.model_key(net, "forward", cfg, {aten.gelu.default: lambda x: x * 2})


# -- a helper is keyed by what it calls, in every process -------------------------------------
_ACT = """
import torch

def act(x):
    return torch.{fn}(x)
"""


def test_a_helper_is_keyed_by_the_names_it_calls():
    """``torch.sin`` and ``torch.cos`` differ only in the code's names: a helper a model reads
    (``describe_value``) used to be keyed by bytecode and constants alone, so the two shared
    one model key and a cached graph of one was loaded for the other."""
    sin = _helper_module(_ACT.format(fn="sin")).act
    cos = _helper_module(_ACT.format(fn="cos")).act
    assert identity.describe_value(sin) != identity.describe_value(cos)
    assert identity.callable_identity(sin) != identity.callable_identity(cos)
    assert identity.describe_value(sin) == \
        identity.describe_value(_helper_module(_ACT.format(fn="sin")).act)


def test_a_user_module_read_by_attribute_is_keyed_by_its_source(tmp_path, monkeypatch):
    """A pass calling ``helpers.fix(gm)``: the pass's code names only the module; the module's
    source is in the identity (a changed helper file is a miss), a library module's name is."""
    import importlib

    monkeypatch.syspath_prepend(str(tmp_path))

    def identity_with(body):
        (tmp_path / "user_helpers_for_test.py").write_text(f"def fix(gm):\n    {body}\n")
        sys.modules.pop("user_helpers_for_test", None)
        identity.file_digest.cache_clear()
        helpers = importlib.import_module("user_helpers_for_test")
        user_pass = _helper_module("def user_pass(gm, example_inputs, config):\n"
                                   "    return helpers.fix(gm)\n").user_pass
        user_pass.__globals__["helpers"] = helpers
        return identity.callable_identity(user_pass)

    try:
        lint = identity_with("return gm.graph.lint()")
        assert lint == identity_with("return gm.graph.lint()")
        assert lint != identity_with("return gm.graph.eliminate_dead_code()")
        assert "module user_helpers_for_test:" in lint
    finally:
        sys.modules.pop("user_helpers_for_test", None)
        identity.file_digest.cache_clear()


_SET_SCRIPT = """
from torchair_dist.cache import identity

def pick(x, mode):
    return x * 2 if mode in {"alpha", "beta", "gamma", "delta", "epsilon"} else x

print(identity.callable_identity(pick))
print(identity.describe_value(pick))
"""


def test_a_set_literal_is_the_same_identity_in_every_process(tmp_path):
    """``mode in {...}`` compiles to a frozenset constant whose ``repr`` order follows the
    string hash seed: it used to give every process its own key (a cache that never hit)."""
    outs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONHASHSEED=seed,
                   PYTHONPATH=PACKAGE)
        r = subprocess.run([sys.executable, "-c", _SET_SCRIPT], capture_output=True, text=True,
                           timeout=300, env=env, cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-4000:]
        outs.add(r.stdout)
    assert len(outs) == 1, outs


_HELPER_MODEL = """
import torch
from helper_for_cache_test import act

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return act(self.lin(x))
"""

_HELPER_RUN = """
import sys, torch, torchair_dist
sys.path.insert(0, ".")
from model_for_cache_test import Net
torch.manual_seed(0)
net, x = Net().eval(), torch.randn(2, 4)
for mode in ("npugraph_ex", "max-autotune"):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    fn = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir="cache/" + mode)
    with torch.no_grad():
        out = fn(x)
        print(mode, fn.last_source, torch.allclose(out, net(x)))
"""


def test_a_changed_helper_in_another_file_is_a_miss_across_processes(tmp_path):
    """The model's class file is unchanged; the helper it imports (another file of the user's)
    goes from torch.sin to torch.cos between two processes: the second compiles and is right
    (it used to load the first one's graph: 'cache', and a wrong result, in both modes)."""
    (tmp_path / "model_for_cache_test.py").write_text(_HELPER_MODEL)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=PACKAGE)
    runs = []
    for fn in ("sin", "cos", "cos"):
        (tmp_path / "helper_for_cache_test.py").write_text(
            f"import torch\n\ndef act(x):\n    return torch.{fn}(x)\n")
        shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
        r = subprocess.run([sys.executable, "-c", _HELPER_RUN], capture_output=True, text=True,
                           timeout=300, env=env, cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-4000:]
        runs.append(r.stdout.split())
    assert runs[0] == ["npugraph_ex", "compiled", "True", "max-autotune", "compiled", "True"]
    assert runs[1] == runs[0]                                   # cos: a miss, compiled, right
    assert runs[2] == ["npugraph_ex", "cache", "True", "max-autotune", "cache", "True"]
