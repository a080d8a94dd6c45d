"""The stream programs of issue 29, importable (no pytest): each is what a user writes with
streams, plus a maker of its inputs, so the unit tests, the CPU stream-order matrix and the
device check run the same programs.

A :class:`Program` has ``parts`` (``build(device)`` returns one function per compiled graph;
most programs are one graph, the tagged-event program is two) and ``run(parts, *args)``, which
calls the parts as the program does. Run the parts uncompiled for the reference (TorchAir's
eager meaning: program order on the current stream), or compile each part and run those.

``cross`` lists the cross-stream data edges the rewrite must order, as (producer stream,
consumer stream) pairs of stream *labels* ("" = the main stream; a user ``torch.Stream``
program's labels are chosen by the rewrite, so it lists ``"*"`` for "some side stream"), one
per (producer value, consumer stream) the program has inside one graph. ``races``: the program
has cross-stream reads it does not order itself (user ``torch.Stream`` code): compiling it must
warn, naming the line.

Sizes: ``inputs(size, device, seed)``; every program's tensors are ``size`` x ``size`` (the MoE
block has ``size`` tokens of hidden size ``min(size, 64)``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Sequence, Tuple

import torch

from torchair_dist.streams import (npu_stream_switch, npu_tagged_event_record,
                                   npu_tagged_event_wait, npu_wait_tensor)

SIZES = (16, 1024)
NAMESPACE = "torchair_dist_streams"


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    build: Callable[[str], List[Callable]]
    inputs: Callable[[int, str, int], Tuple[torch.Tensor, ...]]
    cross: Tuple[Tuple[str, str], ...]
    run: Callable = None  # (parts, *args) -> result; default: parts[0](*args)
    races: bool = False
    plain: Callable = None  # the same computation without any stream call (user-stream code:
                            # eager CPU cannot record events, and eager racy code is racy)

    def call(self, parts: Sequence[Callable], *args):
        if self.run is None:
            return parts[0](*args)
        return self.run(parts, *args)

    def reference(self, device: str, *args):
        """The program-order result: the parts run uncompiled (or ``plain``)."""
        if self.plain is not None:
            return self.plain(*args)
        return self.call(self.build(device), *args)


def _square(n: int, device: str, seed: int, count: int = 2):
    gen = torch.Generator().manual_seed(seed)
    scale = n ** -0.5
    return tuple((torch.randn(n, n, generator=gen) * (1.0 if i == 0 else scale)).to(device)
                 for i in range(count))


def square_inputs(size: int, device: str = "cpu", seed: int = 0):
    """(x, w): x of unit entries, w scaled so that x @ w stays of unit size."""
    return _square(size, device, seed)


# -- 1. the side stream computes from a main value, main reads its result -------------------------
def side_reads_main(x, w):
    h = x @ w
    with npu_stream_switch("side"):
        npu_wait_tensor(x, h)
        y = torch.relu(h) * 2
    return h + y


# -- 2. more work on the side: relu(h @ w) ---------------------------------------------------------
def side_matmul(x, w):
    h = x @ w
    with npu_stream_switch("side"):
        npu_wait_tensor(x, h)
        y = torch.relu(h @ w) * 2
    return h + y


# -- 3. a side result returned as a graph output ---------------------------------------------------
def side_output(x, w):
    h = x @ w
    with npu_stream_switch("side"):
        npu_wait_tensor(x, h)
        y = torch.relu(h @ w) * 2
    return y, h + 1


# -- 4. two side streams, one waiting for the other -------------------------------------------------
def two_side_streams(x, w):
    h = x @ w
    with npu_stream_switch("side_a"):
        npu_wait_tensor(x, h)
        a = torch.relu(h) * 2
    with npu_stream_switch("side_b"):
        npu_wait_tensor(x, a)           # side_b starts after side_a computed a
        b = a @ w + 1
    return h + b


# -- 5. a MoE shared expert on moe_secondary beside the routed experts on main (vllm-ascend) ------
MOE_EXPERTS = 4


def moe_shared_expert(x, wg, we, ws1, ws2):
    router_logits = x @ wg                              # main
    with npu_stream_switch("moe_secondary"):
        npu_wait_tensor(x, router_logits)
        shared = torch.nn.functional.silu(x @ ws1) @ ws2  # the shared expert, on the side
    weights, idx = torch.softmax(router_logits, dim=-1).max(dim=-1)
    every = torch.einsum("td,edh->teh", x, we)          # each token through every expert
    routed = every.gather(1, idx.view(-1, 1, 1).expand(-1, 1, every.shape[-1])).squeeze(1)
    return routed * weights.unsqueeze(-1) + shared


def moe_inputs(size: int, device: str = "cpu", seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    d = min(size, 64)
    s = d ** -0.5
    x = torch.randn(size, d, generator=gen)
    wg = torch.randn(d, MOE_EXPERTS, generator=gen) * s
    we = torch.randn(MOE_EXPERTS, d, d, generator=gen) * s
    ws1 = torch.randn(d, 2 * d, generator=gen) * s
    ws2 = torch.randn(2 * d, d, generator=gen) * (2 * d) ** -0.5
    return tuple(t.to(device) for t in (x, wg, we, ws1, ws2))


# -- 6. nested scopes --------------------------------------------------------------------------------
def nested_scopes(x, w):
    h = x @ w
    with npu_stream_switch("outer"):
        npu_wait_tensor(x, h)
        a = h * 2
        with npu_stream_switch("inner"):
            npu_wait_tensor(x, a)
            b = torch.relu(a @ w)
        c = a + b                       # outer reads inner's result
    return c + h                        # main reads outer's result


# -- 7. a tagged event shared by two graphs ------------------------------------------------------------
def tagged_first(x, w):
    h = x @ w
    npu_tagged_event_record("sp_ev_h")
    with npu_stream_switch("side"):
        npu_tagged_event_wait("sp_ev_h")
        y = torch.tanh(h) * 3
        npu_tagged_event_record("sp_ev_y", "side")
    return y, h


def tagged_second(y, h):
    npu_tagged_event_wait("sp_ev_y")
    return y * h + 1


def _tagged_run(parts, x, w):
    y, h = parts[0](x, w)
    return parts[1](y, h)


# -- 8. the user's own torch.Stream / torch.Event -------------------------------------------------------
def _user_stream_program(device: str, ordered: bool):
    s1 = torch.Stream(device=device)
    s2 = torch.Stream(device=device)
    ev = torch.Event(device)

    def ordered_fn(x, w):
        with s1:
            h = x @ w
            ev.record(s1)
        s2.wait_event(ev)               # s2 reads h after s1's matmul
        with s2:
            y = torch.relu(h) * 2 + x
        return y                        # an output: the graph's join orders it

    def racy_fn(x, w):
        with s1:
            h = x @ w                   # on s1
        with s2:
            y = torch.relu(h) * 2       # s2 reads h: nothing orders it after s1's matmul
        return y + h                    # the main stream reads both: unordered too

    return [ordered_fn if ordered else racy_fn]


def _user_ordered_plain(x, w):
    return torch.relu(x @ w) * 2 + x


def _user_racy_plain(x, w):
    h = x @ w
    return torch.relu(h) * 2 + h


# -- 9. a collective on a side stream (needs a process group: tests/multicard) ----------------------
def collective_on_side(x, w):
    import torch.distributed as dist

    h = x @ w
    with npu_stream_switch("comm"):
        npu_wait_tensor(x, h)
        r = h * 0.5
        dist.all_reduce(r)              # the collective on the side stream
    s = torch.relu(x @ w)               # main, beside the collective
    return r + s                        # main reads the collective's result


def moe_shared_expert_all_reduce(x, wg, we, ws1, ws2):
    """vllm-ascend's TP MoE: the shared expert's all_reduce on moe_secondary."""
    import torch.distributed as dist

    router_logits = x @ wg
    with npu_stream_switch("moe_secondary"):
        npu_wait_tensor(x, router_logits)
        shared = torch.nn.functional.silu(x @ ws1) @ ws2
        dist.all_reduce(shared)
    weights, idx = torch.softmax(router_logits, dim=-1).max(dim=-1)
    every = torch.einsum("td,edh->teh", x, we)
    routed = every.gather(1, idx.view(-1, 1, 1).expand(-1, 1, every.shape[-1])).squeeze(1)
    return routed * weights.unsqueeze(-1) + shared


COLLECTIVE_PROGRAMS: Dict[str, Program] = {p.name: p for p in (
    Program("collective_on_side", lambda d: [collective_on_side], square_inputs,
            cross=(("", "comm"), ("comm", ""))),
    Program("moe_shared_expert_all_reduce", lambda d: [moe_shared_expert_all_reduce],
            moe_inputs, cross=(("moe_secondary", ""),)),
)}


PROGRAMS: Dict[str, Program] = {p.name: p for p in (
    Program("side_reads_main", lambda d: [side_reads_main], square_inputs,
            cross=(("", "side"), ("side", ""))),
    Program("side_matmul", lambda d: [side_matmul], square_inputs,
            cross=(("", "side"), ("side", ""))),
    Program("side_output", lambda d: [side_output], square_inputs,
            cross=(("", "side"), ("side", ""))),
    Program("two_side_streams", lambda d: [two_side_streams], square_inputs,
            cross=(("", "side_a"), ("side_a", "side_b"), ("side_b", ""))),
    Program("moe_shared_expert", lambda d: [moe_shared_expert], moe_inputs,
            cross=(("moe_secondary", ""),)),
    Program("nested_scopes", lambda d: [nested_scopes], square_inputs,
            cross=(("", "outer"), ("outer", "inner"), ("inner", "outer"), ("outer", ""))),
    Program("tagged_event_two_graphs", lambda d: [tagged_first, tagged_second], square_inputs,
            cross=(("", "side"), ("side", "")), run=_tagged_run),
    Program("user_streams_ordered", lambda d: _user_stream_program(d, True), square_inputs,
            cross=(("*", "*"),), plain=_user_ordered_plain),
    Program("user_streams_racy", lambda d: _user_stream_program(d, False), square_inputs,
            cross=(("*", "*"), ("*", "")), races=True, plain=_user_racy_plain),
)}


# -- an independent structural check of a rewritten graph (no torchair_dist ordering code) ---------
def stream_op_name(node):
    """The op name of a torchair_dist_streams node, else ""."""
    t = node.target
    if node.op == "call_function" and isinstance(t, torch._ops.OpOverload) \
            and t.namespace == NAMESPACE:
        return t._schema.name.split("::")[1]
    return ""


def scan_streams(gm):
    """(stream of each node by a plain scope scan, the nodes in order)."""
    stack, stream_of, order = [], {}, list(gm.graph.nodes)
    for node in order:
        stream_of[node] = stack[-1] if stack else ""
        if stream_op_name(node) == "stream_enter":
            stack.append(node.args[0])
        elif stream_op_name(node) == "stream_exit":
            stack.pop()
    return stream_of, order


def cross_reads(gm):
    """[(producer, reader, producer stream, reader stream)] of tensor values (graph inputs
    and stream ops excluded; the output reads on the graph's stream)."""
    stream_of, order = scan_streams(gm)
    found = []
    for node in order:
        if node.op not in ("call_function", "output") or stream_op_name(node):
            continue
        t = "" if node.op == "output" else stream_of[node]
        for src in node.all_input_nodes:
            if src.op != "call_function" or stream_op_name(src):
                continue
            if not isinstance(src.meta.get("val"), (torch.Tensor, tuple, list)):
                continue
            if stream_of[src] != t:
                found.append((src, node, stream_of[src], t))
    return found


def _alias_source(node):
    """Through getitem and views (they describe memory, no device work) to the producer."""
    import operator

    while node.op == "call_function" and node.args and isinstance(node.args[0], torch.fx.Node) \
            and (node.target is operator.getitem
                 or (isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)):
        node = node.args[0]
    return node


def device_orderings(gm):
    """{node: the nodes that must complete before it starts}, the device's orderings spelt out
    node by node (program order on each stream, an event's latest earlier record -> its wait,
    fork, join, stream_wait_stream, synchronize): no vector clocks, no torchair_dist code."""
    stream_of, order = scan_streams(gm)
    last, pending, records, before = {}, {}, {}, {}
    host = []  # the latest synchronize: every stream's later work follows it

    def put(node, stream, extra=()):
        preds = set(extra) | pending.pop(stream, set()) | set(host)
        if stream in last:
            preds.add(last[stream])
        before[node] = preds
        last[stream] = node

    for node in order:
        name = stream_op_name(node)
        if node.op in ("placeholder", "get_attr") or _alias_source(node) is not node:
            continue
        here = "" if node.op == "output" else stream_of[node]
        if name == "stream_enter":
            here = node.args[0]
        if name == "event_record":
            put(node, node.args[1] or here)
            records[node.args[0]] = node
        elif name == "event_wait":
            rec = records.get(node.args[0])
            put(node, node.args[1] or here, [rec] if rec is not None else [])
        elif name == "wait_tensor":
            rec = records.get(node.args[2]) if node.args[2] else None
            put(node, here, [rec] if rec is not None else [])
        elif name == "fork":
            put(node, here)
            for tag in node.args[0]:
                pending.setdefault(tag, set()).add(node)
        elif name == "join":
            put(node, here, [last[t] for t in node.args[0] if t in last])
        elif name == "stream_wait_stream":
            waited = last.get(node.args[1] or here)
            put(node, node.args[0] or here, [waited] if waited is not None else [])
        elif name == "synchronize":
            streams = [node.args[0]] if node.args[0] else list(last)
            put(node, node.args[0] or here, [last[s] for s in streams if s in last])
            host[:] = [node]
        else:
            put(node, here)
    return before


def assert_every_cross_read_is_ordered(gm):
    """Every cross-stream read is ordered after its producer: a path of device orderings
    (:func:`device_orderings`) leads from the producer to the reader; returns the reads."""
    before = device_orderings(gm)
    reads = cross_reads(gm)
    for p, r, s, t in reads:
        producer, seen, todo = _alias_source(p), set(), [r]
        while todo and producer not in seen:
            for q in before.get(todo.pop(), ()):
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
        assert producer in seen, (f"{p.name} (stream {s!r}) read by {r.name} (stream {t!r}) "
                                  f"is not ordered after its producer:\n{gm.graph}")
    return reads
