"""FX graph <-> JSON data. A stored graph names code only through :func:`lookup_op`: an
operator name looked up in ``torch.ops`` (name grammar checked, result must be an
``OpOverload``/HOP) or ``operator.getitem``. Arguments are JSON scalars, node references,
lists/tuples/dicts and typed tags; lifted constant tensors are raw bytes + dtype + shape."""
from __future__ import annotations

import base64
import operator
import re
from typing import Any, Dict, Optional

import torch

from ..errors import CacheRejectedError, NotCacheableError  # noqa: F401  (re-exported)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_OP_RE = re.compile(rf"^({_NAME})::({_NAME})(?:\.({_NAME}))?$")
_PY_TARGETS = {"_operator.getitem": operator.getitem}


def _op_name(target) -> Optional[str]:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target._schema.name}.{target._overloadname}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target.name()}"
    return None


def lookup_op(name: str):
    """``torch.ops`` lookup by name; the only way a stored graph names code."""
    if name in _PY_TARGETS:
        return _PY_TARGETS[name]
    m = _OP_RE.match(name)
    if not m or any(p and p.startswith("__") for p in m.groups()):
        raise CacheRejectedError(f"malformed operator name {name!r}")
    ns, op, overload = m.groups()
    try:
        found = getattr(getattr(getattr(torch.ops, ns), op), overload or "default") \
            if ns != "higher_order" else getattr(torch.ops.higher_order, op)
    except (AttributeError, RuntimeError):
        raise CacheRejectedError(f"operator {name!r} does not exist in this process") from None
    if not isinstance(found, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        raise CacheRejectedError(f"{name!r} is not an operator")
    return found


def _enc(a: Any) -> Any:
    if isinstance(a, torch.fx.Node):
        return {"n": a.name}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return {"f": a.hex()}
    if isinstance(a, (list, tuple)):
        return {"l" if isinstance(a, list) else "t": [_enc(x) for x in a]}
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return {"d": {k: _enc(v) for k, v in a.items()}}
    for kind, cls in (("dtype", torch.dtype), ("layout", torch.layout),
                      ("memory_format", torch.memory_format)):
        if isinstance(a, cls):
            return {kind: str(a).replace("torch.", "")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    op = _op_name(a)
    if op is not None:
        return {"op": op}
    raise NotCacheableError(f"graph argument {a!r} ({type(a).__name__}) has no data form")


def _dec(a: Any, env: Dict[str, torch.fx.Node]) -> Any:
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if not isinstance(a, dict) or len(a) != 1:
        raise CacheRejectedError(f"malformed graph argument {a!r}")
    (kind, v), = a.items()
    if kind == "n":
        if v not in env:
            raise CacheRejectedError(f"graph argument names unknown node {v!r}")
        return env[v]
    if kind == "f":
        return float.fromhex(v)
    if kind in ("l", "t"):
        items = [_dec(x, env) for x in v]
        return items if kind == "l" else tuple(items)
    if kind == "d":
        return {k: _dec(x, env) for k, x in v.items()}
    if kind in ("dtype", "layout", "memory_format"):
        cls = {"dtype": torch.dtype, "layout": torch.layout,
               "memory_format": torch.memory_format}[kind]
        value = getattr(torch, v, None) if re.fullmatch(_NAME, v) else None
        if not isinstance(value, cls):
            raise CacheRejectedError(f"unknown {kind} {v!r}")
        return value
    if kind == "device":
        return torch.device(v)
    if kind == "op":
        return lookup_op(v)
    if kind == "group":  # a process group by its ranks: this job's group with those ranks
        from .groups import rebind

        return rebind(v)
    raise CacheRejectedError(f"unknown graph argument kind {kind!r}")


def _tensor_data(t: torch.Tensor) -> Dict:
    """A real tensor constant as bytes. AOT calls the backend under its FakeTensorMode, where
    touching a real tensor is an error: the constant's value is read with that mode unset."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _tensor_bytes(t.detach().contiguous())


def _tensor_bytes(t: torch.Tensor) -> Dict:
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "b64": base64.b64encode(raw).decode()}


def _tensor_from(d: Dict) -> torch.Tensor:
    dtype = _dec({"dtype": d["dtype"]}, {})
    raw = base64.b64decode(d["b64"])
    if not raw:
        return torch.empty(d["shape"], dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(
        d["shape"]).clone()


def _group_args(n: torch.fx.Node, args: Dict, kwargs: Dict) -> None:
    """Replace the encoded c10d/stable group name of a collective by its ranks (in place)."""
    from .groups import group_arg_position, to_ref

    if getattr(n.target, "namespace", None) == "c10d_functional":
        _legacy_tag(n, args, kwargs)
    pos = group_arg_position(n.target)
    if pos is None:
        return
    if pos < len(n.args):
        args["t"][pos] = to_ref(n.args[pos], n.name).data()
    elif "group_name" in n.kwargs:
        kwargs["d"]["group_name"] = to_ref(n.kwargs["group_name"], n.name).data()


def _legacy_tag(n: torch.fx.Node, args: Dict, kwargs: Dict) -> None:
    """Legacy ``c10d_functional`` ops find their group by (tag, ranks); c10d's default tag
    ``ptd:<creation-order name>`` is dropped so the ranks alone select the group."""
    names = [a.name for a in n.target._schema.arguments]
    if "tag" not in names:
        return
    pos = names.index("tag")
    if pos < len(n.args) and str(n.args[pos]).startswith("ptd:"):
        args["t"][pos] = ""
    elif str(n.kwargs.get("tag", "")).startswith("ptd:"):
        kwargs["d"]["tag"] = ""


def graph_to_data(gm: torch.fx.GraphModule) -> Dict:
    """The graph as JSON data; process groups named by their ranks (see :mod:`.groups`)."""
    nodes, consts = [], {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            target = _op_name(n.target)
            if target is None:
                key = f"{getattr(n.target, '__module__', '')}.{getattr(n.target, '__name__', '')}"
                if _PY_TARGETS.get(key) is not n.target:
                    raise NotCacheableError(f"node {n.name} calls {n.target!r}, not an operator")
                target = key
        elif n.op in ("placeholder", "output"):
            target = str(n.target)
        elif n.op == "get_attr":
            value = operator.attrgetter(n.target)(gm)
            if not isinstance(value, torch.Tensor):
                raise NotCacheableError(f"get_attr {n.target} is a {type(value).__name__}")
            target = str(n.target)
            consts[target] = _tensor_data(value)
        else:
            raise NotCacheableError(f"node {n.name}: {n.op} nodes are not cacheable")
        args, kwargs = _enc(tuple(n.args)), _enc(dict(n.kwargs))
        if n.op == "call_function":
            _group_args(n, args, kwargs)
        nodes.append({"op": n.op, "name": n.name, "target": target, "args": args,
                      "kwargs": kwargs})
    return {"nodes": nodes, "consts": consts}


def graph_from_data(data: Dict) -> torch.fx.GraphModule:
    """Rebuild a graph from :func:`graph_to_data`'s output. Stored names are used only to
    resolve references inside the data: FX names every node itself, so nothing stored reaches
    the generated code except as a ``repr``-ed constant."""
    graph, env = torch.fx.Graph(), {}
    root = torch.nn.Module()
    consts = data.get("consts", {})
    const_names = {}
    for i, (name, t) in enumerate(consts.items()):
        const_names[name] = f"_cached_constant{i}"
        root.register_buffer(const_names[name], _tensor_from(t))
    placeholders = 0
    for nd in data["nodes"]:
        op, name = nd["op"], nd["name"]
        if not isinstance(name, str) or name in env:
            raise CacheRejectedError(f"malformed or duplicate node name {name!r}")
        args, kwargs = _dec(nd["args"], env), _dec(nd["kwargs"], env)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise CacheRejectedError(f"node {name!r}: malformed args/kwargs")
        if op == "placeholder":
            node = graph.placeholder(f"arg{placeholders}")
            placeholders += 1
        elif op == "call_function":
            node = graph.call_function(lookup_op(nd["target"]), args, kwargs)
        elif op == "get_attr":
            if nd["target"] not in const_names:
                raise CacheRejectedError(f"get_attr of unknown constant {nd['target']!r}")
            node = graph.get_attr(const_names[nd["target"]])
        elif op == "output":
            node = graph.output(args[0])
        else:
            raise CacheRejectedError(f"unknown node kind {op!r}")
        env[name] = node
    graph.lint()
    return torch.fx.GraphModule(root, graph)

