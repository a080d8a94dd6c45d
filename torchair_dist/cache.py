"""``cache_compile``: a persistent, per-rank compile cache that never runs code it did not write.

Usage (TorchAir's ``torchair.inference.cache_compile`` shape)::

    fast = torchair_dist.cache_compile(model.forward, config=cfg, cache_dir="/var/cache/m")
    out = fast(input_ids)      # 1st process: compile + save; later processes: load, no compile

Design
------
What is stored is the **AOT graph after the common and mode passes** — exactly what the compiler
hands a backend (``GraphContext.gm``) — as *JSON data*, plus how to find its inputs and how to
rebuild the caller's result:

* graph: nodes ``{op, name, target, args, kwargs}``; a call target is an operator *name*
  (``"aten::mm.default"``) that the loader looks up in ``torch.ops`` only (name grammar checked,
  result must be an ``OpOverload``/HOP) or ``operator.getitem``; arguments are JSON scalars, node
  references, lists/tuples/dicts and typed tags (dtype, device, layout, memory_format, float
  bits, op). Lifted constant tensors are raw bytes + dtype + shape. No pickle, no marshal, no
  stored Python source: the only code that runs is what the library generates from the graph
  (ACL: FX's code generator; GE: the converters).
* inputs: one entry per graph placeholder: a parameter/buffer by qualified name (the DTensor's
  local shard when it is one), a leaf of the call's arguments, or ``none`` for an unused
  non-tensor placeholder (DTensor's DeviceMesh objects).
* outputs: the caller-visible pytree spec (``treespec_dumps``: types resolved only through
  pytree's registry) and per leaf a graph output, a view of one, an argument, or a constant.

Load = read + verify + ``FakeTensorProp`` (re-creates ``meta['val']``) + the mode's backend
``compile_graph`` + the cross-rank consistency guard. Dynamo, AOT autograd, decompositions and
the graph passes are skipped; that is the warm-start saving.

Key and layout (after TorchAir)::

    {cache_dir | $TORCHAIR_CACHE_HOME | ./.torchair_cache}
      /{cls}_static_{aclgraphcache|gecache}_{md5}        md5: model code (source files of
                                                          the module classes + package
                                                          versions), str(module), state
                                                          shapes/placements,
                                                          every config option, custom decomps,
                                                          torch/torchair_dist/format versions
        /world{W}global_rank{r}[_tp_rank{t}][_pp_rank{p}]/{func}/
           index.json                                     {signature: {file, sha256, versions}}
           entry-{signature}.json                         one input signature (shapes, dtypes)

Safety (threat model: other local users, torn writes, bit rot, stale files; a writer with our
own uid can forge anything and is out of scope): every directory on the way must be ours (``lstat``: no symlink, our uid, not writable
by group/others); files are opened with ``O_NOFOLLOW`` and ``fstat``-checked (our uid, mode
exactly 0600); the entry's sha256 must equal its index record; versions must match. Any failure
raises :class:`~torchair_dist.errors.CacheRejectedError` internally, is logged as a warning and
the function is recompiled (and the entry rewritten when the directory is ours) — a rejected
entry is never executed. The entry's input/output maps are range-checked against the rebuilt
graph and the module's own parameter names; stored node names only link nodes (FX names the
rebuilt ones). Versions are part of the key (a version change is a plain miss); the in-entry
version check is a second line. Writes go to a ``mkstemp`` file (0600) that is fsync'ed and
``os.replace``-d into place; the index read-modify-write holds ``flock(LOCK_EX)`` on
``.lock`` and readers hold ``LOCK_SH``, so concurrent ranks/processes never see torn files.

Limits: static shapes only (``dynamic=False``; a new input signature compiles and adds an
entry); inference only (runs under ``torch.no_grad()``); the function must compile to one graph
(``fullgraph``) whose inputs are the module's parameters/buffers and the call's arguments, and
whose Python side effects (other than tensor writes inside the graph) do not matter.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import inspect
import json
import logging
import operator
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

from .errors import CacheRejectedError, ConfigError

log = logging.getLogger("torchair_dist")

FORMAT_VERSION = 1
CACHE_HOME_ENV = "TORCHAIR_CACHE_HOME"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_OP_RE = re.compile(rf"^({_NAME})::({_NAME})(?:\.({_NAME}))?$")
_PY_TARGETS = {"_operator.getitem": operator.getitem}


class NotCacheableError(Exception):
    """The compiled function cannot be stored (it still runs; nothing is saved)."""


# ================================================================= safe filesystem access
def _check_dir(path: str) -> None:
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise CacheRejectedError(f"{path} is not a plain directory (symlinks are refused)")
    if st.st_uid != os.geteuid():
        raise CacheRejectedError(f"{path} is owned by uid {st.st_uid}, not by the current user "
                                 f"(uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise CacheRejectedError(f"{path} is writable by group/others (mode "
                                 f"{st.st_mode & 0o777:o}); chmod go-w it")


def _ensure_dirs(root: str, parts: List[str]) -> str:
    """Create ``root/parts...`` (0700) and check every level; returns the full path."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    _check_dir(root)
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        _check_dir(path)
    return path


def read_checked(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file of ours with mode exactly 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise CacheRejectedError(f"cannot open {path} ({exc.strerror}; symlinks are refused)")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid():
            raise CacheRejectedError(f"{path} is owned by uid {st.st_uid}, not by the current "
                                     f"user (uid {os.geteuid()})")
        if (st.st_mode & 0o7777) != 0o600:
            raise CacheRejectedError(f"{path} has mode {st.st_mode & 0o7777:o}; cache files "
                                     f"must be 0600 (owner-only)")
        return f.read()


def write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(directory: str, exclusive: bool):
    fd = os.open(os.path.join(directory, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


# ================================================================= graph <-> JSON data
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
    raise CacheRejectedError(f"unknown graph argument kind {kind!r}")


def _tensor_data(t: torch.Tensor) -> Dict:
    t = t.detach().contiguous()
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


def graph_to_data(gm: torch.fx.GraphModule) -> Dict:
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
        nodes.append({"op": n.op, "name": n.name, "target": target,
                      "args": _enc(tuple(n.args)), "kwargs": _enc(dict(n.kwargs))})
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


# ================================================================= keys and signatures
def _versions() -> Dict[str, Any]:
    from . import __version__

    return {"format": FORMAT_VERSION, "torch": torch.__version__, "torchair_dist": __version__,
            "python": "%d.%d" % sys.version_info[:2]}


def _state_tensors(module: torch.nn.Module):
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _code_identity(cls) -> str:
    """The source file of ``cls`` (its bytes: module-level helpers count too) and the version
    of its top-level package."""
    package = sys.modules.get(cls.__module__.split(".")[0])
    version = getattr(package, "__version__", "")
    try:
        with open(inspect.getsourcefile(cls) or "", "rb") as f:
            digest = hashlib.md5(f.read()).hexdigest()
    except (OSError, TypeError):
        digest = "no-source"
    return f"{cls.__module__}.{cls.__qualname__}:{digest}:{version}"


def model_key(module: torch.nn.Module, func_name: str, config, decompositions: Dict) -> str:
    """md5 of everything a compiled graph depends on besides the inputs' shapes: versions,
    the source files of every submodule's class (and their packages' versions), the module's
    structure and state shapes/placements, every config option and the decompositions."""
    h = hashlib.md5()
    parts = [json.dumps(_versions(), sort_keys=True), func_name, str(module)]
    parts += sorted({_code_identity(type(m)) for m in module.modules()})
    for name, t in _state_tensors(module):
        parts.append(f"{name}:{type(t).__name__}:{tuple(t.shape)}:{t.dtype}:"
                     f"{getattr(t, 'placements', '')}")
    parts += [f"{k}={v!r}" for k, v in sorted(config.as_dict().items())]
    for op, fn in sorted(decompositions.items(), key=lambda kv: str(kv[0])):
        code = getattr(fn, "__code__", None)
        parts.append(f"{op}:{getattr(fn, '__qualname__', fn)}:"
                     f"{hashlib.md5(code.co_code).hexdigest() if code else ''}")
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def call_key(args: tuple, kwargs: dict) -> tuple:
    """A hashable description of a call's inputs (what a static graph depends on)."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    key: List[Any] = [spec]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            key.append((type(x), x.dtype, tuple(x.shape), x.stride(), x.device,
                        str(getattr(x, "placements", ""))))
        elif x is None or isinstance(x, (bool, int, float, str)):
            key.append((type(x), x))
        else:
            key.append((type(x),))  # Dynamo guarded it; we cannot
    return tuple(key)


def input_signature(args: tuple, kwargs: dict, key: Optional[tuple] = None) -> str:
    """The stable (cross-process) name of :func:`call_key`."""
    key = call_key(args, kwargs) if key is None else key
    desc = [str(key[0])] + [f"{k[0].__name__}:{k[1:]!r}" for k in key[1:]]
    return hashlib.sha256("\n".join(desc).encode()).hexdigest()[:32]


# ================================================================= cold path: record a compile
class _Record:
    """What the cache backend saw: the graph handed to the backend and its first call."""

    def __init__(self):
        self.dynamo_graphs = 0
        self.graphs: List[Dict] = []
        self.first_args: Optional[List[Any]] = None
        self.first_outputs: Optional[List[Any]] = None


def _cache_backend(config, decompositions: Dict, record: _Record):
    """Our backend entry (as ``backend._npu_backend``) with a compiler that records."""
    from .backend import compile_with_aot
    from .collectives import p2p
    from .compiler import NpuFxCompiler
    from .streams.rewrite import rewrite_streams

    class RecordingCompiler(NpuFxCompiler):
        def __call__(self, gm, example_inputs, is_inference=True):
            runner = super().__call__(gm, example_inputs, is_inference)
            ctx = self.compiled[-1]
            tc = torch._guards.TracingContext.try_get()
            meta = getattr(tc, "fw_metadata", None)
            entry = {"is_inference": is_inference, "static": list(ctx.static_input_indices),
                     "used": [bool(n.users) for n in ctx.gm.graph.nodes
                              if n.op == "placeholder"]}
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

    def backend(gm, example_inputs, **kwargs):
        record.dynamo_graphs += 1
        cfg = config.copy()
        gm = p2p.preprocess_send_recv(gm, cfg)
        if cfg.is_acl_mode:
            gm = rewrite_streams(gm, cfg)
        return compile_with_aot(gm, example_inputs, RecordingCompiler(cfg), decompositions)

    return backend


def _check_mutations(meta) -> None:
    from torch._functorch._aot_autograd.schemas import MutationType

    for i, info in enumerate(getattr(meta, "input_info", None) or []):
        if info.mutation_type == MutationType.MUTATED_OUT_GRAPH or info.mutates_metadata:
            raise NotCacheableError(f"graph input {i} is mutated outside the graph")


def _map_inputs(record: _Record, module, args, kwargs, used: List[bool]) -> List[List]:
    by_id: Dict[int, List] = {}
    for name, t in _state_tensors(module):
        local = getattr(t, "_local_tensor", None)
        by_id.setdefault(id(t), ["state", name, False])
        if local is not None:
            by_id.setdefault(id(local), ["state", name, True])
    for k, leaf in enumerate(pytree.tree_leaves((args, kwargs))):
        by_id.setdefault(id(leaf), ["arg", k])
    specs = []
    for i, a in enumerate(record.first_args):
        if id(a) in by_id:
            specs.append(by_id[id(a)])
        elif not isinstance(a, torch.Tensor) and not used[i]:
            specs.append(["none"])
        else:
            raise NotCacheableError(f"graph input {i} ({type(a).__name__}) is neither a "
                                    f"parameter/buffer of the module nor a call argument")
    return specs


def _map_outputs(record: _Record, result, args, kwargs) -> Dict:
    leaves, spec = pytree.tree_flatten(result)
    outs = record.first_outputs
    arg_ids = {id(x): k for k, x in enumerate(pytree.tree_leaves((args, kwargs)))}
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


# ================================================================= warm path: a loaded entry
class LoadedEntry:
    """A graph rebuilt from a verified entry, compiled by the mode's backend; callable like the
    original function."""

    def __init__(self, data: Dict, module, config, args, kwargs):
        from .backends.context import GraphContext, current_rank_and_world
        from .collectives import consistency
        from .compiler import backend_for_mode
        from .passes.graph_info import mutated_input_indices
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        self.module = module
        gm = graph_from_data(data["graph"])
        self.inputs, self.out_leaves = _checked_io(data, module, args, kwargs, gm)
        self.getters = [self._state_getter(s[1], s[2]) if s[0] == "state" else None
                        for s in self.inputs]
        self.out_spec = pytree.treespec_loads(data["outputs"]["spec"])
        flat = self._flat_inputs(args, kwargs)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in flat]
        with torch.no_grad():
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake)
        rank, world = current_rank_and_world()
        ctx = GraphContext(gm=gm, example_inputs=fake, config=config,
                           static_input_indices=data["static"],
                           mutated_input_indices=mutated_input_indices(gm),
                           graph_name=f"cached_{data['signature'][:8]}", rank=rank,
                           world_size=world, is_inference=True)
        runner = backend_for_mode(config.mode.raw)(ctx)
        self.runner = consistency.guard_first_run(runner, ctx)
        self.boxed = getattr(self.runner, "_boxed_call", False)

    def _state_getter(self, name: str, local: bool):
        owner_name, _, attr = name.rpartition(".")
        owner = self.module.get_submodule(owner_name) if owner_name else self.module
        if local:
            return lambda: getattr(owner, attr)._local_tensor
        return lambda: getattr(owner, attr)

    def _flat_inputs(self, args, kwargs) -> List[Any]:
        leaves = pytree.tree_leaves((args, kwargs))
        flat = []
        for spec, get in zip(self.inputs, self.getters):
            flat.append(get() if get is not None else
                        leaves[spec[1]] if spec[0] == "arg" else None)
        return flat

    def __call__(self, args, kwargs):
        flat = self._flat_inputs(args, kwargs)
        with torch.no_grad():
            outs = self.runner(flat) if self.boxed else self.runner(*flat)
        leaves = pytree.tree_leaves((args, kwargs))
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


def _checked_io(data: Dict, module, args, kwargs, gm) -> Tuple[List, List]:
    """The entry's input and output maps, refused unless every reference is in range and
    every state name is a parameter/buffer of ``module``."""
    n_args = len(pytree.tree_leaves((args, kwargs)))
    state = {name for name, _ in _state_tensors(module)}
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    n_outs = len(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else -1
    static = data.get("static")

    def ok_in(s):
        return (s == ["none"] or (len(s) == 2 and s[0] == "arg" and _index(s[1], n_args)) or
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


# ================================================================= the public wrapper
class CacheCompiledFunction:
    """Callable returned by :func:`cache_compile`; see the module docstring."""

    def __init__(self, module, func_name, config, decompositions, cache_dir, rank_dir):
        self.module, self.func_name = module, func_name
        self.config, self.decompositions = config, decompositions
        self.cache_root = cache_dir
        self.rank_dir = rank_dir
        self.loaded: Dict[tuple, Any] = {}   # call_key -> LoadedEntry | compiled function
        self.last_source: Optional[str] = None  # "cache" | "compiled" | "memory" (tests)
        self.rejections: List[CacheRejectedError] = []  # every refused entry, in order
        self._key: Optional[str] = None

    # -- paths ---------------------------------------------------------------------------
    def directory(self) -> str:
        if self._key is None:
            self._key = model_key(self.module, self.func_name, self.config,
                                  self.decompositions)
        kind = "aclgraphcache" if self.config.is_acl_mode else "gecache"
        return os.path.join(self.cache_root, f"{type(self.module).__name__}_static_{kind}_"
                            f"{self._key}", self.rank_dir, self.func_name)

    def _parts(self) -> List[str]:
        rel = os.path.relpath(self.directory(), self.cache_root)
        return rel.split(os.sep)

    # -- call ----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        key = call_key(args, kwargs)
        fn = self.loaded.get(key)
        if fn is not None:
            self.last_source = "memory"
            return fn(args, kwargs)
        sig = input_signature(args, kwargs, key)
        entry = self._load(sig, args, kwargs)
        if entry is not None:
            self.loaded[key] = entry
            self.last_source = "cache"
            return entry(args, kwargs)
        return self._compile_and_save(key, sig, args, kwargs)

    # -- load ----------------------------------------------------------------------------
    def _load(self, sig: str, args, kwargs) -> Optional[LoadedEntry]:
        directory = self.directory()
        if not os.path.exists(os.path.join(directory, "index.json")):
            return None
        try:
            data = self.read_entry(sig)
            if data is None:
                return None
            return LoadedEntry(data, self.module, self.config, args, kwargs)
        except CacheRejectedError as exc:
            rejected = exc
        except Exception as exc:  # noqa: BLE001 - a broken entry must never stop the model
            rejected = CacheRejectedError(f"entry does not rebuild: {type(exc).__name__}: {exc}")
        self.rejections.append(rejected)
        log.warning("torchair_dist cache: rejected entry %s in %s: %s; recompiling", sig,
                    directory, rejected)
        return None

    def read_entry(self, sig: str) -> Optional[Dict]:
        """The verified entry for ``sig``; None if absent; CacheRejectedError if unsafe."""
        directory = self.directory()
        path = self.cache_root
        _check_dir(path)
        for part in self._parts():
            path = os.path.join(path, part)
            _check_dir(path)
        with locked(directory, exclusive=False):
            index = _parse(read_checked(os.path.join(directory, "index.json")), "index")
            record = index.get("entries", {}).get(sig)
            if record is None:
                return None
            if not re.fullmatch(r"entry-[0-9a-f]{32}\.json", str(record.get("file"))):
                raise CacheRejectedError(f"index names a malformed file {record.get('file')!r}")
            raw = read_checked(os.path.join(directory, record["file"]))
        digest = hashlib.sha256(raw).hexdigest()
        if digest != record.get("sha256"):
            raise CacheRejectedError(f"{record['file']}: content hash {digest[:12]}... does not "
                                     f"match the index ({str(record.get('sha256'))[:12]}...): "
                                     f"corrupt or tampered")
        data = _parse(raw, record["file"])
        if data.get("versions") != _versions():
            raise CacheRejectedError(f"stale entry: written by {data.get('versions')}, this "
                                     f"process is {_versions()}")
        if data.get("signature") != sig:
            raise CacheRejectedError("entry signature does not match its index record")
        return data

    # -- compile + save -------------------------------------------------------------------
    def _compile_and_save(self, key: tuple, sig: str, args, kwargs):
        record = _Record()
        backend = _cache_backend(self.config, self.decompositions, record)
        method = getattr(self.module, self.func_name)
        compiled = torch.compile(method, backend=backend, fullgraph=True, dynamic=False)
        with torch.no_grad():
            result = compiled(*args, **kwargs)
        self.loaded[key] = lambda a, k: _no_grad_call(compiled, a, k)
        self.last_source = "compiled"
        try:
            data = self._entry_data(sig, record, result, args, kwargs)
            self.write_entry(sig, data)
        except NotCacheableError as exc:
            log.warning("torchair_dist cache: %s.%s is not cacheable (%s); it runs compiled "
                        "but is not saved", type(self.module).__name__, self.func_name, exc)
        except (CacheRejectedError, OSError) as exc:
            log.warning("torchair_dist cache: not saved to %s: %s", self.directory(), exc)
        finally:
            record.first_args, record.first_outputs = [], []  # drop the references
        return result

    def _entry_data(self, sig, record: _Record, result, args, kwargs) -> Dict:
        if record.dynamo_graphs != 1 or len(record.graphs) != 1:
            raise NotCacheableError(f"{record.dynamo_graphs} Dynamo graphs / "
                                    f"{len(record.graphs)} compiled graphs (need exactly 1)")
        g = record.graphs[0]
        if "not_cacheable" in g:
            raise NotCacheableError(g["not_cacheable"])
        if not g["is_inference"]:
            raise NotCacheableError("not an inference graph")
        if record.first_args is None:
            raise NotCacheableError("the compiled graph did not run")
        return {"versions": _versions(), "signature": sig, "graph": g["graph"],
                "static": g["static"], "created": time.time(),
                "inputs": _map_inputs(record, self.module, args, kwargs, g["used"]),
                "outputs": _map_outputs(record, result, args, kwargs)}

    def write_entry(self, sig: str, data: Dict) -> None:
        directory = _ensure_dirs(self.cache_root, self._parts())
        raw = json.dumps(data, sort_keys=True).encode()
        name = f"entry-{sig}.json"
        with locked(directory, exclusive=True):
            write_atomic(os.path.join(directory, name), raw)
            index_path = os.path.join(directory, "index.json")
            try:
                index = _parse(read_checked(index_path), "index")
            except (CacheRejectedError, OSError):
                index = {}  # absent, or refused: rewritten from scratch (it is our directory)
            entries = index.get("entries") if isinstance(index.get("entries"), dict) else {}
            entries[sig] = {"file": name, "sha256": hashlib.sha256(raw).hexdigest(),
                            "versions": _versions()}
            write_atomic(index_path, json.dumps({"format": FORMAT_VERSION,
                                                 "entries": entries}, sort_keys=True).encode())


def _no_grad_call(fn, args, kwargs):
    with torch.no_grad():
        return fn(*args, **kwargs)


def _parse(raw: bytes, what: str) -> Dict:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CacheRejectedError(f"{what} is not valid JSON (corrupt): {exc}") from None
    if not isinstance(data, dict):
        raise CacheRejectedError(f"{what} is not a JSON object (corrupt)")
    return data


def cache_compile(method, *, config=None, backend=None, dynamic: bool = False,
                  cache_dir: Optional[str] = None, global_rank: Optional[int] = None,
                  tp_rank: Optional[int] = None, pp_rank: Optional[int] = None,
                  custom_decompositions: Optional[Dict] = None,
                  ge_cache: bool = False) -> CacheCompiledFunction:
    """Compile ``method`` (a bound method of an ``nn.Module``, or a module: its ``forward``)
    with our backend, caching what this rank compiled under ``cache_dir``.

    The first call in a process loads a verified entry for the call's input signature, or
    compiles (``fullgraph=True``, static shapes) and saves one. See the module docstring for
    the key, the layout and the safety rules. ``backend``, if given, must be
    ``get_npu_backend(compiler_config=config)``'s result for the same config. ``ge_cache`` is
    accepted for TorchAir compatibility and ignored (with a warning) in ACL modes.
    """
    from .backend import get_npu_backend
    from .configs import CompilerConfig

    if isinstance(method, torch.nn.Module):
        module, func_name = method, "forward"
    elif inspect.ismethod(method) and isinstance(method.__self__, torch.nn.Module):
        module, func_name = method.__self__, method.__func__.__name__
    else:
        raise ConfigError(f"cache_compile needs a method of a torch.nn.Module (or a module), "
                          f"got {type(method).__name__}")
    if dynamic:
        raise ConfigError("cache_compile(dynamic=True) is not supported: entries are per static "
                          "input signature (pass dynamic=False)")
    if backend is not None:
        bound = getattr(backend, "keywords", {}).get("compiler_config")
        if bound is None or (config is not None and bound != config):
            raise ConfigError("cache_compile: backend must be get_npu_backend(compiler_config="
                              "config) for the same config")
        config = bound
    config = (config or CompilerConfig()).copy()
    if ge_cache and config.is_acl_mode:
        log.warning("cache_compile: ge_cache is ignored in mode %s", config.mode.raw)
    made = get_npu_backend(compiler_config=config,
                           custom_decompositions=custom_decompositions or {})
    decompositions = made.keywords["decompositions"]
    if global_rank is None:
        from .backends.context import current_rank_and_world

        global_rank, world = current_rank_and_world()
    else:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    rank_dir = f"world{world}global_rank{global_rank}"
    rank_dir += f"_tp_rank{tp_rank}" if tp_rank is not None else ""
    rank_dir += f"_pp_rank{pp_rank}" if pp_rank is not None else ""
    root = os.path.abspath(cache_dir or os.environ.get(CACHE_HOME_ENV) or ".torchair_cache")
    return CacheCompiledFunction(module, func_name, config, decompositions, root, rank_dir)
