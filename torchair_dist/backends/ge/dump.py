"""Graph dumps of the GE backend (``debug.graph_dump.type`` = txt | pbtxt | py), one per rank.

File name: ``{path or .}/{graph_name}_rank_{rank}_pid_{pid}_ts_{utc}.{type}``.

- ``txt``: the ``ModelDef`` in protobuf text format.
- ``pbtxt``: TF-style ``node { name op input attr }`` blocks; control inputs are ``^op``, and the
  input/output descriptors appear as ``[i]<port>`` / ``[o]<port>`` string attributes.
- ``py``: a Python script that rebuilds the same graph with :class:`GraphBuilder` calls, each
  group of calls preceded by the FX node it came from as a ``## FX Code:`` comment.
"""
from __future__ import annotations

import datetime
import os
from typing import Dict, List, Optional

from google.protobuf import text_format

from ...errors import ConfigPathError
from .dtypes import torch_dtype
from .fx2ge import ConvertedGraph
from .proto import DataType, OpDef, TensorDescriptor
from .decode import decode_attr, decode_tensor

DUMP_TYPES = ("txt", "pbtxt", "py")
_INLINE_CONST_LIMIT = 4096  # elements; larger Const values are elided in py dumps


def dump_file_name(path: Optional[str], graph_name: str, rank: int, kind: str) -> str:
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%S%f")
    return os.path.join(path or ".", f"{graph_name}_rank_{rank}_pid_{os.getpid()}_ts_{ts}.{kind}")


def dump_graph(converted: ConvertedGraph, kind: str, path: Optional[str], graph_name: str,
               rank: int) -> str:
    """Write one dump; return its file name."""
    if kind not in DUMP_TYPES:
        raise ValueError(f"graph dump type {kind!r}: expected one of {DUMP_TYPES}")
    if path and os.path.islink(path):
        raise ConfigPathError(f"graph dump path {path!r} is a symlink; give a real directory")
    if path:
        os.makedirs(path, exist_ok=True)
    text = {"txt": to_txt, "pbtxt": to_pbtxt, "py": to_py}[kind](converted)
    name = dump_file_name(path, graph_name, rank, kind)
    with open(name, "w", encoding="utf-8") as f:
        f.write(text)
    return name


def to_txt(converted: ConvertedGraph) -> str:
    return text_format.MessageToString(converted.model)


def _desc_text(d: TensorDescriptor) -> str:
    return (f"dtype={DataType.Name(d.dtype)} shape={list(d.shape.dim)} layout={d.layout} "
            f"device={d.device_type}")


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_pbtxt(converted: ConvertedGraph) -> str:
    out: List[str] = []
    for op in converted.model.graph[0].op:
        out.append("node {")
        out.append(f"  name: {_quote(op.name)}")
        out.append(f"  op: {_quote(op.type)}")
        for inp in op.input:
            src, _, idx = inp.rpartition(":")
            out.append(f"  input: {_quote('^' + src if idx == '-1' else inp)}")
        attrs = {k: _attr_text(op, k) for k in sorted(op.attr)}
        attrs.update({f"[i]{d.name}": _desc_text(d) for d in op.input_desc})
        attrs.update({f"[o]{d.name}": _desc_text(d) for d in op.output_desc})
        for key, value in attrs.items():
            out.append(f"  attr {{ key: {_quote(key)} value {{ s: {_quote(value)} }} }}")
        out.append("}")
    return "\n".join(out) + "\n"


def _attr_text(op: OpDef, key: str) -> str:
    attr = op.attr[key]
    if attr.WhichOneof("value") == "t":
        d = attr.t.desc
        return f"tensor(dtype={DataType.Name(d.dtype)}, shape={list(d.shape.dim)})"
    if attr.WhichOneof("value") == "dt":
        return DataType.Name(attr.dt)
    return repr(decode_attr(attr))


def _py_value(op: OpDef, key: str) -> str:
    attr = op.attr[key]
    which = attr.WhichOneof("value")
    if which == "dt":
        return str(torch_dtype(attr.dt))
    if which == "t":
        t = decode_tensor(attr.t)
        if t.numel() > _INLINE_CONST_LIMIT:
            return f"torch.zeros({tuple(t.shape)}, dtype={t.dtype})  # value elided ({t.numel()} elements)"
        return f"torch.tensor({t.tolist()!r}, dtype={t.dtype})"
    if which == "list" and attr.list.val_type == attr.list.VT_LIST_DATA_TYPE:
        return "[" + ", ".join(str(torch_dtype(v)) for v in attr.list.dt) + "]"
    return repr(decode_attr(attr))


def _py_desc(d: TensorDescriptor) -> str:
    return f"({d.name!r}, ({torch_dtype(d.dtype)}, {tuple(d.shape.dim)!r}))"


def to_py(converted: ConvertedGraph) -> str:
    graph = converted.model.graph[0]
    out = ["# GE graph dump (torchair_dist): replays the graph with GraphBuilder calls.",
           "# Run it to get `model`, the same ModelDef (large Const values are elided).",
           "#", "# FX graph:"]
    out += [f"#   {line}" for line in converted.fx_code.strip().splitlines()]
    out += ["", "import torch", "from torchair_dist.backends.ge.builder import GraphBuilder, TensorRef",
            "", f"b = GraphBuilder({graph.name!r})", "v = {}", ""]
    seen_fx: Dict[str, bool] = {}
    for op in graph.op:
        fx = op.attr["_fx_node"].s.decode() if "_fx_node" in op.attr else ""
        if fx and fx not in seen_fx:
            seen_fx[fx] = True
            out.append(f"## FX Code: {converted.fx_nodes.get(fx, fx)}")
        data = [i for i in op.input if not i.endswith(":-1")]
        control = [i.rpartition(":")[0] for i in op.input if i.endswith(":-1")]
        inputs = ", ".join(f"({d.name!r}, v[{i!r}])" for d, i in zip(op.input_desc, data))
        attrs = ", ".join(f"{k!r}: {_py_value(op, k)}" for k in op.attr if k != "_fx_node")
        outs = ", ".join(_py_desc(d) for d in op.output_desc)
        call = (f"b.op({op.type!r}, [{inputs}], {{{attrs}}}, [{outs}], name={op.name!r}"
                + (f", control={control!r})" if control else ")"))
        out.append(f"for _r in {call}:")
        out.append("    v[str(_r)] = _r")
        if fx:
            out.append(f"b.graph.op[-1].attr['_fx_node'].s = {fx!r}.encode()")
        for i, d in enumerate(op.output_desc):
            if d.device_type != "NPU":
                out.append(f"b.graph.op[-1].output_desc[{i}].device_type = {d.device_type!r}")
    out += ["", "model = b.model()", ""]
    return "\n".join(out)
