"""Communication/compute overlap scheduling on the AOT graph (every mode).

A functional collective is two nodes: the *issue* op (``_c10d_functional.all_reduce`` ...,
or one of this library's ``torchair_dist.*`` collective ops) that starts the collective and
returns a handle-like tensor, and ``wait_tensor`` that blocks until it is done. Between the two,
the rank is free to compute anything that does not need the result. Traced programs usually put
the wait right after the issue; this pass moves each issue as early as its inputs allow and
each wait as late as its first use allows, so independent compute runs while the collective is
in flight (on gloo the collective runs on the process group's background thread; on a device on
the communication stream). In max-autotune the GE graph keeps this order: the reference
executor finishes a collective just before its first reader (the ``Identity`` a wait becomes).

Rules the schedule keeps (every rank must issue the same collectives in the same order, or
the ranks deadlock):

* communication ops (collectives and p2p ops, any group) keep their relative program order, so
  every rank issues the same sequence;
* nothing moves across a node with side effects (in-place/mutating ops such as AOT's trailing
  ``copy_`` into inputs, random ops, stream/event ops, ``control_deps``/``with_effects``): the
  graph is cut into segments at such nodes and each segment is scheduled on its own;
* every data dependency is kept (the new order is a topological order of the same graph).

Schedule inside one segment (a greedy list scheduler): the next communication op in program
order is emitted as soon as it is ready; otherwise ready compute is emitted, the ancestors of the
next communication op first (so it can be issued early), then other compute in program order;
a wait is emitted only when no compute is ready, choosing one the next communication op needs,
else the earliest in program order.
"""
from __future__ import annotations

import heapq
import logging
from typing import Dict, Iterable, List, Set

import torch
import torch.fx

from ..collectives import spec
from ..base.util import namespace_and_name

log = logging.getLogger("torchair_dist")

# Namespaces whose ops are communication (collectives and p2p; order among them is fixed) and
# the names of the ops that finish one: from the collectives' spec table.
COMM_NAMESPACES = spec.COMM_NAMESPACES
_WAIT_NAMES = spec.WAIT_NAMES

COMPUTE, COMM, WAIT, BARRIER = "compute", "comm", "wait", "barrier"


_namespace_and_name = namespace_and_name  # (deadlock_check imports it from here)


def _mutates(target) -> bool:
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def node_kind(node: torch.fx.Node) -> str:
    """``comm`` (collective/p2p issue), ``wait``, ``barrier`` (side effects) or ``compute``.

    A communication op that mutates an argument is a ``barrier`` too (it keeps its place
    relative to everything), which also keeps it ordered with the other communication ops.
    """
    if node.op != "call_function":
        return COMPUTE
    ns, name = _namespace_and_name(node.target)
    if ns in COMM_NAMESPACES:
        if name in _WAIT_NAMES:
            return WAIT
        return BARRIER if _mutates(node.target) else COMM
    if _mutates(node.target) or isinstance(node.target, torch._ops.HigherOrderOperator):
        return BARRIER
    try:
        impure = node.is_impure()
    except Exception:  # unknown target kinds: be conservative
        impure = True
    return BARRIER if impure else COMPUTE


def comm_sequence(gm: torch.fx.GraphModule) -> List[torch.fx.Node]:
    """The communication ops (issues and mutating comm ops) of a graph in program order."""
    seq = []
    for node in gm.graph.nodes:
        ns, name = _namespace_and_name(node.target) if node.op == "call_function" else (None, None)
        if ns in COMM_NAMESPACES and name not in _WAIT_NAMES:
            seq.append(node)
    return seq


def _ancestors(node: torch.fx.Node, within: Set[torch.fx.Node], done: Set[torch.fx.Node]):
    out, stack = set(), [node]
    while stack:
        for d in stack.pop().all_input_nodes:
            if d in within and d not in done and d not in out:
                out.add(d)
                stack.append(d)
    return out


def _schedule_segment(nodes: List[torch.fx.Node], kinds: Dict) -> List[torch.fx.Node]:
    pos = {n: i for i, n in enumerate(nodes)}
    inseg = set(nodes)
    missing = {n: sum(1 for d in set(n.all_input_nodes) if d in inseg) for n in nodes}
    comms = [n for n in nodes if kinds[n] == COMM]
    done: Set[torch.fx.Node] = set()
    order: List[torch.fx.Node] = []
    anc: Set[torch.fx.Node] = _ancestors(comms[0], inseg, done) if comms else set()
    heaps = {(k, a): [] for k in (COMPUTE, WAIT) for a in (True, False)}
    ready_comms: Set[torch.fx.Node] = set()

    def push(n):
        if kinds[n] == COMM:
            ready_comms.add(n)
        else:
            heapq.heappush(heaps[(kinds[n], n in anc)], (pos[n], n))

    def emit(n):
        done.add(n)
        order.append(n)
        for u in n.users:
            if u in inseg:
                missing[u] -= 1
                if missing[u] == 0:
                    push(u)

    for n in nodes:
        if missing[n] == 0:
            push(n)
    next_comm = 0
    while len(order) < len(nodes):
        if next_comm < len(comms) and comms[next_comm] in ready_comms:
            emit(comms[next_comm])
            next_comm += 1
            anc = (_ancestors(comms[next_comm], inseg, done) if next_comm < len(comms)
                   else set())
            for kind in (COMPUTE, WAIT):  # re-partition the ready nodes for the new target
                pending = heaps[(kind, False)] + heaps[(kind, True)]
                heaps[(kind, True)] = [x for x in pending if x[1] in anc]
                heaps[(kind, False)] = [x for x in pending if x[1] not in anc]
                heapq.heapify(heaps[(kind, True)])
                heapq.heapify(heaps[(kind, False)])
            continue
        for key in ((COMPUTE, True), (COMPUTE, False), (WAIT, True), (WAIT, False)):
            if heaps[key]:
                emit(heapq.heappop(heaps[key])[1])
                break
        else:  # cannot happen for a topologically sorted segment
            raise RuntimeError("schedule_overlap: no schedulable node (graph not topological?)")
    return order


def _segments(gm: torch.fx.GraphModule, kinds: Dict) -> Iterable[List[torch.fx.Node]]:
    """Runs of non-placeholder, non-output nodes, split around barrier nodes (each barrier is
    a segment of its own)."""
    current: List[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if kinds[node] == BARRIER:
            if current:
                yield current
            yield [node]
            current = []
        else:
            current.append(node)
    if current:
        yield current


def schedule_overlap(gm, example_inputs, config):
    """Issue collectives as early and wait on them as late as dependencies allow.

    Requires: a functionalized AOT graph (topologically ordered; communication ops as
    issue + ``wait_tensor`` pairs). Switch: ``distributed_config.overlap_collectives``.
    Guarantees: same nodes and edges; a topological order; communication ops in their original
    relative order; no node moved across a node with side effects; placeholders first and the
    output last. Only the node order changes, so numerics are unchanged.
    """
    kinds = {n: node_kind(n) for n in gm.graph.nodes}
    if not any(k == COMM for k in kinds.values()):
        return gm
    new_order: List[torch.fx.Node] = []
    for seg in _segments(gm, kinds):
        new_order.extend(_schedule_segment(seg, kinds) if len(seg) > 1 else seg)
    old_order = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if new_order == old_order:
        return gm
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    for node in new_order:
        output.prepend(node)
    gm.graph.lint()
    gm.recompile()
    moved = sum(1 for a, b in zip(old_order, new_order) if a is not b)
    log.debug("schedule_overlap: %d of %d nodes change place", moved, len(new_order))
    return gm
