"""FX (AOT aten) graph -> GE ``ModelDef``, through the converter registry."""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch.fx.node import map_aggregate

from ...errors import UnsupportedOpError
from ...scope import SCOPE_KEYS
from .builder import GraphBuilder, TensorRef, set_attr
from .converters import lookup, target_key
from .converters.aten_update import check_planned, plan_inplace
from .converters.context import ConvertContext, meta_desc
from .eager_checks import call_errors
from .lowering import decompose_unconverted, refusal_reason
from .proto import ModelDef


@dataclasses.dataclass
class ConvertedGraph:
    """A GE model plus what the runner needs to map it back to the FX calling convention.

    inputs: per FX placeholder, "tensor", "sym" (a SymInt, fed as a shape-[] int64 Data) or
        "opaque" (an object such as a process group: read at conversion, not fed to GE).
    outputs: per FX output, ("ge", k) for GE output k, ("sym", k) for a GE output read back as
        a Python int, ("value", v) for a constant (None, a Python number, a non-tensor
        attribute of the graph module), or ("input", i) for placeholder i returned as it is (an
        opaque input such as DTensor's DeviceMesh, which travels through AOT's graph as an
        object: it never enters GE, the runner hands the caller's object back).
    mutations: (placeholder index, GE output position) pairs to ``copy_`` back after a run
        (inputs updated in place through a ``RefData`` are not among them).
    """

    model: ModelDef
    inputs: List[str]
    outputs: List[Tuple[str, Any]]
    mutations: List[Tuple[int, int]]
    fx_code: str
    fx_nodes: Dict[str, str] = dataclasses.field(default_factory=dict)  # name -> format_node()
    # GE op name -> the FX node it was converted from; FX node name -> its nn.Module stack
    # ([qualified path, module class], outermost first; only nodes that have one)
    op_nodes: Dict[str, str] = dataclasses.field(default_factory=dict)
    module_stacks: Dict[str, List[List[str]]] = dataclasses.field(default_factory=dict)
    # (class, message) of what eager raises for these inputs (:mod:`.eager_checks`): the runner
    # raises the first on every call
    call_errors: List[Tuple[type, str]] = dataclasses.field(default_factory=list)
    # whether the graph takes a random key (uint64 [1]) after the fed inputs: its random ops
    # draw from it (:mod:`.converters.aten_random`); the runner draws it before every run
    rng_key: bool = False


def source_line(node: torch.fx.Node) -> str:
    """The user source location of an FX node (last frame of its stack trace), if recorded."""
    trace = node.meta.get("stack_trace") or getattr(node, "stack_trace", None) or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    if not frames:
        return "source line unknown"
    file, line, func, code = frames[-1]
    return f'{file}:{line} in {func}: {code.strip()}'


def _unsupported(gm: torch.fx.GraphModule) -> List[str]:
    lines = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and lookup(node.target) is None:
            lines.append(f"  {target_key(node.target)}: {refusal_reason(node.target)} "
                         f"(FX node %{node.name}: {node.format_node()}; at {source_line(node)})")
        elif node.op in ("call_module", "call_method"):
            lines.append(f"  {node.op} {node.target} (FX node %{node.name}; at {source_line(node)})")
    return lines


def check_supported(gm: torch.fx.GraphModule, graph_name: str = "graph") -> None:
    """Raise UnsupportedOpError listing every op of ``gm`` without a GE converter."""
    lines = _unsupported(gm)
    if lines:
        raise UnsupportedOpError(
            f"max-autotune (GE) cannot convert {len(lines)} op(s) of {graph_name}; no GE "
            f"converter is registered (and PyTorch has no decomposition into converted ops) "
            f"for:\n" + "\n".join(lines) + "\nRegister one with "
            "@torchair_dist.register_fx_node_ge_converter(<the aten op>) (see the README), or "
            "compile this model with mode='npugraph_ex' (or debug.run_eagerly=True to run the "
            "FX graph as is).")


def _placeholder_val(node: torch.fx.Node, example: Any) -> Any:
    val = node.meta.get("val", example)
    return example if val is None else val


def convert_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], graph_name: str,
                  rank: int = 0, world_size: int = 1, ref_data: bool = False) -> ConvertedGraph:
    """Convert ``gm`` (raises UnsupportedOpError listing every op without a converter).

    ``ref_data`` (``experimental_config.enable_ref_data``): every graph input the graph writes
    back (AOT's ``copy_(input, value)``) becomes a ``RefData`` updated by ``Assign`` in the
    graph, as TorchAir does; otherwise the new value is an extra output the runner copies back.
    KV-cache style indexed updates are in place either way (:func:`plan_inplace`)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    refused = call_errors(gm)  # before decomposing: mv's decomposition has no dtype check
    if refused:  # every call raises eager's error: nothing to convert (a converter may refuse)
        b = GraphBuilder(graph_name)
        b.net_output([])
        return ConvertedGraph(b.model(graph_name), [], [], [], gm.code, call_errors=refused)
    decompose_unconverted(gm)
    check_supported(gm, graph_name)
    with unset_fake_temporarily():  # Const values must be real tensors even under AOT's fake mode
        return _convert(gm, example_inputs, graph_name, rank, world_size, ref_data)


def _assigned_inputs(gm: torch.fx.GraphModule, planned) -> set:
    """Placeholders written back by ``copy_`` (and not already updated in place)."""
    return {n.args[0] for n in gm.graph.nodes
            if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
            and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"
            and n.args[0] not in planned}


def _convert(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], graph_name: str,
             rank: int, world_size: int, ref_data: bool = False) -> ConvertedGraph:
    b = GraphBuilder(graph_name)
    cx = ConvertContext(b, rank, world_size)
    env: Dict[torch.fx.Node, Any] = {}
    inputs: List[str] = []
    inplace = plan_inplace(gm)
    assigned = _assigned_inputs(gm, inplace) if ref_data else set()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    examples = list(example_inputs) + [None] * (len(placeholders) - len(example_inputs))
    for i, (node, example) in enumerate(zip(placeholders, examples)):
        val = _placeholder_val(node, example)
        if isinstance(val, torch.Tensor):
            env[node] = b.data(val.dtype, tuple(val.shape), name=node.name,
                               ref_data=node in inplace or node in assigned)
            if node in inplace:
                cx.ref_data[env[node].op] = inplace[node]
            elif node in assigned:
                cx.assigned.add(env[node].op)
            inputs.append("tensor")
        elif isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            env[node] = b.data(torch.int64, (), placement="CPU", name=node.name)
            inputs.append("sym")
        elif val is None or _is_opaque(val):
            # an opaque object input (e.g. a ProcessGroup or DeviceMesh as a script object):
            # used by the converters at conversion time, never fed to GE
            env[node] = _Opaque(i, getattr(val, "real_obj", val))
            inputs.append("opaque")
            continue
        else:
            raise UnsupportedOpError(f"placeholder %{node.name} has unsupported value {val!r}")
        cx.data_index[env[node].op] = i
    outputs: List[Tuple[str, Any]] = []
    op_nodes: Dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            env[node] = _get_attr(cx, gm, node)
        elif node.op == "call_function":
            cx.node = node
            first = len(b.graph.op)
            args = map_aggregate(node.args, lambda a: _arg(env, a))
            kwargs = map_aggregate(node.kwargs, lambda a: _arg(env, a))
            env[node] = lookup(node.target).fn(cx, *args, **kwargs)
            op_nodes.update((op.name, node.name) for op in b.graph.op[first:])
            _scope_attrs(node, b.graph.op[first:])
            cx.node = None
        elif node.op == "output":
            outputs = _outputs(node.args[0], env)
    check_planned(cx)
    refs: List[TensorRef] = []
    mapped: List[Tuple[str, Any]] = []
    for kind, value in outputs:
        if kind in ("ge", "sym"):
            mapped.append((kind, len(refs)))
            refs.append(value)
        else:
            mapped.append((kind, value))
    mutations = []
    for index, value in cx.mutations:
        mutations.append((index, len(refs)))
        refs.append(value)
    b.net_output(refs, control=cx.keep_alive)
    fx_nodes = {n.name: n.format_node() for n in gm.graph.nodes}
    return ConvertedGraph(b.model(graph_name), inputs, mapped, mutations, gm.code, fx_nodes,
                          op_nodes, _module_stacks(gm), rng_key=cx.rng_key is not None)


def _scope_attrs(node: torch.fx.Node, ops) -> None:
    """TorchAir's scope attributes (``torchair_dist.scope``: super_kernel, limit_core_num,
    op_never_timeout, data_dump) on the node become string attributes of its GE ops, where
    CANN reads them."""
    custom = node.meta.get("custom")
    if not custom:
        return
    for key, value in custom.items():
        if key in SCOPE_KEYS:
            for op in ops:
                set_attr(op.attr[key], str(value))


def _module_stacks(gm: torch.fx.GraphModule) -> Dict[str, List[List[str]]]:
    """Each node's ``nn_module_stack`` (Dynamo's meta, kept by AOT) as [path, class] pairs,
    the path without Dynamo's ``L['self']`` root."""
    stacks: Dict[str, List[List[str]]] = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        pairs = []
        for path, cls in stack.values():
            path = re.sub(r"^L\['[^']*'\]\.?", "", str(path))
            pairs.append([path, f"{cls.__module__}.{cls.__qualname__}" if isinstance(cls, type)
                          else str(cls)])
        stacks[node.name] = pairs
    return stacks


@dataclasses.dataclass(frozen=True)
class _Opaque:
    """An opaque placeholder's value at conversion (``obj``, what converters read) and its
    position (an output that returns it hands back the caller's object of each call)."""

    index: int
    obj: Any


@dataclasses.dataclass(frozen=True)
class _Attr:
    """A non-tensor attribute of the graph module (a torchbind object, a DeviceMesh): what a
    converter reads at conversion; an output that returns it returns the object."""

    obj: Any


def _arg(env: Dict[torch.fx.Node, Any], a: Any) -> Any:
    """A converter's argument: what ``env`` holds, opaque objects unwrapped."""
    if not isinstance(a, torch.fx.Node):
        return a
    value = env[a]
    return value.obj if isinstance(value, (_Opaque, _Attr)) else value


def _is_opaque(val: Any) -> bool:
    from torch._library.fake_class_registry import FakeScriptObject

    return isinstance(val, (FakeScriptObject, torch.ScriptObject)) or hasattr(val, "real_obj")


def _outputs(args: Any, env: Dict[torch.fx.Node, Any]) -> List[Tuple[str, Any]]:
    result: List[Tuple[str, Any]] = []
    for a in (args if isinstance(args, (list, tuple)) else [args]):
        if isinstance(a, torch.fx.Node):
            value = env[a]
            if isinstance(value, _Opaque):  # not a GE tensor: returned around the GE graph
                result.append(("input", value.index))
                continue
            if isinstance(value, _Attr):
                result.append(("value", value.obj))
                continue
            val = a.meta.get("val")
            sym = isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool)
            result.append(("sym" if sym else "ge", value))
        else:
            result.append(("value", a))
    return result


def _get_attr(cx: ConvertContext, gm: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, torch.Tensor):
        return cx.const(obj)
    if _is_opaque(obj) or not isinstance(obj, torch.nn.Module):
        # a torchbind object or another Python object (DTensor's DeviceMesh): not a GE tensor;
        # converters that take it read it at conversion, an output returns it as it is
        return _Attr(getattr(obj, "real_obj", obj))
    raise UnsupportedOpError(f"get_attr %{node.name} ({type(obj).__name__}) cannot become GE: "
                             f"a submodule is called through a higher-order op, which max-autotune "
                             f"does not convert; compile with mode='npugraph_ex'")


__all__ = ["ConvertedGraph", "convert_graph", "check_supported", "source_line", "meta_desc"]
