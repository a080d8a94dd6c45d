"""Read-only facts about an FX graph that several stages need."""
from __future__ import annotations

from typing import List

import torch
import torch.fx


def placeholders(gm: torch.fx.GraphModule) -> List[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _mutated_args(node: torch.fx.Node):
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return []
    mutated = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            if i < len(node.args):
                mutated.append(node.args[i])
            elif arg.name in node.kwargs:
                mutated.append(node.kwargs[arg.name])
    return mutated


def mutated_input_indices(gm: torch.fx.GraphModule) -> List[int]:
    """Indices of placeholders written in place by some op (``copy_`` from AOT, ``add_``...)."""
    index = {node: i for i, node in enumerate(placeholders(gm))}
    found = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        for arg in _mutated_args(node):
            for item in arg if isinstance(arg, (list, tuple)) else [arg]:
                if isinstance(item, torch.fx.Node) and item in index:
                    found.add(index[item])
    return sorted(found)


def op_targets(gm: torch.fx.GraphModule) -> List[str]:
    """Names of the call_function targets of a graph, in order (handy in tests and logs)."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
