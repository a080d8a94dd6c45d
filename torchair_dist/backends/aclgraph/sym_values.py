"""Integer inputs that only carry values become device scalars, so one capture serves them all.

A device graph bakes every host value in at capture time, so a runner keys its captures on the
graph's integer inputs: a graph that takes a changing Python int (transformers' sliding-window
cache passes its ``cumulative_length_int``, a decode position, that way) is captured again on
every step. Where such an int never decides a shape — it only reaches tensor ops as a value
(``arange(1) + pos``) and host arithmetic — the capture need not depend on it:

* the host part of the graph (the integer arithmetic on such inputs, ``sym_size`` reads) runs
  in Python on every call and yields (a) each integer a tensor op consumes and (b) each integer
  the graph returns;
* each integer a tensor op consumes becomes a new 0-d int64 input of the device graph (the op
  takes the tensor in its place; ``op.Scalar`` overloads switch to ``op.Tensor``), filled per
  call like any other copied input;
* the integer inputs are then fed as a constant, so the capture key no longer holds them; the
  integer outputs come from the host part.

Anything else (the int reaches a shape, a size argument, a non-tensor position) leaves the
graph as it is: captured per value, as before.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import torch
import torch.fx

aten = torch.ops.aten

# host-side integer arithmetic Dynamo/AOT leave in graphs
_HOST_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
             operator.neg, operator.pow, operator.truediv, torch.sym_max, torch.sym_min,
             torch.sym_int, torch.sym_sqrt, torch.sym_not}
_SIZE_READS = {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
               aten.sym_storage_offset.default}


def _is_symint_val(val: Any) -> bool:
    return isinstance(val, torch.SymInt)


def _symbols(val: Any) -> Set[Any]:
    node = getattr(val, "node", None)
    expr = getattr(node, "expr", None)
    return set(getattr(expr, "free_symbols", ()) or ())


def _shape_symbols(gm: torch.fx.GraphModule) -> Set[Any]:
    """Every symbol that appears in a tensor's shape, stride or offset in ``gm``."""
    found: Set[Any] = set()
    for n in gm.graph.nodes:
        vals = n.meta.get("val")
        for v in (vals if isinstance(vals, (list, tuple)) else [vals]):
            if isinstance(v, torch.Tensor):
                for s in list(v.shape) + list(v.stride()) + [v.storage_offset()]:
                    found |= _symbols(s)
    return found


@dataclasses.dataclass
class SymSplit:
    """The rewritten device graph and what the runner wrapper needs."""

    gm: torch.fx.GraphModule            # device graph: value ints as trailing 0-d inputs
    host: Callable[[List[Any]], Any]    # args -> (values consumed by tensor ops, int outputs)
    value_positions: List[int]          # integer inputs no longer read by the device graph
    n_values: int                       # trailing 0-d tensor inputs
    int_outputs: List[int]              # output positions computed on the host
    device: torch.device


def _tensor_overload(op, name: str):
    """``op`` if its argument ``name`` takes a Tensor, else the packet's overload whose same
    argument does (``add.Scalar`` -> ``add.Tensor``), else None."""
    def takes_tensor(o) -> bool:
        args = o._schema.arguments
        arg = next((a for a in args if a.name == name), None)
        return arg is not None and str(arg.type) in ("Tensor", "Tensor?")
    if takes_tensor(op):
        return op
    packet = getattr(aten, op._schema.name.split("::")[-1], None)
    if packet is None:
        return None
    for overload in ("Tensor", "Tensor_Tensor", "self"):
        candidate = getattr(packet, overload, None)
        if candidate is not None and takes_tensor(candidate) and [
                a.name for a in candidate._schema.arguments] == [
                a.name for a in op._schema.arguments]:
            return candidate
    return None


def _arg_name(op, node: torch.fx.Node, value: torch.fx.Node) -> Optional[str]:
    """The schema name of the argument of ``node`` that is ``value`` (None if nested/absent)."""
    schema = op._schema.arguments
    for i, a in enumerate(node.args):
        if a is value and i < len(schema):
            return schema[i].name
    for k, a in node.kwargs.items():
        if a is value:
            return k
    return None


def _plan(gm: torch.fx.GraphModule):
    """(host nodes, boundary uses {sym node: [(user, new target, arg name)]}) or None."""
    shape_syms = _shape_symbols(gm)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    roots = [n for n in phs if _is_symint_val(n.meta.get("val"))
             and not (_symbols(n.meta["val"]) & shape_syms)]
    if not roots:
        return None
    host: Set[torch.fx.Node] = set(roots)
    boundary: Dict[torch.fx.Node, list] = {}
    for n in gm.graph.nodes:  # topological: every input of n is seen before n
        if n.op != "call_function" or n in host:
            continue
        ins = [a for a in n.all_input_nodes]
        if not any(a in host for a in ins):
            continue
        if n.target in _HOST_OPS and _is_symint_val(n.meta.get("val")):
            if any(a not in host and not _host_input(a) for a in ins):
                return None  # a value computed on the device feeds host arithmetic
            for a in ins:
                if a not in host:
                    host.add(a)
            host.add(n)
            continue
        if not isinstance(n.target, torch._ops.OpOverload):
            return None
        for a in ins:
            if a in host:
                name = _arg_name(n.target, n, a)
                target = _tensor_overload(n.target, name) if name else None
                if target is None:
                    return None  # the int is a size / dim / other non-tensor argument
                boundary.setdefault(a, []).append((n, target, name))
    if not boundary and not _int_outputs(gm, host):
        return None
    return roots, host, boundary


def _host_input(node: torch.fx.Node) -> bool:
    """An integer the host can compute: a placeholder or a size read of an input."""
    return node.op == "placeholder" or (node.op == "call_function" and node.target in _SIZE_READS
                                        and all(a.op == "placeholder"
                                                for a in node.all_input_nodes))


def _int_outputs(gm: torch.fx.GraphModule, host: Set[torch.fx.Node]) -> List[int]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    return [i for i, v in enumerate(values) if isinstance(v, torch.fx.Node) and v in host]


def _host_module(gm: torch.fx.GraphModule, host: Set[torch.fx.Node],
                 wanted: Sequence[torch.fx.Node]) -> Callable[[List[Any]], Any]:
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = graph.placeholder(n.name)
        elif n in host:
            env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[w] for w in wanted))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    return lambda args: module.forward(*args)  # no nn.Module call machinery per call


def _device_of(gm: torch.fx.GraphModule) -> torch.device:
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if n.op == "placeholder" and isinstance(v, torch.Tensor):
            return v.device
    return torch.device("cpu")


def split_value_ints(gm: torch.fx.GraphModule) -> Optional[SymSplit]:
    """Rewrite a copy of ``gm`` as described in the module docstring; None when no integer
    input qualifies."""
    plan = _plan(gm)
    if plan is None:
        return None
    roots, host, boundary = plan
    gm = torch.fx.GraphModule(gm, _copy_graph(gm))
    # map the plan onto the copy (node names are preserved by the copy)
    by_name = {n.name: n for n in gm.graph.nodes}
    roots = [by_name[n.name] for n in roots]
    host = {by_name[n.name] for n in host}
    boundary = {by_name[k.name]: [(by_name[u.name], t, a) for u, t, a in v]
                for k, v in boundary.items()}
    int_outputs = _int_outputs(gm, host)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    wanted = list(boundary) + [values[i] for i in int_outputs]
    host_fn = _host_module(gm, host, wanted)
    device = _device_of(gm)
    last_ph = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    new_phs = []
    with gm.graph.inserting_after(last_ph):
        for k in reversed(range(len(boundary))):
            ph = gm.graph.placeholder(f"int_value_{k}")
            # one fake tensor per input: a shared one reads as the same (aliased) input, and a
            # compiler that retraces (inductor) then feeds every value from one of them
            ph.meta["val"] = _fake_scalar(gm, device)
            new_phs.insert(0, ph)
    for ph, (sym, uses) in zip(new_phs, boundary.items()):
        for user, target, name in uses:
            user.target = target
            user.args = tuple(ph if a is sym else a for a in user.args)
            user.kwargs = {k: (ph if a is sym else a) for k, a in user.kwargs.items()}
    for i in int_outputs:
        values[i] = None
    out.args = (tuple(values) if isinstance(out.args[0], (list, tuple)) else values[0],)
    _erase_unused(gm, {n for n in host if n.op != "placeholder"})
    gm.recompile()
    positions = [i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
                 if n in roots]
    return SymSplit(gm, host_fn, positions, len(new_phs), int_outputs, device)


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
        env[n].name = n.name
    return graph


def _fake_scalar(gm: torch.fx.GraphModule, device: torch.device):
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if mode is None:
        return torch.zeros((), dtype=torch.int64, device=device)
    with mode:
        return torch.zeros((), dtype=torch.int64, device=device)


def _erase_unused(gm: torch.fx.GraphModule, candidates: Set[torch.fx.Node]) -> None:
    changed = True
    while changed:
        changed = False
        for n in list(candidates):
            if not n.users:
                gm.graph.erase_node(n)
                candidates.discard(n)
                changed = True


class ValueIntRunner:
    """Boxed runner around the device graph's runner: integer inputs go to the host part,
    the values tensor ops need are fed as 0-d tensors, integer outputs come from the host."""

    _boxed_call = True

    def __init__(self, split: SymSplit, inner: Callable[[List[Any]], Any]):
        self.split = split
        self.inner = inner
        self.n_consumed = split.n_values
        # one 0-d tensor per value, filled on every call: no allocation, and on a device no
        # host-to-device copy (``fill_`` with a Python int is a kernel argument)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # built while compiling, under AOT's fake mode
            self.values = [torch.zeros((), dtype=torch.int64, device=split.device)
                           for _ in range(split.n_values)]

    def __call__(self, args: List[Any]):
        split = self.split
        host = split.host(args)
        consumed, outs = host[:self.n_consumed], host[self.n_consumed:]
        feed = list(args)
        for i in split.value_positions:
            feed[i] = 0  # not read by the device graph: a constant keeps one capture key
        for tensor, v in zip(self.values, consumed):
            tensor.fill_(int(v))
        feed.extend(self.values)
        args.clear()
        result = list(self.inner(feed))
        for i, v in zip(split.int_outputs, outs):
            result[i] = v
        return result

    def __getattr__(self, name: str):  # capture_count, captures ... of the inner runner
        return getattr(self.inner, name)
