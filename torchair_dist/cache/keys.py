"""Cache keys: the model key (everything a compiled graph depends on besides the inputs'
shapes) and the per-call input signature."""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import pathlib
import sys
import types
from typing import Any, Dict, List, Optional

import torch
import torch.utils._pytree as pytree

from .groups import describe, module_groups
from .store import FORMAT_VERSION


def _versions() -> Dict[str, Any]:
    from .. import _version

    return {"format": FORMAT_VERSION, "torch": torch.__version__,
            "torchair_dist": _version.__version__, "library": library_digest(),
            "python": "%d.%d" % sys.version_info[:2]}


# The code that shapes a stored graph (paths under the package; a folder: every .py in it):
# the passes and the pipeline that runs them, the dynamo-level rewrites, the decompositions,
# the GE converters and lowering. An entry written by other code of these is never loaded.
LIBRARY_SOURCES = ("passes", "pipeline", "streams/rewrite.py", "collectives/decompositions.py",
                   "collectives/p2p.py", "backends/ge/converters", "backends/ge/lowering.py",
                   "backends/ge/fx2ge.py")


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """sha256 of the source of :data:`LIBRARY_SOURCES` (computed once per process, on first
    use): the library's identity in the key, so a changed pass or converter with the same
    ``__version__`` never loads a graph an older one shaped."""
    root = pathlib.Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for entry in LIBRARY_SOURCES:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def _code_identity_of(code: types.CodeType, h) -> None:
    """Feed ``h`` what a code object does: its bytecode, names, constants (nested code
    objects by their own identity), never its file or line numbers."""
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_argcount,
                   code.co_kwonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(b"<code>")
            _code_identity_of(const, h)
        else:
            h.update(repr(const).encode())
        h.update(b"\0")


_PLAIN_VALUES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
                 torch.layout, torch.memory_format, enum.Enum, list, tuple, dict, set,
                 frozenset, torch.Tensor)


def _is_library(value) -> bool:
    """Whether ``value`` (a function or class) comes from the standard library or an installed
    package with a version (torch, torchair_dist, transformers ...): keyed by name and that
    version (:func:`_versions` / :func:`library_digest` cover torch and this library), not by
    walking its code."""
    module = getattr(value, "__module__", None) or ""
    top = module.split(".")[0]
    if not top or top in ("__main__", "__mp_main__"):
        return False
    if top in sys.stdlib_module_names or top == "builtins":
        return True
    return bool(getattr(sys.modules.get(top), "__version__", ""))


def global_reads(fn, fingerprint) -> List[str]:
    """``name=fingerprint`` for each global that ``fn``'s code (nested functions' included)
    reads: a module by its name, a library function or class by its qualified name and its
    package's version, anything else (the user's helper functions and constants, which the
    function's own bytecode does not show) by ``fingerprint(value)``. A helper a user pass or a
    decomposition calls is part of what it is: changing the helper changes the key."""
    code = getattr(fn, "__code__", None)
    g = getattr(fn, "__globals__", None)
    if not isinstance(code, types.CodeType) or not isinstance(g, dict):
        return []
    parts = []
    for name in sorted({n for c in _code_objects(code) for n in c.co_names if n in g}):
        value = g[name]
        if value is fn:
            text = "<itself>"
        elif isinstance(value, types.ModuleType):
            text = f"module {value.__name__}"
        elif (callable(value) or isinstance(value, type)) and _is_library(value):
            top = sys.modules.get(value.__module__.split(".")[0])
            text = (f"{value.__module__}.{getattr(value, '__qualname__', type(value).__name__)}"
                    f"@{getattr(top, '__version__', '')}")
        elif not callable(value) and not isinstance(value, _PLAIN_VALUES) and \
                _is_library(type(value)):
            # a library object (a logger, a lock, a registry): its class; its state is the
            # library's business and would make every process's key differ
            text = f"{type(value).__module__}.{type(value).__qualname__} object"
        else:
            text = fingerprint(value)
        parts.append(f"{name}={text}")
    return parts


def callable_identity(fn: Any, depth: int = 0) -> str:
    """What a callable option is, the same in every process: a function by its qualified
    name and its code (bytecode, names, constants, nested functions' code), its defaults and
    closure values and the globals it reads (:func:`global_reads`: a helper it calls by its own
    identity); a ``functools.partial`` by its function and arguments; an object with
    ``uuid()`` (inductor's ``CustomGraphPass``, as vLLM hashes its passes) by that; another
    callable object by its class's and ``__call__``'s identity. Never by address."""
    if depth > 4:
        return f"{type(fn).__module__}.{type(fn).__qualname__}"
    if isinstance(fn, functools.partial):
        return (f"partial({callable_identity(fn.func, depth + 1)},"
                f"{option_fingerprint(fn.args, depth + 1)},"
                f"{option_fingerprint(fn.keywords, depth + 1)})")
    if isinstance(fn, types.MethodType):
        return (f"method {callable_identity(fn.__func__, depth + 1)} of "
                f"{option_fingerprint(fn.__self__, depth + 1)}")
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        h = hashlib.sha256()
        _code_identity_of(code, h)
        closure = []
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                closure.append(f"{name}={option_fingerprint(cell.cell_contents, depth + 1)}")
            except ValueError:  # an empty cell
                closure.append(f"{name}=<empty>")
        defaults = option_fingerprint(getattr(fn, "__defaults__", None), depth + 1)
        kwdefaults = option_fingerprint(getattr(fn, "__kwdefaults__", None), depth + 1)
        reads = global_reads(fn, lambda v: option_fingerprint(v, depth + 1))
        return (f"function {getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}:"
                f"{h.hexdigest()}:defaults={defaults}:{kwdefaults}:closure=[{','.join(closure)}]"
                f":globals=[{','.join(reads)}]")
    uuid = getattr(fn, "uuid", None)
    if callable(uuid):
        return f"{type(fn).__module__}.{type(fn).__qualname__} uuid={uuid()!r}"
    if isinstance(fn, type) or not hasattr(type(fn), "__call__") or \
            isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        name = getattr(fn, "__qualname__", type(fn).__qualname__)
        return f"{getattr(fn, '__module__', '')}.{name}"
    call = getattr(type(fn), "__call__")
    state = option_fingerprint(dict(vars(fn)) if hasattr(fn, "__dict__") else None, depth + 1)
    return (f"{type(fn).__module__}.{type(fn).__qualname__} "
            f"call={callable_identity(call, depth + 1)} state={state}")


def option_fingerprint(value: Any, depth: int = 0) -> str:
    """A config option's value as the same text in every process: plain values by ``repr``,
    containers item by item, callables by :func:`callable_identity` (``repr`` of a function
    holds its address, which no other process shares)."""
    if isinstance(value, _SIMPLE) or isinstance(value, enum.Enum):
        return repr(value)
    if isinstance(value, (list, tuple)):
        items = [option_fingerprint(v, depth + 1) for v in value]
        return f"{type(value).__name__}[{','.join(items)}]"
    if isinstance(value, (set, frozenset)):
        return f"set[{','.join(sorted(option_fingerprint(v, depth + 1) for v in value))}]"
    if isinstance(value, dict):
        items = sorted(f"{option_fingerprint(k, depth + 1)}:{option_fingerprint(v, depth + 1)}"
                       for k, v in value.items())
        return f"dict{{{','.join(items)}}}"
    if isinstance(value, torch.Tensor):
        return f"{type(value).__name__}({value.dtype},{tuple(value.shape)})"
    if callable(value):
        return callable_identity(value, depth)
    if depth > 4 or not hasattr(value, "__dict__"):
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return f"{type(value).__qualname__}{option_fingerprint(dict(vars(value)), depth + 1)}"


def config_parts(config) -> List[str]:
    """The config's part of the model key: every option by :func:`option_fingerprint`."""
    return [f"{k}={option_fingerprint(v)}" for k, v in sorted(config.as_dict().items())]


def _state_tensors(module: torch.nn.Module):
    """Parameters, buffers, and tensors kept in plain list/tuple attributes of the module or
    its submodules (a KV cache as ``self.caches = [k, v]``), named ``sub.attr[i]``: Dynamo
    reads those as graph inputs too, and their shapes belong to the model key."""
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)
    for prefix, m in module.named_modules():
        for attr, value in vars(m).items():
            if (attr.startswith("_") or not isinstance(value, (list, tuple)) or not value
                    or not all(isinstance(t, torch.Tensor) for t in value)):
                continue
            for i, t in enumerate(value):
                yield f"{prefix + '.' if prefix else ''}{attr}[{i}]", t


def _expand_dataclasses(value):
    """``value`` with every dataclass instance pytree does not know replaced by a one-key
    dict ``{"<module.QualName>": {field: value}}``, so pytree sees its fields (and the class
    name is part of the structure)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and \
            type(value) not in pytree.SUPPORTED_NODES:
        cls = type(value)
        return {f"<{cls.__module__}.{cls.__qualname__}>": {
            f.name: _expand_dataclasses(getattr(value, f.name))
            for f in dataclasses.fields(value)}}
    if type(value) in (list, tuple):
        return type(value)(_expand_dataclasses(v) for v in value)
    if type(value) is dict:
        return {k: _expand_dataclasses(v) for k, v in value.items()}
    return value


def call_leaves(args: tuple, kwargs: dict) -> List[Any]:
    """The leaves of a call's arguments, dataclass fields included (see
    :func:`call_flatten`)."""
    return call_flatten(args, kwargs)[0]


def call_flatten(args: tuple, kwargs: dict):
    """``pytree.tree_flatten((args, kwargs))`` that also looks inside dataclass instances."""
    return pytree.tree_flatten(_expand_dataclasses((args, kwargs)))


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


# nn.Module bookkeeping that is not a value a graph bakes in (state and submodules are keyed
# by shape and structure above; hooks by the code they run)
_MODULE_INTERNALS = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook", "_compiled_call_impl",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
})
_SIMPLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
           torch.layout, torch.memory_format)


def value_fingerprint(value: Any, names: Optional[frozenset] = None, depth: int = 0) -> str:
    """A stable text for a value a traced graph may have baked in (Dynamo guards on it):
    numbers, strings, dtypes, enums and containers of them by value; a tensor by its type,
    dtype and shape (a plain-attribute tensor's values are not read); a function by its
    qualified name, bytecode and the globals it reads (a user helper's helper too, a few levels
    deep; a library function by name: the versions are in the key); another object by its
    class and, a few levels deep, those of its attributes whose names the model's code reads
    (``names``; e.g. ``config.hidden_size``, not ``config.name_or_path``)."""
    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return f"{type(value).__name__}({value.dtype},{tuple(value.shape)})"
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    group = describe(value)  # a process group / device mesh: by its ranks
    if group is not None:
        return group
    if depth > 4:
        return type(value).__qualname__
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [value_fingerprint(v, names, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort()
        return f"{type(value).__name__}[{','.join(items)}]"
    if isinstance(value, dict):
        items = sorted(f"{value_fingerprint(k, names, depth + 1)}:"
                       f"{value_fingerprint(v, names, depth + 1)}" for k, v in value.items())
        return f"dict{{{','.join(items)}}}"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, (types.FunctionType, types.MethodType)):
        fn = getattr(value, "__func__", value)
        if _is_library(fn):
            return f"function {fn.__module__}.{fn.__qualname__}"
        reads = global_reads(fn, lambda v: value_fingerprint(v, names, depth + 1))
        return (f"function {fn.__module__}.{fn.__qualname__}:{_code_digest(fn)}"
                f":globals=[{','.join(reads)}]")
    if isinstance(value, (type, torch.nn.Module)) or not isinstance(
            getattr(value, "__dict__", None), dict):
        return f"{type(value).__qualname__} {getattr(value, '__qualname__', '')}"
    attrs = {k: v for k, v in vars(value).items() if names is None or k in names}
    return f"{type(value).__qualname__}{value_fingerprint(attrs, names, depth + 1)}"


def _code_digest(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    h = hashlib.md5()
    for c in _code_objects(code):
        h.update(c.co_code)
        h.update(repr([k for k in c.co_consts if not isinstance(k, types.CodeType)]).encode())
    return h.hexdigest()


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions_of(cls) -> List[Any]:
    """The functions a model class defines (methods, static/class methods, property getters),
    up its bases but not torch.nn.Module's own."""
    found = []
    for klass in cls.__mro__:
        if klass in (torch.nn.Module, object) or klass.__module__.startswith("torch.nn."):
            continue
        for value in vars(klass).values():
            value = getattr(value, "__func__", value)
            value = getattr(value, "fget", value)
            if isinstance(value, types.FunctionType):
                found.append(value)
    return found


def _read_names(module: torch.nn.Module) -> frozenset:
    """Every name the model's classes' code reads (attribute and global names)."""
    names = {"training"}
    for cls in {type(m) for m in module.modules()}:
        for fn in _functions_of(cls):
            for c in _code_objects(fn.__code__):
                names.update(c.co_names)
    return frozenset(names)


def _module_attributes(module: torch.nn.Module, names: frozenset) -> List[str]:
    """The plain attributes of the module and of every submodule that the model's code reads
    (what Dynamo guards on: ``self.scale``, ``self.training``, a config object's fields,
    hooks)."""
    parts = []
    for name, sub in module.named_modules(remove_duplicate=False):
        for attr, value in sorted(vars(sub).items()):
            if attr in _MODULE_INTERNALS or isinstance(value, torch.nn.Module):
                continue
            if getattr(type(value), "_is_cache_wrapper", False):
                continue  # model.forward = cache_compile(model.forward): the wrapper itself
            if attr not in names and not attr.startswith("_forward"):
                continue
            parts.append(f"attr {name or '.'}.{attr}={value_fingerprint(value, names)}")
    return parts


def _function_reads(fn, names: frozenset) -> List[str]:
    """The globals and closure values ``fn`` reads (its code and nested functions'), each by
    :func:`value_fingerprint`."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    g = getattr(fn, "__globals__", {})
    read = sorted({n for c in _code_objects(code) for n in c.co_names if n in g})
    parts = [f"global {fn.__qualname__}:{n}={value_fingerprint(g[n], names)}" for n in read]
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        parts.append(f"closure {fn.__qualname__}:{name}={value_fingerprint(value, names)}")
    return parts


def baked_values(module: torch.nn.Module, func_name: str) -> List[str]:
    """What a compiled graph of ``module.func_name`` may have baked in besides the state
    tensors: the plain attributes of the module and its submodules that the model's code
    reads, and the globals and closure values its classes' functions read (torch's FX graph
    cache and vLLM's compile cache key on the same things: the values Dynamo guards on)."""
    names = _read_names(module)
    parts = _module_attributes(module, names)
    seen = set()
    for cls in {type(m) for m in module.modules()}:
        for fn in _functions_of(cls):
            if id(fn) not in seen:
                seen.add(id(fn))
                parts += _function_reads(fn, names)
    return sorted(parts)


def model_key(module: torch.nn.Module, func_name: str, config, decompositions: Dict) -> str:
    """md5 of everything a compiled graph depends on besides the inputs' shapes: versions,
    the source files of every submodule's class (and their packages' versions), the module's
    structure and state shapes/placements/meshes, the process groups and device meshes its
    submodules hold (by ranks, never by c10d's creation-order names), the values the graph
    baked in (:func:`baked_values`: plain attributes, globals and closure values the forward
    reads), every config option (:func:`config_parts`: a user pass by what it is, never by
    address), the decompositions, and the library's own graph-shaping code
    (:func:`library_digest`)."""
    h = hashlib.md5()
    parts = [json.dumps(_versions(), sort_keys=True), func_name, str(module)]
    parts += baked_values(module, func_name)
    parts += sorted({_code_identity(type(m)) for m in module.modules()})
    for name, t in _state_tensors(module):
        parts.append(f"{name}:{type(t).__name__}:{tuple(t.shape)}:{t.dtype}:"
                     f"{getattr(t, 'placements', '')}:"
                     f"{describe(getattr(t, 'device_mesh', None)) or ''}")
    parts += module_groups(module)
    parts += config_parts(config)
    for op, fn in sorted(decompositions.items(), key=lambda kv: str(kv[0])):
        parts.append(f"{op}:{callable_identity(fn)}")  # code, constants, closure, helpers
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def call_key(args: tuple, kwargs: dict) -> tuple:
    """A hashable description of a call's inputs (what a static graph depends on)."""
    leaves, spec = call_flatten(args, kwargs)
    key: List[Any] = [spec]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            key.append((type(x), x.dtype, tuple(x.shape), x.stride(), x.device,
                        str(getattr(x, "placements", ""))))
        elif x is None or isinstance(x, (bool, int, float, str)):
            key.append((type(x), x))
        else:  # a group/mesh by its ranks; anything else: Dynamo guarded it, we cannot
            desc = describe(x)
            key.append((type(x), desc) if desc is not None else (type(x),))
    return tuple(key)


_FAST_SCALARS = (bool, int, float, str, type(None))


def fast_key(args: tuple) -> Optional[tuple]:
    """A cheaper key for the common call (positional plain tensors and scalars): it tells
    apart exactly the calls :func:`call_key` tells apart among those, without a pytree walk.
    None for any other call (kwargs are the caller's check), which then takes ``call_key``."""
    key = []
    for x in args:
        kind = type(x)
        if kind is torch.Tensor:
            key.append((x.shape, x.stride(), x.dtype, x.device))
        elif kind in _FAST_SCALARS:
            key.append((kind, x))
        else:
            return None
    return tuple(key)


def input_signature(args: tuple, kwargs: dict, key: Optional[tuple] = None) -> str:
    """The stable (cross-process) name of :func:`call_key`."""
    key = call_key(args, kwargs) if key is None else key
    desc = [str(key[0])] + [f"{k[0].__name__}:{k[1:]!r}" for k in key[1:]]
    return hashlib.sha256("\n".join(desc).encode()).hexdigest()[:32]

