"""``experimental_config.topology_sorting_strategy`` on the graph GE receives (max-autotune).

GE orders the nodes of its graph by this strategy on Ascend (``ge.topoSortingMode``); the
reference executor runs ops in the order of the GE graph, so this pass applies the same
choice to the FX graph before conversion, on every platform:

- ``DFS`` (default) and ``StableRDFS``: the traced program order (depth-first, and stable:
  nothing moves);
- ``BFS``: level by level from the inputs (Kahn's algorithm, ties in program order);
- ``RDFS``: reverse depth-first from the outputs (each value computed just before its first
  consumer needs it, consumers visited in argument order).

Requires nothing. Guarantees: a topological order; side-effect nodes (collectives, waits,
stream/event ops, in-place writes, anything impure) keep their relative order, so collectives
are never reordered across ranks (every rank issues them in program order); no node crosses a ``stream_enter`` /
``stream_exit`` (each keeps its stream); values unchanged.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Set

import torch
import torch.fx

from ..streams import stream_ops
from .overlap import COMPUTE, node_kind

REORDERING = ("BFS", "RDFS")


def _dependencies(body: List[torch.fx.Node]) -> Dict[torch.fx.Node, List[torch.fx.Node]]:
    inside = set(body)
    deps: Dict[torch.fx.Node, List[torch.fx.Node]] = {}
    last_effect = None
    last_scope, since_scope = None, []  # the nodes since the last stream_enter/stream_exit
    previous = None
    for node in body:
        deps[node] = [n for n in node.all_input_nodes if n in inside]
        if node.target is stream_ops.ops.event_record.default and previous is not None:
            deps[node].append(previous)  # an event stands for the work issued before it
        previous = node
        if _is_scope(node):  # a stream switch: nothing crosses it (a node keeps its stream)
            deps[node].extend(since_scope)
            since_scope = []
            last_scope = node
        elif last_scope is not None:
            deps[node].append(last_scope)
        since_scope.append(node)
        if node_kind(node) != COMPUTE:
            if last_effect is not None:
                deps[node].append(last_effect)  # side effects stay in program order
            last_effect = node
    return deps


def _is_scope(node: torch.fx.Node) -> bool:
    return node.target in (stream_ops.ops.stream_enter.default, stream_ops.ops.stream_exit.default)


def _bfs(body, deps) -> List[torch.fx.Node]:
    pending = {n: len(set(deps[n])) for n in body}
    users = collections.defaultdict(list)
    for n in body:
        for d in set(deps[n]):
            users[d].append(n)
    queue = collections.deque(n for n in body if pending[n] == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for user in users[node]:
            pending[user] -= 1
            if pending[user] == 0:
                queue.append(user)
    return order


def _rdfs(body, deps, roots) -> List[torch.fx.Node]:
    order: List[torch.fx.Node] = []
    seen: Set[torch.fx.Node] = set()

    def visit(start):
        stack = [(start, iter(deps[start]))]
        seen.add(start)
        while stack:
            node, it = stack[-1]
            nxt = next((d for d in it if d not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(deps[nxt])))

    for root in roots + body:  # body: side-effect nodes and dead code nobody consumes
        if root in deps and root not in seen:
            visit(root)
    return order


def topology_sort(gm: torch.fx.GraphModule, example_inputs, config):
    """Reorder ``gm`` by ``experimental_config.topology_sorting_strategy`` (see module doc);
    the stage runs for the strategies in :data:`REORDERING` only (the others keep the traced
    order, which is already there)."""
    strategy = config.get("experimental_config.topology_sorting_strategy")
    if strategy not in REORDERING:
        raise ValueError(f"topology_sort: strategy {strategy!r} keeps the program order; the "
                         f"pass reorders for {REORDERING} only (the stage's gate)")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    deps = _dependencies(body)
    if strategy == "BFS":
        order = _bfs(body, deps)
    else:
        order = _rdfs(body, deps, [n for n in output.all_input_nodes if n in deps])
    assert len(order) == len(body), "topology_sort lost nodes: the graph has a cycle"
    for node in order:
        output.prepend(node)
    gm.graph.lint()
    gm.recompile()
    return gm
