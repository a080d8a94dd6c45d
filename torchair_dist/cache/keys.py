"""Cache keys: the model key (everything a compiled graph depends on besides the inputs'
shapes) and the per-call input signature. How code and values are described in the model key
is :mod:`.identity`."""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import pathlib
import sys
import types
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

from .groups import describe, module_groups
from .identity import (callable_identity, code_objects, config_parts,
                       describe_value, file_digest)
from .store import FORMAT_VERSION


def _versions(mode: str) -> Dict[str, Any]:
    from .. import _version

    return {"format": FORMAT_VERSION, "torch": torch.__version__,
            "torchair_dist": _version.__version__, "library": library_digest(mode),
            "python": "%d.%d" % sys.version_info[:2]}


@functools.lru_cache(maxsize=None)
def library_digest(mode: str) -> str:
    """sha256 of the source of every module that shaped a graph stored for ``mode``
    (:func:`library_sources`: the modules of the stages of the mode's row up to the
    observation point and every library module they import, transitively) — computed once
    per process and mode: a changed pass, or a helper it reaches through imports, with the
    same ``__version__`` never loads a graph an older one shaped. The backend's steps are not
    in it: they run again on load."""
    h = hashlib.sha256()
    for name in library_sources(mode):
        h.update(name.encode())
        h.update(b"\0")
        h.update(_module_source(name))
        h.update(b"\0")
    return h.hexdigest()


_PACKAGE = __name__.split(".")[0]


@functools.lru_cache(maxsize=None)
def library_sources(mode: str) -> Tuple[str, ...]:
    """The library modules whose code shapes a graph compiled in ``mode``: the import closure
    of ``pipeline.stages.shaping_modules(mode)`` (each module, then what it imports), found
    from the modules' own source: every ``import`` / ``from ... import`` of a module of this
    package, at top level or inside a function, followed transitively. The package's own
    ``__init__`` (the public API, which imports everything) is never followed."""
    from ..pipeline.stages import shaping_modules

    found: List[str] = []
    todo = list(reversed(shaping_modules(mode)))
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.append(name)
        todo += reversed([m for m in imports_of(name) if m not in found])
    return tuple(found)


@functools.lru_cache(maxsize=None)
def imports_of(name: str) -> Tuple[str, ...]:
    """The modules of this package that module ``name``'s source imports (function-level
    imports included; ``from pkg import sub`` names ``pkg`` and, where ``sub`` is a module,
    ``pkg.sub``), in source order, the package root left out."""
    path = _module_file(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: List[str] = []

    def add(module: str) -> None:
        if module != _PACKAGE and module.startswith(_PACKAGE + ".") and module not in found \
                and module != name and _is_module(module):
            found.append(module)

    for node in ast.walk(ast.parse(_module_source(name), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] +
                                ([node.module] if node.module else []))
            else:
                base = node.module or ""
            add(base)
            for alias in node.names:
                add(f"{base}.{alias.name}")
    return tuple(found)


def _package_dir() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[1]


def _is_module(name: str) -> bool:
    """Whether ``name`` (inside this package) is a module or a package of it, from the files."""
    rel = pathlib.Path(*name.split(".")[1:])
    root = _package_dir()
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def _module_source(name: str) -> bytes:
    """The source of module ``name``, as the key hashes it."""
    return _module_file(name).read_bytes()


def _module_file(name: str) -> pathlib.Path:
    if name.startswith(_PACKAGE + ".") and _is_module(name):
        rel = pathlib.Path(*name.split(".")[1:])
        file = (_package_dir() / rel).with_suffix(".py")
        return file if file.is_file() else _package_dir() / rel / "__init__.py"
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        raise RuntimeError(f"{name}: no source file to key the compile cache on")
    return pathlib.Path(spec.origin)


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
        digest = file_digest(inspect.getsourcefile(cls) or "")
    except TypeError:  # a class without a source file (built in)
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
            for c in code_objects(fn.__code__):
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
            parts.append(f"attr {name or '.'}.{attr}={describe_value(value, names)}")
    return parts


def _function_reads(fn, names: frozenset) -> List[str]:
    """The globals and closure values ``fn`` reads (its code and nested functions'), each by
    :func:`describe_value`."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    g = getattr(fn, "__globals__", {})
    read = sorted({n for c in code_objects(code) for n in c.co_names if n in g})
    parts = [f"global {fn.__qualname__}:{n}={describe_value(g[n], names)}" for n in read]
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        parts.append(f"closure {fn.__qualname__}:{name}={describe_value(value, names)}")
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
    """sha256 (32 hex digits: the length of TorchAir's cache directory names) of everything
    a compiled graph depends on besides the inputs' shapes: versions,
    the source files of every submodule's class (and their packages' versions), the module's
    structure and state shapes/placements/meshes, the process groups and device meshes its
    submodules hold (by ranks, never by c10d's creation-order names), the values the graph
    baked in (:func:`baked_values`: plain attributes, globals and closure values the forward
    reads), every config option (:func:`config_parts`: a user pass by what it is, never by
    address), the decompositions, and the library's own graph-shaping code
    (:func:`library_digest`)."""
    h = hashlib.sha256()
    parts = [json.dumps(_versions(config.peek("mode")), sort_keys=True), func_name, str(module)]
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
    return h.hexdigest()[:32]


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

