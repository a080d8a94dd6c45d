"""The runner's forward of an FX graph: FX's own forward of the graph, called boxed.

``forward(args)`` takes the list of graph inputs (the boxed convention) and calls the graph
module's ``forward`` with them, not ``gm(*args)``: no module-call machinery (hooks) per call.
The code it runs is FX's (``gm.code``), which dumps show; nothing here generates source.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List

import torch.fx


@dataclasses.dataclass
class GeneratedForward:
    fn: Callable[[List[Any]], Any]
    source: str
    filename: str


def generate_forward(gm: torch.fx.GraphModule, name: str) -> GeneratedForward:
    forward = gm.forward

    def run(args):
        return forward(*args)

    run._boxed_call = True
    return GeneratedForward(run, gm.code, f"<fx graph {name}>")
