"""The reference GE executor: serialized ModelDef -> generated straight-line Python -> exec.

``load`` parses the bytes back into a ``ModelDef`` (so the wire format is what runs), builds one
kernel per op with :mod:`.kernels` (attributes and Const-fed index inputs baked in at load
time), and generates one Python function with one line per GE op::

    def ge_graph(inputs):
        v_arg0 = inputs[0]
        v_mm = k_mm(v_arg0, c_weight)
        del v_arg0
        ...
        return [v_add]

Control edges carry no data but order: ops run in graph order (the FX order the converter
emitted; collectives keep the traced order on every rank) moved only where a data or control
edge (``"<op>:-1"``) demands it (:func:`schedule`); ``NetOutput`` runs last. Under
``TORCHAIR_DIST_CPU_STREAM_ORDER`` other than ``program`` each stream (``_user_stream_label``)
keeps that order and the streams are interleaved early, late or at random where the edges allow.

Asynchronous kernels (the collectives, ``kernels.ASYNC``) are issued in that order and finished
(``v = p_op(); del p_op``) just before the first op that reads one of their outputs or has a
control edge from them; every pending one is finished before an op that writes an input in
place (``kernels.WRITES_INPUT``) and before the graph returns.
"""
from __future__ import annotations

import heapq
import keyword
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ...backends.ge.dtypes import torch_dtype
from ...backends.ge.proto import ModelDef
from ...base.envvars import env_flag
from ...platform.interfaces import GeRuntime
from ...base.util import without_function_modes
from ..concurrency import StreamOrder, reorder, stream_order
from . import (kernels_conv, kernels_core, kernels_dynamic, kernels_fft, kernels_grad,  # noqa: F401
               kernels_hcom, kernels_shape)  # (fill KERNELS)
from .kernels import ASYNC, KERNELS, WRITES_INPUT
from .opspec import GeRuntimeError, decode_tensor, op_spec


def _ident(name: str, used: Dict[str, int]) -> str:
    base = re.sub(r"\W", "_", name)
    if not base or base[0].isdigit() or keyword.iskeyword(base):
        base = f"_{base}"
    n = used.get(base, 0)
    used[base] = n + 1
    return base if n == 0 else f"{base}__{n}"


class ReferenceRuntime(GeRuntime):
    """Runs GE graphs with torch kernels on the current device (CPU or GPU)."""

    name = "reference"

    def __init__(self, device: "torch.device | str | None" = None, overlap: bool = True,
                 shm: bool = False, check: Optional[bool] = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.overlap = overlap
        self.shm = shm
        # check every kernel's output dtype against the graph's declared one (a kernel that
        # follows torch's promotion instead of the GE op's rule); on with GE validation
        self.check = env_flag("TORCHAIR_DIST_GE_VALIDATE") if check is None else check
        self.code = ""
        self.model = None
        self._fn = None

    def load(self, model_bytes: bytes) -> None:
        model = ModelDef()
        model.ParseFromString(model_bytes)
        if not model.graph:
            raise GeRuntimeError("the GE model has no graph")
        self.model = model
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            self.code, scope = generate(model, self.device, self.overlap, self.shm, self.check)
        exec(compile(self.code, f"<ge_graph {model.graph[0].name}>", "exec"), scope)
        self._fn = scope["ge_graph"]

    def run(self, inputs: Sequence[Any]) -> List[Any]:
        if self._fn is None:
            raise GeRuntimeError("run() called before load()")
        if torch._C._is_torch_function_mode_enabled():  # the graph already holds what it did
            return without_function_modes(self._fn, inputs)
        return self._fn(inputs)


_LABEL = "_user_stream_label"


def _stream(op) -> str:
    """The stream an op is issued on ("" = main; also Data/Const, which are on none)."""
    return op.attr[_LABEL].s.decode() if _LABEL in op.attr else ""


def schedule(graph, order: Optional[StreamOrder] = None) -> List[Any]:
    """The ops of ``graph`` in an order honouring every data and control edge: the graph order
    where it already does (a stable topological sort), ``NetOutput`` last.

    ``order`` (default: ``TORCHAIR_DIST_CPU_STREAM_ORDER``) other than ``program``: the ops of
    each stream (``_user_stream_label``) also keep their graph order, and the streams are
    interleaved as the order says (:mod:`..concurrency`); data and control edges are the only
    orderings across streams (GE orders every data edge)."""
    ops = list(graph.op)
    order = stream_order() if order is None else order
    index = {op.name: i for i, op in enumerate(ops)}
    waits = [0] * len(ops)
    users: List[List[int]] = [[] for _ in ops]
    streams = [_stream(op) for op in ops]
    for i, op in enumerate(ops):
        srcs = set()
        for inp in op.input:
            src = inp.rpartition(":")[0]
            if src not in index:
                raise GeRuntimeError(f"{op.type} {op.name!r}: input {inp!r} names no op")
            srcs.add(index[src])
        if op.type == "NetOutput":
            srcs.update(j for j in range(len(ops)) if j != i)
        srcs.discard(i)
        waits[i] = len(srcs)
        for j in srcs:
            users[j].append(i)
    if order.reorders:
        out = _interleave(ops, streams, waits, users, order)
    else:
        out = _stable(ops, waits, users)
    if len(out) != len(ops):
        stuck = sorted(ops[i].name for i, n in enumerate(waits) if n)
        raise GeRuntimeError(f"the data/control edges of GE graph {graph.name!r} form a cycle "
                             f"through {stuck[:8]}")
    return out


def _interleave(ops, streams, waits, users, order: StreamOrder) -> List[Any]:
    """Each stream's ops in the order the stable sort gives them, the streams interleaved by
    ``order`` where the edges allow."""
    index = {op.name: i for i, op in enumerate(ops)}
    stable = _stable(ops, list(waits), [list(u) for u in users])
    if len(stable) != len(ops):
        return stable  # a cycle: reported by the caller
    last_on: Dict[str, int] = {}
    for op in stable:
        i = index[op.name]
        if op.type in ("Data", "RefData", "Const", "NetOutput"):
            continue
        prev = last_on.get(streams[i])
        if prev is not None and i not in users[prev]:
            users[prev].append(i)
            waits[i] += 1
        last_on[streams[i]] = i
    return [ops[i] for i in reorder(streams, waits, users, order)]


def _stable(ops, waits, users) -> List[Any]:
    ready = [i for i, n in enumerate(waits) if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(ops[i])
        for u in users[i]:
            waits[u] -= 1
            if waits[u] == 0:
                heapq.heappush(ready, u)
    return out


# Shape-only ops that may read a pending collective's output without finishing it: they are
# folded into the collective's ``done`` (all_to_all_v's decomposition reshapes right after its
# HcomAllToAllV), so the wait still lands at the first op that computes with the result.
_FOLDABLE = frozenset({"Reshape", "Identity", "Squeeze", "Unsqueeze"})


class _Pending:
    """The asynchronous ops issued and not finished yet: op name -> (the variables of its
    outputs, the variable holding its ``done``)."""

    def __init__(self, order: Sequence[Any]) -> None:
        self.ops: Dict[str, Tuple[List[str], str]] = {}
        self.folded_into: Dict[str, str] = {}  # a folded pending op -> the op that holds it
        self.reads: Dict[str, int] = {}  # op name -> how many data inputs read its outputs
        for op in order:
            for inp in op.input:
                if not inp.endswith(":-1"):
                    src = inp.rpartition(":")[0]
                    self.reads[src] = self.reads.get(src, 0) + 1

    def issue(self, op, ident: str, outs: List[str], call: str) -> str:
        self.ops[op.name] = (outs, f"p_{ident}")
        return f"p_{ident} = {call}"

    def fold(self, op, ident: str, args: List[str], outs: List[str]) -> Optional[str]:
        """The line that makes ``op`` part of a pending op's ``done``, or None where it cannot
        be: ``op`` is shape-only with one output, the only reader of a pending op with one
        output, which is ``op``'s first input; its other inputs are Consts."""
        if op.type not in _FOLDABLE or len(outs) != 1 or not op.input:
            return None
        src = op.input[0].rpartition(":")[0]
        pending = self.ops.get(src)
        if (pending is None or len(pending[0]) != 1 or self.reads.get(src) != 1
                or any(not a.startswith("c_") for a in args[1:])
                or any(i.endswith(":-1") for i in op.input)):
            return None
        done = self.ops.pop(src)[1]
        self.ops[op.name] = (outs, f"p_{ident}")
        self.folded_into[src] = op.name  # a control edge from ``src`` still finds it
        return (f"p_{ident} = lambda _p={done}: k_{ident}({', '.join(['_p()'] + args[1:])}); "
                f"del {done}")

    @staticmethod
    def _line(outs: List[str], done: str) -> str:
        target = "" if not outs else (f"{outs[0]} = " if len(outs) == 1
                                      else f"{', '.join(outs)}, = ")
        return f"{target}{done}(); del {done}"

    def finish(self, op) -> List[str]:
        """The lines finishing the pending ops ``op`` reads (data or control edge)."""
        srcs = dict.fromkeys(self._holder(inp.rpartition(":")[0]) for inp in op.input)
        return [self._line(*self.ops.pop(src)) for src in srcs if src in self.ops]

    def _holder(self, name: str) -> str:
        while name in self.folded_into:
            name = self.folded_into[name]
        return name

    def finish_all(self) -> List[str]:
        lines = [self._line(*entry) for entry in self.ops.values()]
        self.ops.clear()
        return lines


def _declared(ge_type: int) -> Optional[torch.dtype]:
    try:
        return torch_dtype(ge_type)
    except Exception:  # DT_UNDEFINED and friends: nothing to compare
        return None


def as_ge_returns(outs: List[Any], inputs: Sequence[Any]) -> List[Any]:
    """GE hands back every output as a dense row-major tensor in memory of its own. The torch
    kernels here may return a view (of an input: its later mutation would show through the
    output) or a permuted layout; such an output is copied."""
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            continue
        if not out.is_contiguous():
            outs[k] = out.contiguous()
        elif out._is_view() and _shares_an_input(out, inputs):
            outs[k] = out.clone()
    return outs


def _fresh(value: Any) -> Any:
    """A graph input returned as an output: a copy (an effect token fed as None stays None)."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _shares_an_input(out: torch.Tensor, inputs: Sequence[Any]) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(i, torch.Tensor) and i.untyped_storage().data_ptr() == ptr
               for i in inputs)


def _check_dtypes(what, *values) -> None:
    """Raise when a kernel returned another dtype than the op's output desc declares."""
    op_type, name, want = what
    for i, (value, dtype) in enumerate(zip(values, want)):
        if dtype is not None and isinstance(value, torch.Tensor) and value.dtype != dtype:
            raise GeRuntimeError(
                f"GE op {op_type} {name!r} output {i}: the reference kernel returned "
                f"{value.dtype}, the graph declares {dtype} (a kernel or converter that does "
                "not follow the op's dtype rule)")


def generate(model: ModelDef, device: torch.device = torch.device("cpu"), overlap: bool = True,
             shm: bool = False, check: bool = False):
    """(source code, globals) of the straight-line function for ``model.graph[0]``.

    ``overlap=False``: every asynchronous op is finished right after it is issued. ``shm``:
    the Hcom kernels exchange CPU tensors through shared memory where they can
    (``distributed_config.cpu_shm_collectives``).

    Const values live on ``device`` (the device of the graph inputs); kernels also see a CPU
    copy of every Const to bake index inputs (shapes, axes, perms) in at load time. ``check``:
    after every synchronous op, its outputs' dtypes are compared with the declared ones."""
    graph = model.graph[0]
    used: Dict[str, int] = {}
    scope: Dict[str, Any] = {"torch": torch}
    consts: Dict[str, torch.Tensor] = {}
    var: Dict[str, str] = {}   # "op:i" -> Python variable
    lines: List[str] = []
    state: Dict[str, Any] = {"device": device, "shm": shm}  # shared by the graph's kernels
    last_use: Dict[str, int] = {}
    order = schedule(graph)
    for pos, op in enumerate(order):
        for inp in op.input:
            if not inp.endswith(":-1"):
                last_use[inp] = pos
    pending = _Pending(order)
    for pos, op in enumerate(order):
        ident = _ident(op.name, used)
        if op.type == "Const":
            value = decode_tensor(op.attr["value"].t)
            consts[op.name] = value
            scope[f"c_{ident}"] = value if device.type == "cpu" else value.to(device)
            var[f"{op.name}:0"] = f"c_{ident}"
            continue
        if op.type in ("Data", "RefData"):  # RefData: the caller's buffer, updated in place
            var[f"{op.name}:0"] = f"v_{ident}"
            lines.append(f"v_{ident} = inputs[{op.attr['index'].i}]")
            continue
        args = [var[i] for i in op.input if not i.endswith(":-1")]
        if op.type == "NetOutput":
            lines.extend(pending.finish_all())
            if "pending" in state:
                scope["_finish"] = state["finish"]
                lines.append("_finish()")
            scope["_as_ge_returns"] = as_ge_returns
            data_vars = {var[f"{o.name}:0"] for o in order if o.type in ("Data", "RefData")}
            scope["_fresh"] = _fresh
            outs = [f"_fresh({a})" if a in data_vars else a for a in args]
            lines.append(f"return _as_ge_returns([{', '.join(outs)}], inputs)")
            break
        factory = KERNELS.get(op.type)
        if factory is None:
            raise GeRuntimeError(f"the reference executor has no kernel for GE op {op.type} "
                                 f"({op.name!r})")
        try:
            scope[f"k_{ident}"] = factory(op_spec(op, consts, state))
        except GeRuntimeError:
            raise
        except Exception as e:
            raise GeRuntimeError(f"cannot load {op.type} {op.name!r}: {e}") from e
        outs = [f"v_{ident}_{i}" for i in range(len(op.output_desc))]
        for i, name in enumerate(outs):
            var[f"{op.name}:{i}"] = name
        call = f"k_{ident}({', '.join(args)})"
        folded = pending.fold(op, ident, args, outs) if overlap else None
        if folded is not None:
            lines.append(folded)
            continue  # nothing of this op is live before its ``done`` runs
        lines.extend(pending.finish_all() if op.type in WRITES_INPUT else pending.finish(op))
        if op.type in ASYNC:
            lines.append(pending.issue(op, ident, outs, call))
            if not overlap:
                lines.extend(pending.finish_all())
        elif not outs:
            lines.append(call)
        elif len(outs) == 1:
            lines.append(f"{outs[0]} = {call}")
        else:
            lines.append(f"{', '.join(outs)}, = {call}")
        if check and outs and op.type not in ASYNC:
            scope["_check"] = _check_dtypes
            want = tuple(_declared(d.dtype) for d in op.output_desc)
            scope[f"w_{ident}"] = (op.type, op.name, want)
            lines.append(f"_check(w_{ident}, {', '.join(outs)})")
        dead = sorted({var[i] for i in op.input if last_use.get(i) == pos and var[i].startswith("v_")})
        if dead:
            lines.append(f"del {', '.join(dead)}")
    else:
        lines.extend(pending.finish_all())
        lines.append("return []")
    body = "\n".join(f"    {line}" for line in lines)
    return f"def ge_graph(inputs):\n{body}\n", scope
