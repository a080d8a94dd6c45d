"""Imports point down only (docs/architecture.md, "Layering"), parsed from the source (function-level imports
included, so no import is missed):

* every module has a declared level: a new top-level module, or a new package, fails until it
  is placed here (a package's entry covers the modules inside it);
* a module imports its own level or lower, and the functions and backends the stage table holds
  live no higher than the pipeline;
* a backend never imports another backend (the shared ``backends.context`` and
  ``backends.interface`` are no backend);
* of the CPU wing (``torchair_dist.cpu``) code outside it imports only
  ``torchair_dist.cpu.stand_ins``, the one place that picks a stand-in (so ``platform/``
  imports nothing of it); the wing reads from ``backends`` only the GE IR definitions;
* no import cycles.

``python tests/unit/import_graph.py`` prints the graph's size and cycles.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import import_graph  # noqa: E402

PKG = "torchair_dist"

# Lowest level first. A module is placed by the longest entry it equals or lies inside; entries
# ending in "." cover a package's modules, the others name one module exactly.
LEVELS = {
    # ground floor: errors, version, the base helpers, configuration, the platform seams
    "torchair_dist._version": 0, "torchair_dist.errors": 0, "torchair_dist.base": 0,
    "torchair_dist.base.": 0, "torchair_dist.configs.": 0, "torchair_dist.platform.": 0,
    "torchair_dist.pipeline": 0,  # the pipeline package's __init__: a docstring only
    "torchair_dist.tools": 0, "torchair_dist.compat": 0,
    "torchair_dist.collectives.": 1, "torchair_dist.streams.": 1,
    "torchair_dist.passes.": 2, "torchair_dist.pipeline.torch_patches": 2,
    "torchair_dist.pipeline.decomposition_table": 2,
    "torchair_dist.scope": 2, "torchair_dist.ops": 2,
    "torchair_dist.backends.": 3, "torchair_dist.cpu.": 3,
    "torchair_dist.pipeline.stages": 4, "torchair_dist.pipeline.option_support": 4,
    "torchair_dist.pipeline.route": 4,
    "torchair_dist.pipeline.aot": 4, "torchair_dist.tools.fx_summary": 4, "torchair_dist.ge": 4,
    "torchair_dist.pipeline.entry": 5,
    "torchair_dist.pipeline.dynamo_export": 6, "torchair_dist.cache.": 6,
    # the one describer of values and callables (and the groups it names by ranks): below the
    # backend entry, whose backends compare equal by their configs' descriptions
    "torchair_dist.cache.identity": 4, "torchair_dist.cache.groups": 4,
    "torchair_dist.tools.docs": 6, "torchair_dist.inference": 6,
    "torchair_dist.compat.names": 6, "torchair_dist.compat.surface": 6,
    "torchair_dist.compat.alias": 0,  # errors only; the rest by name, when installed
    "torchair_dist": 7,  # the package's __init__ only: the public API
}

CPU_WING = "torchair_dist.cpu"
CPU_CHOOSER = "torchair_dist.cpu.stand_ins"
# What the CPU wing may read from backends/: the GE IR (protobuf, dtypes, decoding)
CPU_MAY_READ = ("torchair_dist.backends.ge.proto", "torchair_dist.backends.ge.dtypes",
                "torchair_dist.backends.ge.decode")


def level_of(module: str, levels=LEVELS):
    """The declared level of ``module``, None when no entry covers it."""
    best = None
    for entry, level in levels.items():
        if entry.endswith("."):
            hit = module == entry[:-1] or module.startswith(entry)
        else:
            hit = module == entry
        if hit and (best is None or len(entry) > len(best[0])):
            best = (entry, level)
    return None if best is None else best[1]


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _backend_of(module: str):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "backends" else None


def violations(mods, levels=LEVELS, stage_fns=()):
    """Every broken rule, as lines (empty: the layering holds)."""
    found = []
    known = set(mods)
    for module in mods:
        if level_of(module, levels) is None:
            found.append(f"{module} has no level: add it to LEVELS in tests/unit/test_layering.py")
    for module, path in mods.items():
        mine = level_of(module, levels)
        for target in import_graph.imports_of(module, path, known):
            theirs = level_of(target, levels)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} (level {mine}) imports {target} (level {theirs})")
            a, b = _backend_of(module), _backend_of(target)
            if a and b and a != b and not {"context", "interface"} & {a, b}:
                found.append(f"backend {a} imports backend {b} ({module} -> {target})")
            if _inside(target, CPU_WING) and target != CPU_CHOOSER and \
                    not _inside(module, CPU_WING):
                found.append(f"{module} imports the CPU wing ({target}): ask "
                             f"{CPU_CHOOSER} for the stand-in instead")
            if _inside(module, CPU_WING) and _inside(target, "torchair_dist.backends") and \
                    not any(_inside(target, ok) for ok in CPU_MAY_READ):
                found.append(f"the CPU wing's {module} imports device code {target}")
    pipeline_level = levels["torchair_dist.pipeline.stages"]
    for where, fn in stage_fns:
        module = fn.split(":")[0]
        level = level_of(module, levels)
        if module not in known:
            found.append(f"{where} names {fn}: no such module")
        elif level is None or level > pipeline_level:
            found.append(f"{where} names {fn} (level {level}) above the pipeline "
                         f"(level {pipeline_level})")
        if _inside(module, CPU_WING) and module != CPU_CHOOSER:
            found.append(f"{where} names the CPU wing ({fn}): name {CPU_CHOOSER} instead")
    for cycle in import_graph.cycles(mods):
        found.append("import cycle: " + " <-> ".join(cycle))
    return found


def _stage_fns():
    """What the stage table holds, as ``module:name`` (its docs' names)."""
    from torchair_dist.pipeline import stages as pipeline
    from torchair_dist.tools.docs import qualified_name

    return [(f"stage {s.name}", qualified_name(s.fn)) for s in pipeline.STAGES.values()] + \
        [(f"mode {r.mode}", qualified_name(r.backend)) for r in pipeline.MODE_TABLE.values()]


def test_layering_holds():
    found = violations(import_graph.modules(), stage_fns=_stage_fns())
    assert not found, "\n".join(found)


# -- the test catches what it is for: planted violations in a copy of the package -------------
def _copy_package(tmp_path):
    import shutil

    dest = tmp_path / PKG
    shutil.copytree(import_graph.package_root(), dest,
                    ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.proto"))
    return dest


def test_a_planted_upward_import_is_caught(tmp_path):
    root = _copy_package(tmp_path)
    with open(root / "collectives" / "groups.py", "a") as f:
        f.write("\n\ndef _planted():\n    from ..backends.ge import builder  # noqa\n")
    found = violations(import_graph.modules(str(root)))
    assert any("torchair_dist.collectives.groups (level 1) imports "
               "torchair_dist.backends.ge.builder (level 3)" in v for v in found), found


def test_a_planted_unknown_module_is_caught(tmp_path):
    root = _copy_package(tmp_path)
    (root / "newthing.py").write_text('"""planted"""\n')
    found = violations(import_graph.modules(str(root)))
    assert "torchair_dist.newthing has no level: add it to LEVELS in " \
           "tests/unit/test_layering.py" in found, found


def test_a_planted_import_of_the_cpu_wing_is_caught(tmp_path):
    root = _copy_package(tmp_path)
    with open(root / "backends" / "aclgraph" / "runner.py", "a") as f:
        f.write("\n\ndef _planted():\n    from ...cpu import record  # noqa\n")
    found = violations(import_graph.modules(str(root)))
    assert any("torchair_dist.backends.aclgraph.runner imports the CPU wing" in v
               for v in found), found


def test_a_planted_cycle_is_caught(tmp_path):
    root = _copy_package(tmp_path)
    with open(root / "collectives" / "spec.py", "a") as f:
        f.write("\n\ndef _planted():\n    from . import consistency  # noqa\n")
    found = violations(import_graph.modules(str(root)))
    assert any(v.startswith("import cycle:") and "torchair_dist.collectives.spec" in v
               for v in found), found


@pytest.mark.parametrize("fn", ["torchair_dist.pipeline.entry:compile_with_aot",
                                "torchair_dist.cpu.shm_graph:for_runner"])
def test_a_planted_stage_string_pointing_up_or_into_the_wing_is_caught(fn):
    found = violations(import_graph.modules(), stage_fns=[("stage planted", fn)])
    assert any(v.startswith("stage planted names ") and fn in v for v in found), found


def test_test_modules_have_unique_basenames():
    """Rank processes import test modules by basename (``tests/*`` dirs are on sys.path), so two
    test files with one name make a rank run the wrong module (it happened three times)."""
    import collections
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    # benchmarks/ too: tests put it on sys.path, where one of its scripts named like a test
    # helper shadows it (benchmarks/chaos.py made the chaos tests import the wrong module)
    files = list(root.rglob("*.py")) + list((root.parent / "benchmarks").glob("*.py"))
    names = collections.Counter(p.name for p in files
                                if p.name != "conftest.py" and "__pycache__" not in p.parts)
    assert not [n for n, c in names.items() if c > 1], [n for n, c in names.items() if c > 1]
