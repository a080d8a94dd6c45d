"""Warm path: a graph rebuilt from a verified entry, checked against the module and the call,
shape-propagated and handed, with the backend handle stored beside it, to the mode's backend
(``Backend.load``, through ``route.build_runner``, which adds the cross-rank check as for a
fresh compile); Dynamo, AOT autograd, decompositions and the graph passes are skipped."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ..pipeline.route import build_runner, make_context
from ..errors import CacheRejectedError
from .graph_data import _dec, graph_from_data
from .keys import _state_tensors, call_leaves
from .sources import check_meta, check_path, make_getter


class LoadedEntry:
    """A graph rebuilt from a verified entry, loaded by the mode's backend; callable like the
    original function."""

    def __init__(self, data: Dict, module, config, args, kwargs, method=None):
        self.module = module
        gm = graph_from_data(data["graph"])
        self.inputs, self.out_leaves = _checked_io(data, module, args, kwargs, gm)
        if method is None and any(s[0] == "source" for s in self.inputs):
            raise CacheRejectedError("entry reads inputs through paths; no method to walk them")
        self.getters = [self._state_getter(s[1], s[2]) if s[0] == "state" else
                        make_getter(s[1], s[2], method, s[1][0][0] == "arg")
                        if s[0] == "source" else None for s in self.inputs]
        # a tensor read through a path can change under the entry (keys: SourceChanged)
        self.reads_sources = any(s[0] == "source" for s in self.inputs)
        self.out_spec = pytree.treespec_loads(data["outputs"]["spec"])
        flat = self._flat_inputs(args, kwargs)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in flat]
        with torch.no_grad():
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake)
        handle = data.get("handle")
        if handle is not None and not (isinstance(handle, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in handle.items())):
            raise CacheRejectedError("entry's backend handle is not a {str: str} record")
        ctx = make_context(gm, fake, config, data["static"],
                           f"cached_{data['signature'][:8]}", is_inference=True,
                           handle=handle)
        self.runner = build_runner(ctx).runner  # the mode backend's load, then the check
        self.boxed = getattr(self.runner, "_boxed_call", False)
        self.fast = _fast_call(self, args, kwargs)  # None: the general __call__ answers

    def _state_getter(self, name: str, local: bool):
        if name.endswith("]"):  # a tensor in a list attribute: "sub.attr[i]"
            path, _, index = name[:-1].rpartition("[")
            owner_name, _, attr = path.rpartition(".")
            owner = self.module.get_submodule(owner_name) if owner_name else self.module
            return lambda: getattr(owner, attr)[int(index)]
        owner_name, _, attr = name.rpartition(".")
        owner = self.module.get_submodule(owner_name) if owner_name else self.module
        if local:
            return lambda: getattr(owner, attr)._local_tensor
        return lambda: getattr(owner, attr)

    def _flat_inputs(self, args, kwargs) -> List[Any]:
        leaves = call_leaves(args, kwargs)
        flat = []
        for spec, get in zip(self.inputs, self.getters):
            flat.append(get(args, kwargs) if spec[0] == "source" else get() if get is not None
                        else leaves[spec[1]] if spec[0] == "arg" else None)
        return flat

    def __call__(self, args, kwargs):
        if self.fast is not None:
            return self.fast(args, kwargs)
        flat = self._flat_inputs(args, kwargs)
        with torch.no_grad():
            outs = self.runner(flat) if self.boxed else self.runner(*flat)
        leaves = call_leaves(args, kwargs)
        result = []
        for spec in self.out_leaves:
            kind = spec[0]
            if kind == "out":
                result.append(outs[spec[1]])
            elif kind == "arg":
                result.append(leaves[spec[1]])
            elif kind == "view":
                result.append(outs[spec[1]].as_strided(spec[2], spec[3], spec[4]))
            else:
                result.append(_dec(spec[1], {}))
        return pytree.tree_unflatten(result, self.out_spec)


# A call routed here has the call key this entry was built for (``keys.call_key``): the same
# argument structure. Where that structure is flat (positional leaves, no kwargs) and the
# result is one leaf or a tuple/list of leaves taken from the graph outputs or the arguments,
# the call is generated as one function: no pytree walk, no context manager.
_FAST_SOURCE = """\
def call(args, kwargs):
    flat = [{inputs}]
    grad = is_grad_enabled()
    set_grad_enabled(False)
    try:
        outs = {run}
    finally:
        set_grad_enabled(grad)
    return {result}
"""


def _fast_call(entry: "LoadedEntry", args, kwargs):
    """The generated call of ``entry`` for flat calls (see ``_FAST_SOURCE``), else None.
    It takes ``(args, kwargs)`` like the entry, so the caller can keep it instead."""
    leaves = call_leaves(args, kwargs)
    if kwargs or len(leaves) != len(args) or any(a is not b for a, b in zip(leaves, args)):
        return None
    spec = entry.out_spec
    if spec.is_leaf():
        pattern = "{}"
    elif spec.type in (tuple, list) and all(c.is_leaf() for c in spec.children()):
        pattern = "({},)" if spec.type is tuple else "[{}]"
    else:
        return None
    names = {"runner": entry.runner, "is_grad_enabled": torch.is_grad_enabled,
             "set_grad_enabled": torch._C._set_grad_enabled}
    inputs = []
    for i, s in enumerate(entry.inputs):
        if s[0] == "arg":
            inputs.append(f"args[{s[1]}]")
        elif s[0] == "state":
            names[f"get{i}"] = entry.getters[i]
            inputs.append(f"get{i}()")
        elif s[0] == "source":
            names[f"get{i}"] = entry.getters[i]
            inputs.append(f"get{i}(args, kwargs)")
        else:
            inputs.append("None")
    outs = []
    for s in entry.out_leaves:
        if s[0] == "out":
            outs.append(f"outs[{s[1]}]")
        elif s[0] == "arg":
            outs.append(f"args[{s[1]}]")
        else:  # views and constants: the general path rebuilds them
            return None
    run = "runner(flat)" if entry.boxed else "runner(*flat)"
    source = _FAST_SOURCE.format(inputs=", ".join(inputs), run=run,
                                 result=pattern.format(", ".join(outs)))
    exec(compile(source, "<torchair_dist cache entry>", "exec"), names)  # noqa: S102
    names["call"].reads_sources = entry.reads_sources
    return names["call"]


def _checked_io(data: Dict, module, args, kwargs, gm) -> Tuple[List, List]:
    """The entry's input and output maps, refused unless every reference is in range and
    every state name is a parameter/buffer of ``module``."""
    n_args = len(call_leaves(args, kwargs))
    state = {name for name, _ in _state_tensors(module)}
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    n_outs = len(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else -1
    static = data.get("static")

    def ok_in(s):
        return (s == ["none"] or (len(s) == 2 and s[0] == "arg" and _index(s[1], n_args)) or
                (len(s) == 3 and s[0] == "source" and check_path(s[1]) and check_meta(s[2])) or
                (len(s) == 3 and s[0] == "state" and s[1] in state and isinstance(s[2], bool)))

    def ok_out(s):
        if s[:1] == ["const"] and len(s) == 2:
            return s[1] is None or isinstance(s[1], (bool, int, str, dict))
        if s[:1] == ["arg"] and len(s) == 2:
            return _index(s[1], n_args)
        if s[:1] == ["out"] and len(s) == 2:
            return _index(s[1], n_outs)
        return (s[:1] == ["view"] and len(s) == 5 and _index(s[1], n_outs) and
                all(isinstance(v, list) and all(_index(x, 1 << 62) for x in v) for v in s[2:4])
                and _index(s[4], 1 << 62))

    inputs, outputs = data.get("inputs"), data.get("outputs", {}).get("leaves")
    if (not isinstance(inputs, list) or len(inputs) != n_placeholders or
            not all(isinstance(s, list) and ok_in(s) for s in inputs)):
        raise CacheRejectedError("entry's input map does not fit the graph and the module")
    if not isinstance(outputs, list) or not all(isinstance(s, list) and ok_out(s)
                                                for s in outputs):
        raise CacheRejectedError("entry's output map does not fit the graph")
    if not isinstance(static, list) or not all(_index(i, n_placeholders) for i in static):
        raise CacheRejectedError("entry's static input indices are out of range")
    return inputs, outputs


def _index(v, n: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n

