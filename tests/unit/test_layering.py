"""Imports point down only (shared/DESIGN.md §3): each module imports its own level or lower,
and a backend never imports another backend. Parsed from the source, so no import is missed."""
import ast
import os

import torchair_dist

ROOT = os.path.dirname(torchair_dist.__file__)

# Lowest level first. A module is placed by its longest matching prefix.
LEVELS = {
    "torchair_dist._version": 0, "torchair_dist.errors": 0, "torchair_dist._logging": 0,
    "torchair_dist.util": 0, "torchair_dist.configs": 0, "torchair_dist.platform": 0,
    "torchair_dist.graph_context": 0, "torchair_dist.debug": 0,
    "torchair_dist.collectives": 1, "torchair_dist.streams": 1,
    "torchair_dist.passes": 2, "torchair_dist.patches": 2, "torchair_dist.decompositions": 2,
    "torchair_dist.backends": 3,
    "torchair_dist.pipeline": 4, "torchair_dist.compiler": 4, "torchair_dist.fx_summary": 4,
    "torchair_dist.aot_direct": 4,
    "torchair_dist.backend": 5,
    "torchair_dist.export": 6, "torchair_dist.cache": 6, "torchair_dist.docs": 6,
    "torchair_dist": 7,  # the package's __init__: the public API
}


def level_of(module: str) -> int:
    best = max((p for p in LEVELS if module == p or module.startswith(p + ".")), key=len)
    return LEVELS[best]


def modules():
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                yield (rel[:-len(".__init__")] if rel.endswith(".__init__") else rel), path


def imports_of(module: str, path: str):
    tree = ast.parse(open(path).read())
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            for name in names:
                if name.startswith("torchair_dist"):
                    yield name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torchair_dist"):
                    yield a.name


def _backend_of(module: str):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "backends" else None


def test_imports_point_down_only():
    upward = []
    for module, path in modules():
        for target in imports_of(module, path):
            if level_of(target) > level_of(module):
                upward.append(f"{module} imports {target}")
            a, b = _backend_of(module), _backend_of(target)
            if a and b and a != b and a != "context" and b != "context":
                upward.append(f"backend {a} imports backend {b} ({module} -> {target})")
    assert not upward, "\n".join(upward)


def test_every_module_has_a_level():
    for module, _ in modules():
        level_of(module)  # raises ValueError for a module no prefix covers


def test_test_modules_have_unique_basenames():
    """Rank processes import test modules by basename (``tests/*`` dirs are on sys.path), so two
    test files with one name make a rank run the wrong module (it happened twice)."""
    import collections
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    names = collections.Counter(p.name for p in root.rglob("*.py")
                                if p.name != "conftest.py" and "__pycache__" not in p.parts)
    assert not [n for n, c in names.items() if c > 1], [n for n, c in names.items() if c > 1]
