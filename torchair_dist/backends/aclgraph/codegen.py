"""Generate the runner's forward function from an FX graph.

The generated code is FX's own code for the graph with a boxed signature: it takes the list
of inputs and unpacks it itself, so a call costs one Python frame, like ``aot_eager``'s
``gm.forward`` and no more. The source is kept for dumps and for the compile cache.
"""
from __future__ import annotations

import dataclasses
import linecache
from typing import Any, Callable, Dict, List

import torch.fx


@dataclasses.dataclass
class GeneratedForward:
    fn: Callable[[List[Any]], Any]
    source: str
    filename: str


def generate_forward(gm: torch.fx.GraphModule, name: str) -> GeneratedForward:
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    code = gm.graph.python_code(root_module="self")
    lines = code.src.strip("\n").splitlines()
    def_line = next(i for i, line in enumerate(lines) if line.startswith("def forward("))
    body = lines[def_line + 1:]
    header = ["def forward(args):"]
    if names:
        header.append(f"    {', '.join(names)}, = args")
    source = "\n".join(header + body) + "\n"
    filename = f"<torchair_dist runner {name}>"
    # Let tracebacks and debuggers show the generated lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: Dict[str, Any] = dict(code.globals)
    namespace["self"] = gm
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    fn = namespace.pop("forward")  # not left in its own globals: no reference cycle
    fn._boxed_call = True
    return GeneratedForward(fn, source, filename)
