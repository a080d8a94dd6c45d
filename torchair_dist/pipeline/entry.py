"""``get_npu_backend``: the torch.compile backend entry and its AOT wiring."""
from __future__ import annotations

import functools
import logging
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
from ..base.util import reset_process_state

log = logging.getLogger("torchair_dist")


def get_npu_backend(*, compiler_config: Optional[CompilerConfig] = None,
                    custom_decompositions: Mapping = {}):  # noqa: B006 - TorchAir's signature
    """A torch.compile backend for per-rank graph compilation.

    Args:
        compiler_config: the backend's ``CompilerConfig``; ``None`` makes a fresh default one.
        custom_decompositions: ``{op overload: function}`` merged over the defaults (platform
            patches still have the last word).

    Returns a new ``functools.partial`` over the backend entry on every call, so backends
    with different configs coexist in one process.
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
    backend = functools.partial(_npu_backend, compiler_config=compiler_config,
                                decompositions=decompositions)
    backend.reset = reset_process_state  # torch._dynamo.reset() calls it: our counters restart
    return backend


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
    if mode is None:
        return config
    if mode not in MODES:
        raise ConfigError(f"torch.compile(mode={mode!r}) is not a torchair_dist mode; expected "
                          f"one of {list(MODES)} (or set CompilerConfig.mode)")
    config = config.copy()
    config.mode = mode
    return config


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
    elif kwargs.get("options") or kwargs.get("mode") is not None:
        # options= or mode= changed the config: it gets the same honesty check and
        # reduce-overhead's deprecation warning as a CompilerConfig does.
        option_support.check_config_support(config, stacklevel=2)
    gm = pipeline.run_stages(config, "dynamo-pass", gm, config)
    compiler = compiler_factory(config)
    return pipeline.run_stages(config, "aot", gm, example_inputs, compiler, decompositions)


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
