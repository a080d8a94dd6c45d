"""``get_npu_backend``: the torch.compile backend entry and its AOT wiring."""
from __future__ import annotations

import functools
import logging
import warnings
from typing import Any, Callable, Dict, Mapping, Optional

import torch

from . import option_support
from . import stages as pipeline
from .. import platform
from ..base.log import init_logging
from .route import NpuFxCompiler, get_compiler
from ..configs import MODES, CompilerConfig, apply_compile_options
from .decomposition_table import merge_decompositions
from ..errors import ConfigError, ConfigTypeError
from .torch_patches import apply_platform_patches
from ..base.util import calling_rank, ranks_are_threads, reset_process_state

log = logging.getLogger("torchair_dist")


def get_npu_backend(*, compiler_config: Optional[CompilerConfig] = None,
                    custom_decompositions: Mapping = {}):  # noqa: B006 - TorchAir's signature
    """A torch.compile backend for per-rank graph compilation.

    Args:
        compiler_config: the backend's ``CompilerConfig``; ``None`` makes a fresh default one.
        custom_decompositions: ``{op overload: function}`` merged over the defaults (platform
            patches still have the last word).

    Returns a new :class:`NpuBackend` (a ``functools.partial`` over the backend entry) on
    every call, so backends with different configs coexist in one process. Backends made from
    equal configurations (the same described options, the same custom decompositions) compare
    equal and hash alike, so Dynamo reuses what one of them compiled for the other; ``copy``
    and ``copy.deepcopy`` return the backend itself (as they do for a function: transformers
    deep-copies its ``CompileConfig`` on every ``generate``), and a pickled one is rebuilt
    equal.

    The configuration decides the mode: a ``torch.compile(mode=...)`` naming another mode
    (transformers' ``CompileConfig`` passes ``"reduce-overhead"`` unless told ``mode=None``)
    does not replace ``CompilerConfig.mode``; a ``UserWarning`` names both modes and says
    which one runs. The same mode, its alias (``reduce-overhead`` is ``npugraph_ex``), no
    mode or ``"default"`` pass silently; a name that is no torchair_dist mode is an error.
    """
    init_logging()
    if compiler_config is None:
        compiler_config = CompilerConfig()
    elif not isinstance(compiler_config, CompilerConfig):
        raise ConfigTypeError(f"compiler_config must be a torchair_dist.CompilerConfig, got "
                              f"{type(compiler_config).__name__}")
    option_support.check_config_support(compiler_config)
    decompositions = merge_decompositions(custom_decompositions)
    apply_platform_patches()
    return NpuBackend(_npu_backend, compiler_config=compiler_config,
                      decompositions=decompositions, custom=custom_decompositions)


_determinism_warned = False


def install_determinism_guard() -> bool:
    """Install torch_npu's deterministic-level guard when it exists; else warn once when
    deterministic algorithms were requested (nothing guards them here). True if installed."""
    global _determinism_warned
    if platform.current().install_determinism_guard():
        return True
    if torch.are_deterministic_algorithms_enabled() and not _determinism_warned:
        _determinism_warned = True
        log.warning("deterministic algorithms are on but no deterministic-level guard is "
                    "available on %s; a change of the setting will not recompile graphs",
                    platform.current().name)
    return False


def _apply_torch_compile_mode(config: CompilerConfig, mode: Optional[str]) -> CompilerConfig:
    """The configuration's mode runs whatever torch.compile's ``mode=`` says; a mode that
    differs from it (not its alias) is named in a ``UserWarning``; an unknown name is an
    error. Returns ``config`` unchanged."""
    if mode is None or mode == "default":
        return config
    if mode not in MODES:
        raise ConfigError(f"torch.compile(mode={mode!r}) is not a torchair_dist mode; expected "
                          f"one of {list(MODES)} (or set CompilerConfig.mode)")
    ours = config.peek("mode")
    if _SAME_MODE.get(mode, mode) != _SAME_MODE.get(ours, ours):
        warnings.warn(f"torchair_dist: torch.compile(mode={mode!r}) differs from this backend's "
                      f"CompilerConfig.mode={ours!r}: {ours!r} runs (the configuration decides; "
                      f"pass mode=None to torch.compile, e.g. CompileConfig(mode=None) in "
                      f"transformers, or set CompilerConfig.mode)", UserWarning, stacklevel=3)
    return config


_SAME_MODE = {"reduce-overhead": "npugraph_ex"}  # the deprecated alias runs the same compiler


def _npu_backend(gm: torch.fx.GraphModule, example_inputs, *, compiler_config: CompilerConfig,
                 decompositions: Dict,
                 compiler_factory: Callable[[CompilerConfig], NpuFxCompiler] = get_compiler,
                 **kwargs: Any):
    """What torch.compile calls, once per Dynamo graph. ``compiler_factory`` makes the AOT
    compiler from the graph's private config (``cache_compile`` passes a recording one)."""
    install_determinism_guard()
    unknown = set(kwargs) - {"options", "mode"}
    if unknown:
        raise ConfigError(f"unexpected torch.compile arguments {sorted(unknown)}")
    # Work on a private copy: options= and the send/recv pass must not leak into the
    # backend's config object, which other compiles share.
    config = apply_compile_options(compiler_config, kwargs.get("options"))
    config = _apply_torch_compile_mode(config, kwargs.get("mode"))
    if config is compiler_config:
        config = config.copy()
    elif kwargs.get("options"):
        # options= changed the config: it gets the same honesty check and reduce-overhead's
        # deprecation warning as a CompilerConfig does.
        option_support.check_config_support(config, stacklevel=2)
    gm = pipeline.run_stages(config, "dynamo-pass", gm, config)
    compiler = compiler_factory(config)
    return pipeline.run_stages(config, "aot", gm, example_inputs, compiler, decompositions)


class NpuBackend(functools.partial):
    """What :func:`get_npu_backend` returns: ``functools.partial(_npu_backend,
    compiler_config=..., decompositions=...)`` that is the same backend after a copy.

    Dynamo reuses compiled code for a backend equal to the one that compiled it (its cache
    entries compare backends with ``==`` after identity), so two backends are equal when their
    configurations are described alike (the text the compile cache's key uses for a config:
    every option, a user pass by what its code is) and their custom decompositions are the
    same functions for the same ops (and, with thread ranks, they were made on the same rank);
    ``hash`` follows the same description. ``copy.copy`` and
    ``copy.deepcopy`` return the backend itself, as for a function; pickling stores the
    configuration and the custom decompositions (ops by name) and rebuilds the backend with
    :func:`get_npu_backend`. ``reset`` is Dynamo's hook: ``torch._dynamo.reset()`` calls it.
    """

    def __new__(cls, func, /, *args, custom: Mapping = {}, **keywords):  # noqa: B006
        self = super().__new__(cls, func, *args, **keywords)
        self._custom = dict(custom)  # what the merge used: later edits of the caller's dict
        self._custom_text = None     # do not change this backend
        # thread ranks (torch's threaded process group) share Dynamo's cache: a backend made
        # in a rank's thread is that rank's, or one rank's graph would run on the others
        self._thread_rank = calling_rank() if ranks_are_threads() else None
        self._described = None
        return self

    def reset(self) -> None:
        reset_process_state()  # our counters restart with Dynamo's

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        custom = [(_op_key(op), fn) for op, fn in self._custom.items()]
        return _rebuild_backend, (self.keywords["compiler_config"], custom)

    def description(self) -> str:
        """The text equality and hashing compare: the configuration's options described as
        the cache key describes them, then the custom decompositions. Kept while no option
        was assigned (anywhere in the process) and no list or dict value changed in place:
        Dynamo compares backends on every call of code that another, equal backend
        compiled."""
        config, cached = self.keywords["compiler_config"], self._described
        if cached is not None and config.unchanged_since(cached[0]):
            return cached[1]
        from ..cache.identity import callable_identity, config_parts

        if self._custom_text is None:
            self._custom_text = sorted(f"{_op_key(op)}={callable_identity(fn)}"
                                       for op, fn in self._custom.items())
        revision = config.revision()
        text = "\n".join(config_parts(config) + ["custom_decompositions:"] + self._custom_text)
        self._described = (revision, text)
        return text

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        if (self.keywords["compiler_config"] is other.keywords["compiler_config"]
                and self._custom == other._custom and self._thread_rank == other._thread_rank):
            return self.func is other.func  # one config object: described alike
        return (self.func is other.func and self._thread_rank == other._thread_rank
                and self.description() == other.description())

    def __hash__(self):
        return hash((self._thread_rank, self.description()))

    def __repr__(self):
        return f"NpuBackend({self.keywords['compiler_config']!r})"


def _op_key(op):
    """A decomposition table's key as pickling stores it (the op objects do not pickle) and
    equality describes it: an op overload or packet by its name (``aten.add.Tensor``,
    ``aten.add``), anything else as it is."""
    if isinstance(op, torch._ops.OpOverload):
        return ("overload", str(op))
    if isinstance(op, torch._ops.OpOverloadPacket):
        return ("packet", str(op))
    return ("key", op)


def _op_from_key(key):
    kind, value = key
    if kind == "key":
        return value
    namespace, name, *overload = value.split(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet if kind == "packet" else getattr(packet, overload[0])


def _rebuild_backend(compiler_config: CompilerConfig, custom) -> NpuBackend:
    """Unpickling: the backend :func:`get_npu_backend` makes for the stored arguments."""
    return get_npu_backend(compiler_config=compiler_config,
                           custom_decompositions={_op_from_key(k): fn for k, fn in custom})


def _named_mode_backend(mode: str):
    def backend(gm, example_inputs, **kwargs):
        config = CompilerConfig()
        config.mode = mode
        return get_npu_backend(compiler_config=config)(gm, example_inputs, **kwargs)

    backend.__name__ = f"torchair_dist_{mode.replace('-', '_')}"
    return backend


# Registered with Dynamo through entry points (pyproject.toml, group torch_dynamo_backends):
# torch.compile(m, backend="npugraph_ex", options={...}); by register_named_backends when the
# project runs from a source tree (no installed entry points).
npugraph_ex_backend = _named_mode_backend("npugraph_ex")
npu_backend = _named_mode_backend("max-autotune")
NAMED_BACKENDS = (("npugraph_ex", npugraph_ex_backend), ("torchair_dist", npu_backend))


def register_named_backends() -> list:
    """Register the named backends Dynamo does not know yet (the project imported from a
    source tree, e.g. ``make gpu-check PY=python3``, has no installed entry points); a name
    already known (our installed entry point, or another package's backend of that name)
    is left alone. Returns the names registered now."""
    known = set(torch._dynamo.list_backends(exclude_tags=()))
    done = []
    for name, fn in NAMED_BACKENDS:
        if name not in known:
            torch._dynamo.register_backend(fn, name)
            done.append(name)
    return done
