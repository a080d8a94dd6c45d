"""What a callable or a value is, as the same text in every process: the parts of the model
key (:mod:`.keys`) that describe code and the values a graph may have baked in — a user pass or
a decomposition, a helper function, a module constant or an attribute the model's code reads:
one describer, :func:`describe_value` (callables through :func:`callable_identity`). Never by
address; a function by its code and the globals it reads; library code by name and version."""
from __future__ import annotations

import enum
import functools
import hashlib
import sys
import types
from typing import Any, List, Optional

import torch

from .groups import describe


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
            h.update(_const_text(const).encode())
        h.update(b"\0")


def _const_text(const) -> str:
    """A code constant as the same text in every process: ``x in {"a", "b"}`` compiles to a
    frozenset, whose ``repr`` order follows the per-process string hash seed."""
    if isinstance(const, frozenset):
        return f"frozenset({sorted(_const_text(c) for c in const)})"
    if isinstance(const, tuple):
        return f"({','.join(_const_text(c) for c in const)})"
    return repr(const)


def _code_digest(fn) -> str:
    """sha256 of ``fn``'s code (:func:`_code_identity_of`); "" for a callable without code."""
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ""
    h = hashlib.sha256()
    _code_identity_of(code, h)
    return h.hexdigest()


_PLAIN_VALUES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
                 torch.layout, torch.memory_format, enum.Enum, list, tuple, dict, set,
                 frozenset, torch.Tensor)


_SIMPLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
           torch.layout, torch.memory_format)


def _is_library(value) -> bool:
    """Whether ``value`` (a function or class) comes from the standard library or an installed
    package with a version (torch, torchair_dist, transformers ...): keyed by name and that
    version (:func:`.keys._versions` / :func:`.keys.library_digest` cover torch and this
    library), not by walking its code."""
    return _is_library_module(getattr(value, "__module__", None) or "")


def _is_library_module(name: str) -> bool:
    top = name.split(".")[0]
    if not top or top in ("__main__", "__mp_main__"):
        return False
    if top in sys.stdlib_module_names or top == "builtins":
        return True
    return bool(getattr(sys.modules.get(top), "__version__", ""))


def _module_text(module: types.ModuleType) -> str:
    """A module a function reads as a global: a library's by its name; a user's (a helper
    reached as ``helpers.act(x)``, whose code no function's bytecode shows) by its name and the
    sha256 of its source file, so a changed helper module is a miss."""
    if _is_library_module(module.__name__):
        return f"module {module.__name__}"
    return f"module {module.__name__}:{file_digest(getattr(module, '__file__', None) or '')}"


@functools.lru_cache(maxsize=None)
def file_digest(path: str) -> str:
    """sha256 (32 hex digits) of a source file, read once per process (the module in memory
    is the one imported then): a user module a function reads, a model class's file."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:32]
    except OSError:
        return "no-source"


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
    for name in sorted({n for c in code_objects(code) for n in c.co_names if n in g}):
        value = g[name]
        if value is fn:
            text = "<itself>"
        elif isinstance(value, types.ModuleType):
            text = _module_text(value)
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


def callable_identity(fn: Any, depth: int = 0, names: Optional[frozenset] = None) -> str:
    """What a callable is, the same in every process: a library function or class by its
    qualified name and its package's version (its code is the library's, the versions are in
    the key); a user function by its qualified name and its code (bytecode, names, constants,
    nested functions' code), its defaults and closure values and the globals it reads
    (:func:`global_reads`: a helper it calls by its own identity); a ``functools.partial`` by
    its function and arguments; an object with ``uuid()`` (inductor's ``CustomGraphPass``, as
    vLLM hashes its passes) by that; another callable object by its class's and ``__call__``'s
    identity and its state. Values inside are described by :func:`describe_value` (``names``
    as there). Never by address."""
    def inner(value):
        return describe_value(value, names, depth + 1)

    if depth > 4:
        return f"{type(fn).__module__}.{type(fn).__qualname__}"
    if isinstance(fn, functools.partial):
        return (f"partial({callable_identity(fn.func, depth + 1, names)},"
                f"{inner(fn.args)},{inner(fn.keywords)})")
    if isinstance(fn, types.MethodType):
        return f"method {callable_identity(fn.__func__, depth + 1, names)} of {inner(fn.__self__)}"
    if (isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, type))
            and _is_library(fn)):
        top = sys.modules.get((getattr(fn, "__module__", None) or "").split(".")[0])
        return (f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}"
                f"@{getattr(top, '__version__', '')}")
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        closure = []
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                closure.append(f"{name}={inner(cell.cell_contents)}")
            except ValueError:  # an empty cell
                closure.append(f"{name}=<empty>")
        defaults = inner(getattr(fn, "__defaults__", None))
        kwdefaults = inner(getattr(fn, "__kwdefaults__", None))
        reads = global_reads(fn, inner)
        return (f"function {getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}:"
                f"{_code_digest(fn)}:defaults={defaults}:{kwdefaults}:closure=[{','.join(closure)}]"
                f":globals=[{','.join(reads)}]")
    uuid = getattr(fn, "uuid", None)
    if callable(uuid):
        return f"{type(fn).__module__}.{type(fn).__qualname__} uuid={uuid()!r}"
    if isinstance(fn, type) or not hasattr(type(fn), "__call__") or \
            isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        name = getattr(fn, "__qualname__", type(fn).__qualname__)
        return f"{getattr(fn, '__module__', '')}.{name}"
    call = getattr(type(fn), "__call__")
    state = _attributes(fn, names, depth)
    return (f"{type(fn).__module__}.{type(fn).__qualname__} "
            f"call={callable_identity(call, depth + 1, names)} state={state}")


def _attributes(value: Any, names: Optional[frozenset], depth: int) -> str:
    """An object's attributes (those named in ``names``, or all), described."""
    attrs = vars(value) if isinstance(getattr(value, "__dict__", None), dict) else {}
    attrs = {k: v for k, v in attrs.items() if names is None or k in names}
    return describe_value(attrs, names, depth + 1)


def describe_value(value: Any, names: Optional[frozenset] = None, depth: int = 0) -> str:
    """The one text for a value, the same in every process — a config option's value, a
    constant a user pass reads, or a value a traced graph may have baked in (Dynamo guards on
    it): numbers, strings, dtypes, enums and containers of them by value; a tensor by its type,
    dtype and shape (values are not read); a process group or device mesh by its ranks; a
    module by its name (a user's by its source's sha256); a callable by
    :func:`callable_identity` (``repr`` holds an address no other process shares); an
    ``nn.Module`` by its class; another object by its class and, a few levels deep, its
    attributes — only those whose names the model's code reads when ``names`` is given
    (``config.hidden_size``, not ``config.name_or_path``)."""
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
        return f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [describe_value(v, names, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort()
        return f"{type(value).__name__}[{','.join(items)}]"
    if isinstance(value, dict):
        items = sorted(f"{describe_value(k, names, depth + 1)}:"
                       f"{describe_value(v, names, depth + 1)}" for k, v in value.items())
        return f"dict{{{','.join(items)}}}"
    if isinstance(value, types.ModuleType):
        return _module_text(value)
    if isinstance(value, torch.nn.Module):
        return f"module object {type(value).__module__}.{type(value).__qualname__}"
    if callable(value):
        return callable_identity(value, depth, names)
    if not isinstance(getattr(value, "__dict__", None), dict):
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return f"{type(value).__qualname__}{_attributes(value, names, depth)}"


def config_parts(config) -> List[str]:
    """A ``CompilerConfig`` as text: every option by :func:`describe_value` (the model key's
    part for the config, and what makes two backends equal)."""
    return [f"{k}={describe_value(v)}" for k, v in sorted(config.as_dict().items())]


def code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)
