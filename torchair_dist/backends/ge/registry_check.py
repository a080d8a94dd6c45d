"""Validate GE graphs against GE's operator IR registry (``ge_op_registry.json``).

Checks, per op: the op type exists; the input descriptors name the IR inputs in registry order
(optional inputs may be skipped, dynamic inputs appear as ``<name>0``, ``<name>1``, ...); every
data input is ``"<op>:<i>"`` of an earlier op that has an output ``i``, and control edges
(``":-1"``) come last; output descriptors follow the IR outputs; required attributes are present
and every registry attribute has the registry's type; every input/output descriptor's dtype is
among the dtypes the registry lists for its port (its ``dtypes`` plus the named classes of its
``type_expr``, e.g. ``IndexNumberType()``; ports typed by a variable or ``ALL()`` are not
checked). Attributes whose name starts with ``_`` are
private annotations and are not checked; any other attribute the IR does not declare is an error.

The registry file is ``$TORCHAIR_DIST_GE_REGISTRY`` if set, else a full registry named
``ge_op_registry.json`` in a folder named ``shared`` beside the checkout (where CI provides it),
when there is one, else the bundled
``ge_op_registry_subset.json`` (the IR of every op this backend emits; see registry_subset.py). The
four framework ops GE defines outside the
operator library (``Data``, ``Const``, ``NetOutput``, ``Cast``) are not in that file (``RefData`` is, with a
required ``x`` GE feeds itself, like Data's) and are
declared in :data:`BUILTIN_OPS` below.
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional

from ...errors import TorchairDistError
from .proto import AttrDef, DataType, GraphDef, ModelDef

ENV_REGISTRY = "TORCHAIR_DIST_GE_REGISTRY"


class GeRegistryError(TorchairDistError, FileNotFoundError):
    """The GE operator registry file cannot be found or read."""


class GeGraphInvalidError(TorchairDistError, ValueError):
    """A GE graph breaks the operator IR; the message lists every problem found."""


def _port(name: str, kind: str = "required") -> dict:
    return {"name": name, "kind": kind}


BUILTIN_OPS: Dict[str, dict] = {
    "Data": {"inputs": [_port("x", "optional")], "outputs": [_port("y")],
             "attrs": [{"name": "index", "type": "Int", "required": False}]},
    # RefData is in the registry with a required ``x``; like Data, GE feeds it from the caller
    "RefData": {"inputs": [_port("x", "optional")], "outputs": [_port("y")],
                "attrs": [{"name": "index", "type": "Int", "required": False}]},
    "Const": {"inputs": [], "outputs": [_port("y")],
              "attrs": [{"name": "value", "type": "Tensor", "required": True}]},
    "NetOutput": {"inputs": [_port("x", "dynamic")], "outputs": [_port("y", "dynamic")],
                  "attrs": []},
    "Cast": {"inputs": [_port("x")], "outputs": [_port("y")],
             "attrs": [{"name": "dst_type", "type": "Int", "required": True}]},
}

# Registry attribute type -> the AttrDef oneof field (and list val_type) that encodes it.
_SCALAR_FIELD = {"Int": "i", "int": "i", "Float": "f", "Bool": "b", "String": "s", "Type": "dt",
                 "Tensor": "t", "ListListInt": "list_list_int", "ListListFloat": "list_list_float"}
_LIST_TYPE = {"ListInt": (AttrDef.ListValue.VT_LIST_INT, "i"),
              "ListFloat": (AttrDef.ListValue.VT_LIST_FLOAT, "f"),
              "ListBool": (AttrDef.ListValue.VT_LIST_BOOL, "b"),
              "ListString": (AttrDef.ListValue.VT_LIST_STRING, "s"),
              "ListType": (AttrDef.ListValue.VT_LIST_DATA_TYPE, "dt")}


_SUBSET_HINT = (" (the bundled subset of the ops this backend emits; set "
                f"${ENV_REGISTRY} to the full ge_op_registry.json)")


def _using_subset() -> bool:
    return default_registry_path().name == "ge_op_registry_subset.json"


def default_registry_path(allow_subset: bool = True) -> Path:
    from ...base.envvars import raw

    env = raw(ENV_REGISTRY)
    if env:  # a missing file is a GeRegistryError naming the variable when it is loaded
        return Path(env)
    repo = Path(__file__).resolve().parents[3]
    full = repo.parent / "shared" / "ge_op_registry.json"
    if full.exists() or not allow_subset:
        return full
    return Path(__file__).with_name("ge_op_registry_subset.json")


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Dict[str, dict]:
    try:
        with open(path, encoding="utf-8") as f:
            ops = json.load(f)["ops"]
    except FileNotFoundError:
        raise GeRegistryError(
            f"GE operator registry not found at {path}; set ${ENV_REGISTRY} to the path of "
            f"ge_op_registry.json"
        ) from None
    except (OSError, ValueError, KeyError) as e:
        raise GeRegistryError(f"cannot read GE operator registry {path}: {e}") from None
    return {**ops, **BUILTIN_OPS}


def load_registry(path: Optional[os.PathLike] = None) -> Dict[str, dict]:
    """``{op_type: {"inputs", "outputs", "attrs"}}``; raises GeRegistryError if missing."""
    return _load(str(path or default_registry_path()))


def _match_ports(descs: List[str], ports: List[dict]) -> Optional[str]:
    """None if the descriptor names follow the IR ports in order, else what is wrong."""
    i = 0
    for port in ports:
        name, kind = port["name"], port["kind"]
        if kind == "dynamic":
            n = 0
            while i < len(descs) and descs[i] == f"{name}{n}":
                i, n = i + 1, n + 1
        elif i < len(descs) and descs[i] == name:
            i += 1
        elif kind == "required":
            return f"missing required port {name!r}"
    if i != len(descs):
        return f"unexpected port {descs[i]!r} (IR order: {[p['name'] for p in ports]})"
    return None


def _attr_type_ok(attr: AttrDef, typ: str) -> bool:
    which = attr.WhichOneof("value")
    if typ in _SCALAR_FIELD:
        return which == _SCALAR_FIELD[typ]
    if typ in _LIST_TYPE:
        val_type, field = _LIST_TYPE[typ]
        if which != "list":
            return False
        lst = attr.list
        return lst.val_type == val_type or (lst.val_type == 0 and len(getattr(lst, field)) > 0)
    return which is not None  # types we do not model: presence only


# GE's named dtype classes (``TensorType::BasicType()`` ...) as DT_* names; a port whose
# ``type_expr`` uses a class not listed here (``ALL()``, type variables "T") is not checked.
_REAL = {"DT_DOUBLE", "DT_FLOAT", "DT_FLOAT16", "DT_BF16", "DT_INT8", "DT_INT16", "DT_INT32",
         "DT_INT64", "DT_UINT8", "DT_UINT16", "DT_UINT32", "DT_UINT64"}
_QUANT = {"DT_QINT8", "DT_QINT16", "DT_QINT32", "DT_QUINT8", "DT_QUINT16"}
_COMPLEX = {"DT_COMPLEX64", "DT_COMPLEX128"}
DTYPE_CLASSES = {
    "IndexNumberType": {"DT_INT32", "DT_INT64"},
    "RealNumberType": _REAL,
    "NumberType": _REAL | _QUANT | _COMPLEX,
    "BasicType": _REAL | _QUANT | _COMPLEX,
    "FloatingDataType": {"DT_DOUBLE", "DT_FLOAT", "DT_FLOAT16", "DT_BF16"},
    "UnaryDataType": {"DT_DOUBLE", "DT_FLOAT", "DT_FLOAT16", "DT_BF16"} | _COMPLEX,
    "IntegerDataType": {"DT_INT8", "DT_INT16", "DT_INT32", "DT_INT64", "DT_UINT8", "DT_UINT16",
                        "DT_UINT32", "DT_UINT64"},
}
_ALIASES = {"DT_FLOAT32": "DT_FLOAT", "DT_BFLOAT16": "DT_BF16"}


@functools.lru_cache(maxsize=4096)
def _allowed(type_expr: str, listed: tuple) -> Optional[frozenset]:
    """The DT_* names a port accepts, or None when the registry does not pin them down."""
    classes = re.findall(r"([A-Za-z]+)\(\)", type_expr)
    if not listed and not classes:
        return None  # a type variable ("T") or an unparsed expression
    allowed = {_ALIASES.get(d, d) for d in listed}
    for c in classes:
        if c not in DTYPE_CLASSES:
            return None
        allowed |= DTYPE_CLASSES[c]
    return frozenset(allowed)


def _port_of(desc_name: str, ports: List[dict]) -> Optional[dict]:
    for port in ports:
        name = port["name"]
        if desc_name == name or (port["kind"] == "dynamic" and desc_name.startswith(name)
                                 and desc_name[len(name):].isdigit()):
            return port
    return None


def _dtype_problems(where: str, side: str, descs, ports: List[dict]) -> List[str]:
    problems = []
    for desc in descs:
        port = _port_of(desc.name, ports)
        if port is None:
            continue
        allowed = _allowed(port.get("type_expr", ""), tuple(port.get("dtypes") or ()))
        if allowed is None:
            continue
        name = DataType.Name(desc.dtype) if desc.dtype in DataType.values() else str(desc.dtype)
        if name not in allowed:
            problems.append(f"{where}: {side} {desc.name!r} has dtype {name}, not among the "
                            f"IR's {sorted(allowed)}")
    return problems


def check_graph(graph: GraphDef, registry: Optional[Dict[str, dict]] = None) -> List[str]:
    """Every problem of ``graph`` as one line each (empty when valid)."""
    reg = registry if registry is not None else load_registry()
    problems: List[str] = []
    outputs_of: Dict[str, int] = {}
    for op in graph.op:
        where = f"{op.type} {op.name!r}"
        ir = reg.get(op.type)
        if ir is None:
            problems.append(f"{where}: op type {op.type!r} is not in the GE operator registry"
                            f"{_SUBSET_HINT if _using_subset() else ''}")
            outputs_of[op.name] = len(op.output_desc)
            continue
        seen_control = False
        n_data = 0
        for inp in op.input:
            src, _, idx = inp.rpartition(":")
            if idx == "-1":
                seen_control = True
                if src not in outputs_of:
                    problems.append(f"{where}: control input {inp!r} is not an earlier op")
                continue
            n_data += 1
            if seen_control:
                problems.append(f"{where}: data input {inp!r} after a control edge")
            if src not in outputs_of or not idx.isdigit() or int(idx) >= outputs_of[src]:
                problems.append(f"{where}: input {inp!r} is not an output of an earlier op")
        if n_data != len(op.input_desc):
            problems.append(f"{where}: {n_data} data inputs but {len(op.input_desc)} input descs")
        bad = _match_ports([d.name for d in op.input_desc], ir["inputs"])
        if bad:
            problems.append(f"{where}: inputs: {bad}")
        bad = _match_ports([d.name for d in op.output_desc], ir["outputs"])
        if bad:
            problems.append(f"{where}: outputs: {bad}")
        problems += _dtype_problems(where, "input", op.input_desc, ir["inputs"])
        problems += _dtype_problems(where, "output", op.output_desc, ir["outputs"])
        declared = {a["name"]: a for a in ir["attrs"]}
        for a in ir["attrs"]:
            if a.get("required") and a["name"] not in op.attr:
                problems.append(f"{where}: required attribute {a['name']!r} ({a['type']}) missing")
        for key, value in op.attr.items():
            if key.startswith("_"):
                continue
            if key not in declared:
                problems.append(f"{where}: attribute {key!r} is not declared by the IR")
            elif not _attr_type_ok(value, declared[key]["type"]):
                problems.append(f"{where}: attribute {key!r} is not of type "
                                f"{declared[key]['type']} (got {value.WhichOneof('value')})")
        outputs_of[op.name] = len(op.output_desc)
    return problems


def validate(model_or_graph, registry: Optional[Dict[str, dict]] = None) -> None:
    """Raise GeGraphInvalidError listing every problem of a ModelDef/GraphDef."""
    graphs = model_or_graph.graph if isinstance(model_or_graph, ModelDef) else [model_or_graph]
    problems = [p for g in graphs for p in check_graph(g, registry)]
    if problems:
        name = graphs[0].name if graphs else "?"
        raise GeGraphInvalidError(
            f"GE graph {name!r} is not valid against the GE operator registry "
            f"({len(problems)} problems):\n  " + "\n  ".join(problems))
