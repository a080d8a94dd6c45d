"""Offline export of per-rank GE graphs (the core of ``dynamo_export``).

For rank ``r`` the export writes, under ``export_path`` (``rank_{r}/`` when distributed):

- ``{export_name}{r}.air``: the serialized ``ModelDef`` (``{export_name}.air`` when not
  distributed). Graph inputs that are weights (the compile's static inputs: parameters and
  buffers) are baked in: as ``Const`` ops when the model plus all weights stay below
  ``const_limit_bytes`` (TorchAir's limit, 1848 MiB, by default), otherwise as ``FileConstant``
  ops whose raw little-endian bytes go to one file per weight next to the ``.air`` (file name:
  the weight name with ``.`` replaced by ``_``; ``file_path`` holds that file name, relative to
  the ``.air``). The remaining ``Data`` ops are renumbered 0, 1, ... in order (then RefData);
  ``export.inputs_name`` renames them by that index; with
  ``export.experimental.enable_record_nn_module_stack`` every op converted from a node inside an
  ``nn.Module`` carries ``_nn_module_stack`` (:func:`record_module_stacks`).
- ``dynamo.pbtxt``: the same graph as TF-style text (see :mod:`.dump`).
- with ``auto_atc_config``: rank 0 writes ``model_relation_config.json`` and
  ``numa_config.json`` into ``export_path`` when the graph uses a communication group.

Symlinked export paths are refused (:class:`ExportError`). The ``.air`` is a plain serialized
``ModelDef``; whether ATC accepts it as is was not verified here (no CANN).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from ...errors import TorchairDistError
from .builder import fill_desc, fill_tensor_def, tensor_bytes
from .fx2ge import ConvertedGraph
from .proto import ModelDef

CONST_LIMIT_BYTES = 1848 * 1024 * 1024


class ExportError(TorchairDistError, ValueError):
    """An export path is unsafe (a symlink) or unusable."""


def _refuse_symlinks(path: str) -> None:
    current = os.path.abspath(path)
    while True:
        if os.path.islink(current):
            raise ExportError(f"export path {path!r} goes through the symlink {current!r}; "
                              f"export to a real directory")
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def air_file_name(export_name: str, rank: int, distributed: bool) -> str:
    return f"{export_name}{rank}.air" if distributed else f"{export_name}.air"


def bake_weights(model: ModelDef, weights: Mapping[int, torch.Tensor], names: Mapping[int, str],
                 out_dir: str, const_limit_bytes: int = CONST_LIMIT_BYTES) -> List[str]:
    """Turn the Data ops of ``weights`` (Data index -> value) into Const/FileConstant ops;
    renumber the other Data ops. Returns the weight files written."""
    graph = model.graph[0]
    total = model.ByteSize() + sum(t.numel() * t.element_size() for t in weights.values())
    external = total > const_limit_bytes
    files: List[str] = []
    ref_data = []  # renumbered after the Data ops, as TorchAir does
    next_index = 0
    for op in graph.op:
        if op.type == "RefData":
            ref_data.append(op)
        if op.type != "Data":
            continue
        index = op.attr["index"].i
        if index not in weights:
            op.attr["index"].i = next_index
            next_index += 1
            continue
        value = weights[index].detach().to("cpu").contiguous()
        name = names.get(index, op.name)
        desc = type(op.output_desc[0])()
        desc.CopyFrom(op.output_desc[0])
        op.ClearField("attr")
        op.ClearField("output_desc")
        out = op.output_desc.add()
        fill_desc(out, desc.name or "y", value.dtype, tuple(value.shape))
        op.attr["_weight_name"].s = name.encode()
        if external:
            file_name = name.replace(".", "_")
            with open(os.path.join(out_dir, file_name), "wb") as f:
                f.write(tensor_bytes(value))
            files.append(file_name)
            op.type = "FileConstant"
            op.attr["file_path"].s = file_name.encode()
            op.attr["shape"].list.val_type = op.attr["shape"].list.VT_LIST_INT
            op.attr["shape"].list.i.extend(value.shape)
            op.attr["dtype"].dt = out.dtype
        else:
            op.type = "Const"
            fill_tensor_def(op.attr["value"].t, value)
    for op in ref_data:
        op.attr["index"].i = next_index
        next_index += 1
    return files


def _input_ops(model: ModelDef) -> Dict[int, Any]:
    """The exported graph's inputs (Data, then RefData) by their index attribute."""
    return {op.attr["index"].i: op for op in model.graph[0].op if op.type in ("Data", "RefData")}


def name_inputs(model: ModelDef, inputs_name: Optional[Mapping[int, str]]) -> Dict[str, str]:
    """``export.inputs_name`` ({exported input index: name}): rename those Data/RefData ops
    (after weights became constants, so index i is the i-th input the exported model is fed)
    and every reference to them. Raises :class:`ExportError` for an index that is not an
    input, a name that is not a non-empty str, or a name used twice or by another op."""
    if not inputs_name:
        return {}
    inputs = _input_ops(model)
    if len(inputs_name) > len(inputs):
        raise ExportError(f"export.inputs_name names {len(inputs_name)} inputs but the exported "
                          f"graph has {len(inputs)} (indices 0..{len(inputs) - 1}; weights are "
                          f"constants, not inputs)")
    renames: Dict[str, str] = {}
    for index, name in inputs_name.items():
        if isinstance(index, bool) or not isinstance(index, int) or index not in inputs:
            raise ExportError(f"export.inputs_name: key {index!r} is not an input index of the "
                              f"exported graph (expected ints in 0..{len(inputs) - 1})")
        if not isinstance(name, str) or not name or ":" in name:
            raise ExportError(f"export.inputs_name[{index}] = {name!r}: expected a non-empty "
                              f"str without ':'")
        renames[inputs[index].name] = name
    taken = {op.name for op in model.graph[0].op if op.name not in renames}
    clashes = sorted({n for n in renames.values() if n in taken}
                     | {n for n in renames.values() if list(renames.values()).count(n) > 1})
    if clashes:
        raise ExportError(f"export.inputs_name: the names {clashes} are used twice or by other "
                          f"ops of the exported graph; choose unique names")
    for op in model.graph[0].op:
        if op.name in renames:
            op.name = renames[op.name]
        for i, source in enumerate(op.input):
            name, sep, port = source.rpartition(":")
            if sep and name in renames:
                op.input[i] = f"{renames[name]}:{port}"
    return renames


def record_module_stacks(model: ModelDef, op_nodes: Mapping[str, str],
                         module_stacks: Mapping[str, Sequence[Sequence[str]]]) -> int:
    """``export.experimental.enable_record_nn_module_stack``: each op converted from an FX node
    that ran inside an ``nn.Module`` gets ``_nn_module_stack``: JSON of [path, class] pairs,
    outermost first (e.g. ``[["layers.0", "...LlamaDecoderLayer"], ["layers.0.mlp", ...]]``).
    Returns how many ops got one."""
    count = 0
    for op in model.graph[0].op:
        stack = module_stacks.get(op_nodes.get(op.name, ""))
        if stack:
            op.attr["_nn_module_stack"].s = json.dumps([list(p) for p in stack]).encode()
            count += 1
    return count


def export_extras(config) -> Dict[str, Any]:
    """The ``export.*`` options :func:`export_model` takes besides path, name and weights."""
    return {"inputs_name": config.get("export.inputs_name"),
            "record_nn_module_stack": bool(config.get(
                "export.experimental.enable_record_nn_module_stack"))}


def _groups_of(model: ModelDef) -> List[str]:
    found: List[str] = []
    for op in model.graph[0].op:
        if op.type.startswith("Hcom") and "group" in op.attr:
            name = op.attr["group"].s.decode()
            if name not in found:
                found.append(name)
    return found


def write_atc_configs(base: str, export_name: str, world_ranks: Sequence[int],
                      group_names: Sequence[str]) -> None:
    """model_relation_config.json and numa_config.json (TorchAir's layout) into ``base``."""
    from ...collectives.groups import parse_group_name

    relation: Dict[str, list] = {"deploy_config": [], "model_name_to_instance_id": [],
                                 "comm_group": [], "rank_table": []}
    for r in world_ranks:
        sub = air_file_name(export_name, r, True)
        relation["deploy_config"].append({"submodel_name": sub, "deploy_device_id_list": f"0:0:{r}"})
        relation["model_name_to_instance_id"].append({"submodel_name": sub, "model_instance_id": r})
        relation["rank_table"].append({"rank_id": r, "model_instance_id": r})
    for name in group_names:
        relation["comm_group"].append({"group_name": name,
                                       "group_rank_list": str(parse_group_name(name)[1])})
    node = {"node_id": 0, "node_type": "ATLAS800", "ipaddr": "127.0.0.1", "port": 29500,
            "item_list": [{"item_id": r} for r in world_ranks]}
    numa = {"cluster": [{"cluster_nodes": [node], "nodes_toplogy": {}}],
            "item_def": [{"item_type": "Ascend910"}],
            "node_def": [{"item": [{"item_type": "Ascend910"}]}]}
    for file_name, content in (("model_relation_config.json", relation), ("numa_config.json", numa)):
        with open(os.path.join(base, file_name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=4)


def export_model(converted: ConvertedGraph, inputs: Sequence[Any], *, export_path: str,
                 export_name: str, rank: int = 0, world_size: int = 1,
                 distributed: Optional[bool] = None, static_input_indices: Sequence[int] = (),
                 weight_names: Optional[Mapping[int, str]] = None,
                 const_limit_bytes: int = CONST_LIMIT_BYTES,
                 auto_atc_config: bool = False,
                 inputs_name: Optional[Mapping[int, str]] = None,
                 record_nn_module_stack: bool = False) -> str:
    """Write this rank's export (see the module docstring); return the ``.air`` path."""
    from .dump import to_pbtxt

    if distributed is None:
        distributed = world_size > 1
    _refuse_symlinks(export_path)
    out_dir = os.path.join(export_path, f"rank_{rank}") if distributed else export_path
    _refuse_symlinks(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    model = ModelDef()
    model.CopyFrom(converted.model)
    weights = {i: inputs[i] for i in static_input_indices if isinstance(inputs[i], torch.Tensor)}
    bake_weights(model, weights, dict(weight_names or {}), out_dir, const_limit_bytes)
    op_nodes = dict(converted.op_nodes)
    for old, new in name_inputs(model, inputs_name).items():
        if old in op_nodes:
            op_nodes[new] = op_nodes.pop(old)
    if record_nn_module_stack:
        record_module_stacks(model, op_nodes, converted.module_stacks)
    air = os.path.join(out_dir, air_file_name(export_name, rank, distributed))
    with open(air, "wb") as f:
        f.write(model.SerializeToString())
    with open(os.path.join(out_dir, "dynamo.pbtxt"), "w", encoding="utf-8") as f:
        f.write(to_pbtxt(ConvertedGraph(model, converted.inputs, converted.outputs,
                                        converted.mutations, converted.fx_code,
                                        converted.fx_nodes, op_nodes, converted.module_stacks)))
    groups = _groups_of(model)
    if auto_atc_config and rank == 0 and groups:
        write_atc_configs(export_path, export_name, list(range(world_size)), groups)
    return air
