"""Cold path: compile through the regular backend entry with a compiler that records the graph
it is handed (after the common and mode passes) and that graph's first call, then map the
graph's inputs and the caller's result back to the module and the call's arguments."""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional

import torch
import torch.utils._pytree as pytree
from torch._functorch._aot_autograd.schemas import MutationType

from ..pipeline.entry import _npu_backend
from ..pipeline.route import NpuFxCompiler
from .graph_data import NotCacheableError, _enc, graph_to_data
from .keys import _state_tensors, call_leaves
from .sources import graph_input_sources, resolve, source_path, tensor_meta


class _Record:
    """What the cache backend saw: the graph handed to the backend and its first call."""

    def __init__(self):
        self.dynamo_graphs = 0
        self.graphs: List[Dict] = []
        self.first_args: Optional[List[Any]] = None
        self.first_outputs: Optional[List[Any]] = None
        self.sources: Optional[List[Any]] = None  # Dynamo's source of each graph input


class RecordingCompiler(NpuFxCompiler):
    """``NpuFxCompiler`` that adds each graph it compiles (as data) and the first call's
    inputs/outputs to ``record``."""

    def __init__(self, config, record: _Record):
        super().__init__(config)
        self.record = record

    def __call__(self, gm, example_inputs, is_inference=True):
        record = self.record
        runner = super().__call__(gm, example_inputs, is_inference)
        ctx = self.compiled[-1]
        tc = torch._guards.TracingContext.try_get()
        meta = getattr(tc, "fw_metadata", None)
        entry = {"is_inference": is_inference, "static": list(ctx.static_input_indices),
                 "handle": self.handles[-1],
                 "used": [bool(n.users) for n in ctx.gm.graph.nodes if n.op == "placeholder"]}
        try:
            entry["graph"] = graph_to_data(ctx.gm)
            _check_mutations(meta)
        except NotCacheableError as exc:
            entry["not_cacheable"] = str(exc)
        record.graphs.append(entry)
        boxed = getattr(runner, "_boxed_call", False)

        def run(args):
            if record.first_args is None:
                record.first_args = list(args)
            out = runner(args) if boxed else runner(*args)
            if record.first_outputs is None:
                record.first_outputs = list(out)
            return out

        run._boxed_call = True
        return run


def _cache_backend(config, decompositions: Dict, record: _Record):
    """Our backend entry (``backend._npu_backend``) with a :class:`RecordingCompiler`, counting
    the Dynamo graphs in ``record``."""
    entry = functools.partial(_npu_backend, compiler_config=config,
                              decompositions=decompositions,
                              compiler_factory=lambda cfg: RecordingCompiler(cfg, record))

    def backend(gm, example_inputs, **kwargs):
        record.dynamo_graphs += 1
        record.sources = graph_input_sources(gm)
        return entry(gm, example_inputs, **kwargs)

    return backend


def _check_mutations(meta) -> None:
    for i, info in enumerate(getattr(meta, "input_info", None) or []):
        if info.mutation_type == MutationType.MUTATED_OUT_GRAPH or info.mutates_metadata:
            raise NotCacheableError(f"graph input {i} is mutated outside the graph")


def _map_inputs(record: _Record, module, args, kwargs, used: List[bool],
                method=None) -> List[List]:
    """Where each graph input comes from: ``["state", name, local]``, ``["arg", k]``,
    ``["none"]``, or ``["source", path, meta]`` for a tensor the function reads through a
    global, a closure or an object (:mod:`.sources`)."""
    by_id: Dict[int, List] = {}
    state = list(_state_tensors(module))
    # parameters/buffers, then the call's arguments, then tensors of list attributes ("a[i]"):
    # a tensor passed as an argument and also kept in a list (vLLM's KV caches) is read from
    # the argument of each call
    for name, t in state:
        if name.endswith("]"):
            continue
        local = getattr(t, "_local_tensor", None)
        by_id.setdefault(id(t), ["state", name, False])
        if local is not None:
            by_id.setdefault(id(local), ["state", name, True])
    for k, leaf in enumerate(call_leaves(args, kwargs)):
        by_id.setdefault(id(leaf), ["arg", k])
    for name, t in state:
        if name.endswith("]"):
            by_id.setdefault(id(t), ["state", name, False])
    specs = []
    for i, a in enumerate(record.first_args):
        if id(a) in by_id:
            specs.append(by_id[id(a)])
        elif not isinstance(a, torch.Tensor) and not used[i]:
            specs.append(["none"])
        else:
            specs.append(_source_spec(record, i, a, method, args, kwargs))
    return specs


def _source_spec(record: _Record, i: int, a, method, args, kwargs) -> List:
    """``["source", path, meta]`` for graph input ``i``: Dynamo's source of it as a path that,
    walked on the live objects, gives this very tensor."""
    why = "is neither a parameter/buffer of the module nor a call argument"
    sources = record.sources
    if (method is None or not isinstance(a, torch.Tensor) or type(a) not in
            (torch.Tensor, torch.nn.Parameter) or sources is None or
            len(sources) != len(record.first_args) or sources[i] is None):
        raise NotCacheableError(f"graph input {i} ({type(a).__name__}) {why}")
    try:
        path = source_path(sources[i], method)
    except NotCacheableError as exc:
        raise NotCacheableError(f"graph input {i} (Tensor) {why}, and {exc}") from None
    try:
        found = resolve(path, method, args, kwargs)
    except Exception:  # noqa: BLE001 - a path that does not walk is not stored
        found = None
    if found is not a:
        raise NotCacheableError(f"graph input {i} (Tensor) {why}, and {sources[i].name} "
                                f"does not lead back to it")
    return ["source", path, tensor_meta(a)]


def _map_outputs(record: _Record, result, args, kwargs) -> Dict:
    leaves, spec = pytree.tree_flatten(result)
    outs = record.first_outputs
    arg_ids = {id(x): k for k, x in enumerate(call_leaves(args, kwargs))}
    storage = {o.untyped_storage().data_ptr(): j for j, o in enumerate(outs)
               if isinstance(o, torch.Tensor)}
    specs = []
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            if leaf is not None and not isinstance(leaf, (bool, int, float, str)):
                raise NotCacheableError(f"output leaf of type {type(leaf).__name__}")
            specs.append(["const", _enc(leaf)])
            continue
        if type(leaf) is not torch.Tensor and not isinstance(leaf, torch.nn.Parameter):
            raise NotCacheableError(f"output {type(leaf).__name__} (tensor subclass)")
        j = next((j for j, o in enumerate(outs) if o is leaf), None)
        if j is not None:
            specs.append(["out", j])
        elif id(leaf) in arg_ids:
            specs.append(["arg", arg_ids[id(leaf)]])
        elif leaf.untyped_storage().data_ptr() in storage:
            specs.append(["view", storage[leaf.untyped_storage().data_ptr()], list(leaf.shape),
                          list(leaf.stride()), leaf.storage_offset()])
        else:
            raise NotCacheableError("an output is not a graph output, argument or view")
    try:
        dumped = pytree.treespec_dumps(spec)
    except Exception as exc:  # noqa: BLE001 - unregistered container types
        raise NotCacheableError(f"output structure is not serializable: {exc}") from None
    return {"spec": dumped, "leaves": specs}

