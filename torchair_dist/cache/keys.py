"""Cache keys: the model key (everything a compiled graph depends on besides the inputs'
shapes) and the per-call input signature."""
from __future__ import annotations

import hashlib
import inspect
import json
import sys
from typing import Any, Dict, List, Optional

import torch
import torch.utils._pytree as pytree

from .groups import describe, module_groups
from .store import FORMAT_VERSION


def _versions() -> Dict[str, Any]:
    from .. import _version

    return {"format": FORMAT_VERSION, "torch": torch.__version__,
            "torchair_dist": _version.__version__,
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
    structure and state shapes/placements/meshes, the process groups and device meshes its
    submodules hold (by ranks, never by c10d's creation-order names), every config option and
    the decompositions."""
    h = hashlib.md5()
    parts = [json.dumps(_versions(), sort_keys=True), func_name, str(module)]
    parts += sorted({_code_identity(type(m)) for m in module.modules()})
    for name, t in _state_tensors(module):
        parts.append(f"{name}:{type(t).__name__}:{tuple(t.shape)}:{t.dtype}:"
                     f"{getattr(t, 'placements', '')}:"
                     f"{describe(getattr(t, 'device_mesh', None)) or ''}")
    parts += module_groups(module)
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

