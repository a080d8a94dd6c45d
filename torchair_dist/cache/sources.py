"""Graph inputs read through globals, closures and objects (``get_forward_context().mc2_mask``,
a KV cache in a list of a module kept in a plain list, a tensor captured by a closure): where
the function reads them, stored as data, and read again at every call of a loaded entry, as the
code would.

Dynamo names where each graph input comes from (``node.meta["grapharg"].source``: a chain of
``AttrSource`` / ``GetItemSource`` / ... ending in ``L['self']``, a local, a closure variable or
``G['name']``). :func:`source_path` turns that chain into a JSON path::

    [root, step, step, ...]
    root: ["self"]                 the module the cached method is bound to
          ["arg", name]            a parameter of the method (bound from the call)
          ["closure", name]        a free variable of the method's function (its cell)
          ["global", name]         a name in the method's module globals
          ["module", "pkg.mod"]    an imported module (Dynamo's ``G['__import_pkg_dot_mod']``)
    step: ["attr", identifier] | ["item", int or str]

Only this grammar is stored and walked (``getattr`` / ``[]``; a ``module`` root is looked up in
``sys.modules`` only: loading an entry never imports anything). The record side checks
that the path, walked on the live objects, gives the very tensor the graph received; the entry
keeps the tensor's dtype, shape, stride and device, and a loaded entry checks them at each call
(:class:`SourceChanged` when they differ: the function recompiles, as Dynamo's guards would make
it). What the key covers: the path (where the tensor comes from) and that metadata; the tensor's
values are read at call time.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable, List, Optional

import torch

from ..errors import CacheRejectedError
from .graph_data import NotCacheableError

_IMPORT_PREFIX = "__import_"


class SourceChanged(CacheRejectedError):
    """A tensor a loaded entry reads through a global/closure/object no longer has the dtype,
    shape, stride or device the entry was compiled for (or its path no longer resolves)."""


def source_path(source, method) -> List[list]:
    """The JSON path of Dynamo ``source`` for a graph input of ``method`` (a bound method);
    ``NotCacheableError`` for a source outside the grammar."""
    from torch._dynamo import source as S

    steps: List[list] = []
    s = source
    while True:
        if isinstance(s, (S.NNModuleSource,)):  # the module object itself: no step
            s = s.base
        elif isinstance(s, S.AttrSource):
            if not s.member.isidentifier():
                raise NotCacheableError(f"attribute path {s.name!r}")
            steps.append(["attr", s.member])
            s = s.base
        elif isinstance(s, (S.GetItemSource, S.DictGetItemSource)) and \
                not getattr(s, "index_is_slice", False) and \
                isinstance(s.index, (int, str)) and not isinstance(s.index, bool):
            steps.append(["item", s.index])
            s = s.base
        elif isinstance(s, S.ClosureSource):
            steps.append(["attr", "__closure__"])
            s = s.base
        elif isinstance(s, S.CodeSource):
            steps.append(["attr", "__code__"])
            s = s.base
        elif isinstance(s, S.LocalSource):
            root = _local_root(s.local_name, method)
            break
        elif isinstance(s, S.GlobalSource):
            name = s.global_name
            if name.startswith(_IMPORT_PREFIX):
                root = ["module", name[len(_IMPORT_PREFIX):].replace("_dot_", ".")]
            else:
                root = ["global", name]
            break
        else:
            raise NotCacheableError(f"graph input read through {s.name if s else s!r} "
                                    f"({type(s).__name__})")
    return [root] + steps[::-1]


def _local_root(name: str, method) -> list:
    func = method.__func__
    params = list(inspect.signature(func).parameters)
    if params and name == params[0]:
        return ["self"]
    if name in params:
        return ["arg", name]
    if name in func.__code__.co_freevars:
        return ["closure", name]
    raise NotCacheableError(f"graph input read through local {name!r} of {func.__qualname__}")


def check_path(path) -> bool:
    """Whether ``path`` (from an entry file) is in the grammar."""
    if not isinstance(path, list) or not path or not isinstance(path[0], list):
        return False
    root = path[0]
    ok_root = root == ["self"] or (
        len(root) == 2 and isinstance(root[1], str) and (
            (root[0] in ("arg", "closure", "global") and root[1].isidentifier()) or
            (root[0] == "module" and all(p.isidentifier() for p in root[1].split(".")))))
    return ok_root and all(
        isinstance(st, list) and len(st) == 2 and (
            (st[0] == "attr" and isinstance(st[1], str) and st[1].isidentifier()) or
            (st[0] == "item" and isinstance(st[1], (int, str)) and not isinstance(st[1], bool)))
        for st in path[1:])


def resolve(path, method, args=(), kwargs=None) -> Any:
    """Walk ``path`` from ``method``'s module, globals, closure or the call's arguments."""
    return accessor(path, method)(args, kwargs)


def accessor(path, method) -> Callable:
    """``(args, kwargs) -> object``: ``path`` walked from ``method``, with everything that does
    not depend on the call (the signature, the closure cell, the steps) worked out once."""
    kind, func = path[0][0], method.__func__
    if kind == "self":
        owner = method.__self__
        root = lambda args, kwargs: owner  # noqa: E731
    elif kind == "arg":
        root = _arg_reader(method, path[0][1])
    elif kind == "closure":
        cell = func.__closure__[func.__code__.co_freevars.index(path[0][1])]
        root = lambda args, kwargs: cell.cell_contents  # noqa: E731
    elif kind == "global":
        namespace, name = func.__globals__, path[0][1]
        root = lambda args, kwargs: namespace[name]  # noqa: E731
    else:  # only a module this process has imported: an entry never makes us import one
        name = path[0][1]
        root = lambda args, kwargs: sys.modules[name]  # noqa: E731
    steps = tuple((kind == "attr", key) for kind, key in path[1:])

    def walk(args=(), kwargs=None):
        obj = root(args, kwargs)
        for is_attr, key in steps:
            obj = getattr(obj, key) if is_attr else obj[key]
        return obj

    return walk


def _arg_reader(method, name: str) -> Callable:
    """The argument ``name`` of a call of ``method``: taken by position or keyword directly when
    the parameter is a plain one, else (``*args``, keyword-only, ...) through a full bind."""
    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    index = next((i for i, p in enumerate(params) if p.name == name), None)
    by_keyword = index is not None and params[index].kind != inspect.Parameter.POSITIONAL_ONLY

    def bound(args, kwargs):
        return sig.bind(*args, **(kwargs or {})).arguments[name]

    if index is None or params[index].kind not in plain or \
            any(p.kind not in plain for p in params[:index]):
        return bound

    def read(args, kwargs):
        if index < len(args):
            if kwargs and name in kwargs:
                return bound(args, kwargs)  # bind raises the TypeError the call would
            return args[index]
        if kwargs and by_keyword and name in kwargs:
            return kwargs[name]
        return bound(args, kwargs)  # missing or defaulted: as before, the bind decides

    return read


def tensor_meta(t: torch.Tensor) -> list:
    """What a loaded entry needs of a tensor it reads through a path."""
    return [str(t.dtype).replace("torch.", ""), list(t.shape), list(t.stride()), str(t.device)]


def check_meta(meta) -> bool:
    return (isinstance(meta, list) and len(meta) == 4 and isinstance(meta[0], str) and
            isinstance(getattr(torch, meta[0], None), torch.dtype) and
            all(isinstance(v, list) and all(isinstance(x, int) for x in v) for v in meta[1:3])
            and isinstance(meta[3], str))


def path_text(path) -> str:
    root = path[0]
    text = "self" if root == ["self"] else f"{root[0]}:{root[1]}"
    for kind, key in path[1:]:
        text += f".{key}" if kind == "attr" else f"[{key!r}]"
    return text


def make_getter(path, meta, method, needs_call: bool) -> Callable:
    """A function ``(args, kwargs) -> tensor`` reading ``path`` at call time and checking the
    tensor against ``meta``; :class:`SourceChanged` when it does not fit."""
    dtype = getattr(torch, meta[0])
    shape, stride, device = torch.Size(meta[1]), tuple(meta[2]), torch.device(meta[3])
    where = path_text(path)
    try:
        walk = accessor(path, method)
    except Exception as exc:  # noqa: BLE001 - e.g. the closure lost the variable: every call fails
        problem = f"{type(exc).__name__}: {exc}"

        def walk(args=(), kwargs=None):
            raise LookupError(problem)

    def get(args=(), kwargs=None):
        try:
            t = walk(args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the code would fail here too; recompile
            raise SourceChanged(f"{where} does not resolve: {type(exc).__name__}: {exc}") \
                from None
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.shape != shape or \
                t.stride() != stride or t.device != device:
            got = tensor_meta(t) if isinstance(t, torch.Tensor) else type(t).__name__
            raise SourceChanged(f"{where} is now {got}, the entry was compiled for {meta}")
        return t

    get.needs_call = needs_call
    return get


def graph_input_sources(gm: torch.fx.GraphModule) -> Optional[list]:
    """Dynamo's source of each placeholder of ``gm`` (None where it has none)."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            arg = node.meta.get("grapharg")
            out.append(getattr(arg, "source", None))
    return out
