"""The stream/event rewrite pass (ACL modes, on the Dynamo graph, before AOT).

Torch 2.13 traces the device-agnostic ``torch.Stream`` / ``torch.Event`` into
``torch.ops.streams.*`` ops whose integer arguments index a per-frame object registry (the
``get_external_object_by_index(i)`` nodes carry the objects), and ``with stream:`` blocks into a
``node.meta['custom']['stream']`` annotation only. This pass turns all of it into the tagged
``torchair_dist_streams`` ops (:mod:`..streams.stream_ops`), which AOT, functionalization and DCE keep in order:

* each stream/event object gets a stable per-graph tag, ``g<N>_stream<k>`` / ``g<N>_event<k>``
  in order of first appearance (``N`` counts the graphs this process rewrote, so ranks that
  compile the same program get the same names); the stream current when tracing started is
  the empty tag ``""``;
* ``record_event`` / ``wait_event`` / ``wait_stream`` / ``record_stream`` / ``synchronize_*`` /
  ``sync_dealloc`` become ``event_record`` / ``event_wait`` / ``stream_wait_stream`` /
  ``record_stream`` / ``synchronize`` / ``event_wait``;
* ``streams.fork`` / ``streams.join`` (set-stream calls) are replayed on a stack as TorchAir
  does: a new stream is entered, a stream already on the stack is returned to (leaving the ones
  above it), the default stream leaves them all;
* runs of nodes annotated with a stream become ``stream_enter`` ... ``stream_exit`` scopes;
* ``wait_tensor(t, dep)`` gets an event recorded right after ``dep``'s producer;
* a graph that uses any side stream is bracketed by ``fork(tags)`` after its inputs and
  ``join(tags)`` before its output (side streams fork from and join the capture stream).

Errors (``GraphValidationError``, naming the source line): an unknown stream or event object,
an exit that does not match the innermost entered stream, and a graph that leaves a non-default
stream current at its end.
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Dict, List, Optional

import torch
import torch.fx

from ..errors import GraphValidationError
from ..streams import runtime
from ..streams.stream_ops import NAMESPACE, ops

log = logging.getLogger("torchair_dist")

_graph_ids = itertools.count()
_S = torch.ops.streams if hasattr(torch.ops, "streams") else None


def _lookup_fn():
    try:
        from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index
    except ImportError:  # older torch: no object registry
        return None
    return get_external_object_by_index


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def where(node: torch.fx.Node) -> str:
    """The user source line of ``node`` (the innermost stack frame outside torchair_dist, e.g.
    the ``with npu_stream_switch(...)`` line rather than its ``__enter__``), or its name."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    frames = [i for i, line in enumerate(trace) if line.strip().startswith("File ")]
    outside = [i for i in frames if f'"{_PACKAGE_DIR}{os.sep}' not in trace[i]]
    for i in reversed(outside or frames):
        line = trace[i].strip()
        code = trace[i + 1].strip() if i + 1 < len(trace) else ""
        return f"{line}: {code}" if code else line
    return f"node {node.name}"


def _ns_name(target):
    """(namespace, op name) of an op overload or packet; (None, None) otherwise."""
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace, target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        ns, _, name = target._qualified_op_name.partition("::")
        return ns, name
    return None, None


def _normalize_targets(graph: torch.fx.Graph) -> None:
    """Dynamo records op packets (``ops.stream_enter``); use the overloads (``.default``)."""
    for node in graph.nodes:
        if node.op == "call_function" and _ns_name(node.target)[0] in ("streams", NAMESPACE):
            if isinstance(node.target, torch._ops.OpOverloadPacket):
                node.target = node.target.default


def _default_stream():
    try:
        if torch.accelerator.is_available():
            return torch.accelerator.current_stream()
    except Exception:  # no accelerator runtime
        pass
    return None


class _Objects:
    """Registry index -> tag for the streams and events of one Dynamo graph."""

    def __init__(self, graph: torch.fx.Graph, prefix: str):
        self.prefix = prefix
        self.lookups: List[torch.fx.Node] = []
        self.by_index: Dict[int, object] = {}
        self.tags: Dict[int, str] = {}
        self.side_streams: List[str] = []
        self._counts = {"stream": 0, "event": 0}
        self._default = _default_stream()
        fn = _lookup_fn()
        for node in graph.nodes:
            if fn is not None and node.op == "call_function" and node.target is fn:
                self.lookups.append(node)
                self.by_index[node.args[0]] = node.meta.get("example_value")

    def _tag(self, index, kind: str, node: torch.fx.Node) -> str:
        if index in self.tags:
            return self.tags[index]
        obj = self.by_index.get(index)
        cls = torch.Stream if kind == "stream" else torch.Event
        if not isinstance(obj, cls):
            raise GraphValidationError(
                f"unknown {kind} (object registry index {index}) used by {node.target} at "
                f"{where(node)}; create streams/events as torch.Stream/torch.Event (or the "
                f"device's own classes) before the compiled region or inside it")
        if kind == "stream" and self._default is not None and obj == self._default:
            tag = ""
        else:
            tag = f"{self.prefix}{kind}{self._counts[kind]}"
            self._counts[kind] += 1
        self.tags[index] = tag
        if tag:
            runtime.bind(tag, obj)  # the kernels use the user's own object
        return tag

    def stream(self, index, node) -> str:
        return self._tag(index, "stream", node)

    def event(self, index, node) -> str:
        return self._tag(index, "event", node)


def _replace(graph, node, target, args) -> torch.fx.Node:
    with graph.inserting_before(node):
        new = graph.call_function(target, tuple(args))
    new.meta.update(node.meta)
    if node.users:
        raise GraphValidationError(f"{node.target} at {where(node)} has users; stream ops "
                                   f"return nothing")
    graph.erase_node(node)
    return new


def _scope(graph, before, tag: str, enter: bool, like: Optional[torch.fx.Node]):
    with graph.inserting_before(before):
        new = (graph.call_function(ops.stream_enter.default, (tag, 0)) if enter
               else graph.call_function(ops.stream_exit.default, (tag,)))
    if like is not None and "stack_trace" in like.meta:
        new.meta["stack_trace"] = like.meta["stack_trace"]
    return new


def _method_call(node: torch.fx.Node, objs: _Objects):
    """torch 2.11's Dynamo leaves ``stream.wait_event(event)``, ``stream.wait_stream(other)``
    and ``stream.synchronize()`` / ``event.synchronize()`` as method calls on the registry
    lookups (2.13+ traces them as the ``torch.ops.streams`` ops below): (target, args) of the
    tagged op for such a call, else None (a call left to the check that names its line)."""
    if node.op != "call_method" or node.kwargs or not node.args:
        return None
    lookups = set(objs.lookups)
    index = [a.args[0] if isinstance(a, torch.fx.Node) and a in lookups else None
             for a in node.args]
    if None in index:
        return None
    this, rest = index[0], index[1:]
    if node.target == "wait_event" and len(rest) == 1:
        return ops.event_wait.default, (objs.event(rest[0], node), objs.stream(this, node))
    if node.target == "wait_stream" and len(rest) == 1:
        return ops.stream_wait_stream.default, (objs.stream(this, node),
                                                objs.stream(rest[0], node))
    if node.target == "synchronize" and not rest:
        is_stream = isinstance(objs.by_index.get(this), torch.Stream)
        return ops.synchronize.default, ((objs.stream(this, node),) if is_stream else ("",))
    return None


def _rewrite_stream_ops(graph: torch.fx.Graph, objs: _Objects) -> bool:
    """torch.ops.streams.* (and torch 2.11's method calls, :func:`_method_call`) -> tagged
    ops, in graph order; returns True if set-stream ops were present."""
    from ..base.torch_support import stream_methods_traced_as_ops

    if _S is None:
        return False
    simple = {
        "record_event": lambda n: (ops.event_record.default,
                                   (objs.event(n.args[0], n), objs.stream(n.args[1], n))),
        "wait_event": lambda n: (ops.event_wait.default,
                                 (objs.event(n.args[0], n), objs.stream(n.args[1], n))),
        "sync_dealloc": lambda n: (ops.event_wait.default,
                                   (objs.event(n.args[0], n), objs.stream(n.args[1], n))),
        "wait_stream": lambda n: (ops.stream_wait_stream.default,
                                  (objs.stream(n.args[0], n), objs.stream(n.args[1], n))),
        "record_stream": lambda n: (ops.record_stream.default,
                                    (n.args[0], objs.stream(n.args[1], n))),
        "synchronize_stream": lambda n: (ops.synchronize.default, (objs.stream(n.args[0], n),)),
        "synchronize_event": lambda n: (ops.synchronize.default, ("",)),
        "synchronize_device": lambda n: (ops.synchronize.default, ("",)),
    }
    stack: List[str] = []
    saw_set_stream = False
    methods = not stream_methods_traced_as_ops()  # torch 2.11: see _method_call
    for node in list(graph.nodes):
        made = _method_call(node, objs) if methods else None
        if made is not None:
            _replace(graph, node, *made)
            continue
        t = node.target
        ns, name = _ns_name(t)
        if ns != "streams":
            continue
        if name in simple:
            target, args = simple[name](node)
            _replace(graph, node, target, args)
        elif name in ("fork", "join"):
            saw_set_stream = True
            to = objs.stream(node.args[1], node)
            if to == "":
                leave, enter = list(reversed(stack)), None
            elif to in stack:
                leave, enter = list(reversed(stack[stack.index(to) + 1:])), None
            else:
                leave, enter = [], to
            for tag in leave:
                _scope(graph, node, tag, False, node)
                stack.pop()
            if enter is not None:
                _scope(graph, node, enter, True, node)
                stack.append(enter)
            graph.erase_node(node)
        else:
            raise GraphValidationError(f"stream op {t} at {where(node)} is not supported by "
                                       f"torchair_dist; supported: {sorted(simple)} + fork/join")
    if stack:
        raise GraphValidationError(
            f"the graph leaves stream {stack[-1]!r} current at its end; when using "
            f"npugraph_ex/reduce-overhead, set the stream back to the one current at the "
            f"beginning before the end of the compiled region")
    return saw_set_stream


def _annotations_to_scopes(graph: torch.fx.Graph, objs: _Objects) -> None:
    """Runs of nodes annotated ``meta['custom']['stream']`` -> stream_enter/exit scopes."""
    current, lookups = "", set(objs.lookups)
    for node in list(graph.nodes):
        if node.op == "placeholder" or node in lookups:
            continue
        custom = node.meta.get("custom") or {}
        user_scope = node.target in (ops.stream_enter.default, ops.stream_exit.default)
        want = "" if node.op == "output" or user_scope or "stream" not in custom else \
            objs.stream(custom["stream"], node)
        if want != current:
            if current:
                _scope(graph, node, current, False, node)
            if want:
                _scope(graph, node, want, True, node)
            current = want
    for node in graph.nodes:  # the annotation is now explicit; AOT must not act on it again
        custom = node.meta.get("custom")
        if isinstance(custom, dict) and "stream" in custom:
            node.meta["custom"] = {k: v for k, v in custom.items() if k != "stream"}
            if not node.meta["custom"]:
                del node.meta["custom"]


def _check_scopes(graph: torch.fx.Graph) -> List[str]:
    """Balanced enter/exit; returns the side-stream tags used anywhere in the graph."""
    stack: List[torch.fx.Node] = []
    used: List[str] = []

    def use(tag):
        if tag and tag not in used:
            used.append(tag)

    for node in graph.nodes:
        t = node.target
        if t is ops.stream_enter.default:
            stack.append(node)
            use(node.args[0])
        elif t is ops.stream_exit.default:
            if not stack or stack[-1].args[0] != node.args[0]:
                inner = repr(stack[-1].args[0]) if stack else "none"
                raise GraphValidationError(
                    f"unbalanced stream switch: leaving stream {node.args[0]!r} at "
                    f"{where(node)} but the innermost entered stream is {inner}")
            stack.pop()
        elif t in (ops.event_record.default, ops.event_wait.default):
            use(node.args[1])
        elif t is ops.stream_wait_stream.default:
            use(node.args[0])
            use(node.args[1])
    if stack:
        raise GraphValidationError(
            f"unbalanced stream switch: stream {stack[-1].args[0]!r} entered at "
            f"{where(stack[-1])} is still current at the end of the graph (a graph break inside "
            f"npu_stream_switch, or a missing exit); the compiled region must end on the stream "
            f"it began on")
    return used


def _events_for_wait_tensor(graph: torch.fx.Graph, prefix: str) -> None:
    k = 0
    for node in list(graph.nodes):
        if node.target is not ops.wait_tensor.default or node.args[2]:
            continue
        dep = node.args[1]
        if not isinstance(dep, torch.fx.Node) or dep.op == "placeholder":
            continue
        tag = f"{prefix}wait{k}"
        k += 1
        with graph.inserting_after(dep):
            graph.call_function(ops.event_record.default, (tag, ""))
        node.args = (node.args[0], dep, tag)


def rewrite_streams(gm, config):
    """Turn user streams/events of a Dynamo graph into tagged ``torchair_dist_streams`` ops.

    Requires: the Dynamo graph (before AOT). Guarantees: no ``torch.ops.streams`` op, registry
    lookup or stream annotation is left; every stream scope is balanced and the graph ends on
    the stream it began on (else ``GraphValidationError`` naming the line); names are stable per
    graph; a graph using side streams forks them at its start and joins them at its end.
    Graphs without any stream construct are returned untouched.
    """
    graph = gm.graph
    has_any = any(
        _ns_name(n.target)[0] in ("streams", NAMESPACE)
        or "stream" in (n.meta.get("custom") or {})
        for n in graph.nodes if n.op != "placeholder")
    if not has_any:
        return gm
    _normalize_targets(graph)
    prefix = f"g{next(_graph_ids)}_"
    objs = _Objects(graph, prefix)
    set_stream = _rewrite_stream_ops(graph, objs)
    if not set_stream:
        _annotations_to_scopes(graph, objs)
    for node in objs.lookups:
        if node.users:
            raise GraphValidationError(
                f"stream/event object {node.meta.get('example_value')!r} is used at "
                f"{where(next(iter(node.users)))} in a way torchair_dist cannot rewrite")
        graph.erase_node(node)
    _events_for_wait_tensor(graph, prefix)
    side = _check_scopes(graph)
    add_fork_join(graph, side)
    graph.lint()
    gm.recompile()
    log.debug("rewrite_streams: %s side streams %s", prefix, side)
    return gm


def add_fork_join(graph: torch.fx.Graph, side) -> None:
    """Fork the side streams ``side`` after the inputs and join them before the output (no-op
    for none): every side stream starts after the graph's inputs exist and ends before its
    outputs are used."""
    if not side:
        return
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    first = placeholders[-1].next if placeholders else next(iter(graph.nodes))
    with graph.inserting_before(first):
        graph.call_function(ops.fork.default, (list(side),))
    with graph.inserting_before(output):
        graph.call_function(ops.join.default, (list(side),))
