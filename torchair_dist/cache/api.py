"""``cache_compile`` and the callable it returns: memory -> verified entry -> compile + save."""
from __future__ import annotations

import inspect
import logging
import os
import time
from typing import Any, Dict, List, Optional

import torch

from ..pipeline.entry import get_npu_backend
from ..backends.context import current_rank_and_world
from ..configs import CompilerConfig
from ..errors import CacheRejectedError, ConfigError
from .entry import LoadedEntry
from .graph_data import NotCacheableError
from .sources import SourceChanged
from .keys import _versions, call_key, fast_key, input_signature, model_key
from .record import _cache_backend, _map_inputs, _map_outputs, _Record
from .store import INDEX, cache_root, check_dirs, rank_dir_name, read_indexed, write_indexed

log = logging.getLogger("torchair_dist")


class CacheCompiledFunction:
    """Callable returned by :func:`cache_compile`; see the package docstring."""

    _is_cache_wrapper = True  # not a value the graph bakes in (keys._module_attributes)

    def __init__(self, module, func_name, config, decompositions, cache_dir, rank_dir,
                 method=None, dynamic: bool = False, fullgraph: bool = True):
        self.module, self.func_name = module, func_name
        # The callable compiled on a miss, taken when cache_compile was called: after
        # ``model.forward = cache_compile(model.forward)`` the module's attribute is this
        # wrapper, which Dynamo must not trace into.
        self.method = method if method is not None else getattr(module, func_name)
        self.dynamic = dynamic
        self.fullgraph = fullgraph  # False: graph breaks compile, but nothing is saved
        self.config, self.decompositions = config, decompositions
        self.cache_root = cache_dir
        self.rank_dir = rank_dir
        self.loaded: Dict[tuple, Any] = {}   # call_key -> LoadedEntry | compiled function
        self._by_fast_key: Dict[tuple, Any] = {}  # fast_key -> the same, for flat calls
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
        try:
            return self._call(args, kwargs)
        except SourceChanged as exc:
            # a tensor read through a global/closure/object changed its dtype/shape/device:
            # what Dynamo's guards would recompile for (a loaded entry has no guards)
            log.warning("torchair_dist cache: %s.%s: %s; recompiling", type(self.module).__name__,
                        self.func_name, exc)
            self.rejections.append(exc)
            self._forget_loaded()
            return self._compile_and_save(call_key(args, kwargs),
                                          input_signature(args, kwargs, call_key(args, kwargs)),
                                          args, kwargs)

    def _forget_loaded(self) -> None:
        """Drop the loaded entries (compiled functions stay: Dynamo's guards keep them right)."""
        for table in (self.loaded, self._by_fast_key):
            for k in [k for k, fn in table.items() if getattr(fn, "reads_sources", False)]:
                del table[k]

    def _call(self, args, kwargs):
        fast = None if kwargs else fast_key(args)
        if fast is not None:
            fn = self._by_fast_key.get(fast)
            if fn is not None:
                self.last_source = "memory"
                return fn(args, kwargs)
        key = call_key(args, kwargs)
        fn = self.loaded.get(key)
        if fn is not None:
            if fast is not None:  # a loaded entry's generated call, without its frame
                self._by_fast_key[fast] = getattr(fn, "fast", None) or fn
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
        if not os.path.exists(os.path.join(directory, INDEX)):
            return None
        try:
            data = self.read_entry(sig)
            if data is None:
                return None
            return LoadedEntry(data, self.module, self.config, args, kwargs,
                               method=self.method)
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
        check_dirs(self.cache_root, self._parts())
        data = read_indexed(directory, sig)
        if data is None:
            return None
        if data.get("versions") != self.versions():
            raise CacheRejectedError(f"stale entry: written by {data.get('versions')}, this "
                                     f"process is {self.versions()}")
        if data.get("signature") != sig:
            raise CacheRejectedError("entry signature does not match its index record")
        if data.get("model_key") != self._key:
            raise CacheRejectedError(
                f"entry was saved under model key {data.get('model_key')!r}, not this model's "
                f"{self._key!r} (copied from another model's directory?)")
        return data

    # -- compile + save -------------------------------------------------------------------
    def _compile_and_save(self, key: tuple, sig: str, args, kwargs):
        record = _Record()
        backend = _cache_backend(self.config, self.decompositions, record)
        compiled = torch.compile(self.method, backend=backend, fullgraph=self.fullgraph,
                                 dynamic=False)
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
        return {"versions": self.versions(), "signature": sig, "model_key": self._key,
                "graph": g["graph"], "handle": g["handle"],
                "static": g["static"], "created": time.time(),
                "inputs": _map_inputs(record, self.module, args, kwargs, g["used"],
                                      self.method),
                "outputs": _map_outputs(record, result, args, kwargs)}

    def write_entry(self, sig: str, data: Dict) -> None:
        write_indexed(self.cache_root, self._parts(), sig, data, self.versions())

    def versions(self) -> Dict:
        """What an entry of this function must have been written by (the library part: the
        code that shaped this mode's graphs)."""
        return _versions(self.config.peek("mode"))


def _no_grad_call(fn, args, kwargs):
    with torch.no_grad():
        return fn(*args, **kwargs)


def _check_arguments(**given) -> None:
    """A ``ConfigError`` naming each argument of the wrong type (before anything runs)."""
    expected = {"config": ((CompilerConfig, type(None)), "a torchair_dist.CompilerConfig"),
                "dynamic": ((bool,), "True or False"),
                "cache_dir": ((str, os.PathLike, type(None)), "a directory path"),
                "global_rank": ((int, type(None)), "an int"), "tp_rank": ((int, type(None)),
                                                                        "an int"),
                "pp_rank": ((int, type(None)), "an int"),
                "custom_decompositions": ((dict, type(None)), "a dict of op -> function"),
                "ge_cache": ((bool,), "True or False")}
    for name, (types_, what) in expected.items():
        value = given[name]
        if not isinstance(value, types_) or (types_[0] is int and isinstance(value, bool)):
            raise ConfigError(f"cache_compile: {name} must be {what}, got {value!r} "
                              f"({type(value).__name__})")
    if given["backend"] is not None and not callable(given["backend"]):
        raise ConfigError(f"cache_compile: backend must be get_npu_backend(...)'s result, got "
                          f"{type(given['backend']).__name__}")


def cache_compile(func, *, config=None, backend=None, dynamic: bool = False,
                  cache_dir: Optional[str] = None, global_rank: Optional[int] = None,
                  tp_rank: Optional[int] = None, pp_rank: Optional[int] = None,
                  custom_decompositions: Optional[Dict] = None,
                  ge_cache: bool = False, **kwargs) -> CacheCompiledFunction:
    """Compile ``func`` (a bound method of an ``nn.Module``, or a module: its ``forward``)
    with our backend, caching what this rank compiled under ``cache_dir``.

    The first call in a process loads a verified entry for the call's input signature, or
    compiles (``fullgraph=True``, static shapes) and saves one. See the package docstring for
    the key, the layout and the safety rules. ``backend``, if given, must be
    ``get_npu_backend(compiler_config=config)``'s result for the same config. ``dynamic=True``
    (TorchAir's default; ours is ``False``) is accepted with a warning: it caches the same
    static entries (one per input signature), since a stored graph has no symbolic shapes.
    ``model.forward = cache_compile(model.forward)`` works: the method is taken once, here.
    Dataclass arguments are looked into (their tensors are inputs), and tensors kept in plain
    list/tuple attributes of the module count as its state. ``ge_cache=True`` is
    accepted for TorchAir compatibility with a warning: ignored in ACL modes; in max-autotune
    the entry already holds the graph and the GE model is rebuilt from it on load.

    ``**kwargs`` (TorchAir's signature ends in it): ``fullgraph`` is used (True, the default
    here: one graph or an error; False: graph breaks are allowed, the function runs compiled
    and is not saved, as any function of more than one graph); any other keyword is named in
    one warning and has no effect (TorchAir drops them silently).
    """
    fullgraph = kwargs.pop("fullgraph", True)
    if not isinstance(fullgraph, bool):
        raise ConfigError(f"cache_compile: fullgraph must be True or False, got {fullgraph!r}")
    if kwargs:
        log.warning("cache_compile: keyword argument(s) %s have no effect here (TorchAir's "
                    "cache_compile accepts and drops them too)", ", ".join(sorted(kwargs)))
    _check_arguments(config=config, backend=backend, dynamic=dynamic, cache_dir=cache_dir,
                     global_rank=global_rank, tp_rank=tp_rank, pp_rank=pp_rank,
                     custom_decompositions=custom_decompositions, ge_cache=ge_cache)
    method = func  # TorchAir's parameter name
    if isinstance(method, torch.nn.Module):
        module, func_name, target = method, "forward", method.forward
    elif inspect.ismethod(method) and isinstance(method.__self__, torch.nn.Module):
        module, func_name, target = method.__self__, method.__func__.__name__, method
    else:
        raise ConfigError(f"cache_compile needs a method of a torch.nn.Module (or a module), "
                          f"got {type(method).__name__}")
    if backend is not None:
        bound = getattr(backend, "keywords", {}).get("compiler_config")
        if bound is None or (config is not None and bound != config):
            raise ConfigError("cache_compile: backend must be get_npu_backend(compiler_config="
                              "config) for the same config")
        config = bound
    config = (config or CompilerConfig()).copy()
    if ge_cache and config.is_acl_mode:
        log.warning("cache_compile: ge_cache is ignored in mode %s", config.get("mode"))
    elif ge_cache:
        log.warning("cache_compile: ge_cache=True has no further effect here: an entry stores "
                    "the graph and the GE model is rebuilt from it on load (no compiled GE "
                    "artifact is cached)")
    made = get_npu_backend(compiler_config=config,
                           custom_decompositions=custom_decompositions or {})
    decompositions = made.keywords["decompositions"]
    if global_rank is None:
        global_rank, world = current_rank_and_world()
    else:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    rank_dir = rank_dir_name(world, global_rank, tp_rank, pp_rank)
    if dynamic:
        log.warning("cache_compile(dynamic=True): entries here are static, one per input "
                    "signature (each new shape compiles once and is saved, then loads); pass "
                    "dynamic=False to silence this warning")
    return CacheCompiledFunction(module, func_name, config, decompositions,
                                 cache_root(cache_dir), rank_dir, method=target,
                                 dynamic=dynamic, fullgraph=fullgraph)
