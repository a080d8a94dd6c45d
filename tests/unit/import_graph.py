"""The library's import graph, parsed from the source (function-level imports included), for the
layering test and for reports (``python tests/unit/import_graph.py``: modules, edges, cycles)."""
import ast
import os
import sys
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE = "torchair_dist"


def package_root() -> str:
    import torchair_dist

    return os.path.dirname(torchair_dist.__file__)


def modules(root: str = None) -> Dict[str, str]:
    """{module name: path} of every module of the package."""
    root = root or package_root()
    found = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
                found[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return found


def imports_of(module: str, path: str, known: Set[str]) -> Iterator[str]:
    """The package modules ``module`` imports: ``from pkg import sub`` names ``pkg.sub`` when
    that is a module, else ``pkg``."""
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
            if not target.startswith(PACKAGE):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in known else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    yield alias.name


def edges(mods: Dict[str, str] = None) -> Set[Tuple[str, str]]:
    mods = mods or modules()
    known = set(mods)
    return {(m, t) for m, p in mods.items() for t in imports_of(m, p, known) if t != m}


def cycles(mods: Dict[str, str] = None) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    mods = mods or modules()
    graph: Dict[str, List[str]] = {m: [] for m in mods}
    for a, b in edges(mods):
        if b in graph:
            graph[a].append(b)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


if __name__ == "__main__":
    mods = modules()
    found = cycles(mods)
    print(f"modules: {len(mods)}, import edges: {len(edges(mods))}, cycles: {len(found)}")
    for c in found:
        print("  cycle:", " <-> ".join(c))
