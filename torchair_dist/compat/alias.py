"""Run code written for TorchAir unchanged: ``torchair_dist.install_torchair_alias()`` makes
``import torchair`` and every ``from torchair.x import y`` resolve to torchair_dist's own
modules.

One step, one copy of each module: ``sys.modules["torchair"]`` becomes the ``torchair_dist``
package object, every ``torchair_dist.*`` module already imported is registered under its
``torchair.*`` name, and a finder on ``sys.meta_path`` answers any later ``torchair.<path>``
import with the module ``torchair_dist.<path>`` (imported once, under its own name, then
registered under both). So ``torchair.configs.compiler_config.CompilerConfig is
torchair_dist.CompilerConfig``, and a config made through either name is accepted by both.
TorchAir paths that have no module of that name here are namespaces made at install whose
attributes are our objects (``torchair.core.utils.logger``, ``torchair.experimental.inference``);
like any imported submodule they are also attributes of their parent (so ``torchair_dist.core``
exists once the alias is installed).

Never shadows TorchAir: when a real ``torchair`` package can be imported (it is on the path, or
already imported), :func:`install_torchair_alias` raises :class:`~torchair_dist.errors.ConfigError`
naming where it is; use it, or ``import torchair_dist as torchair``. Calling it again is a no-op.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Optional

from ..errors import ConfigError

PACKAGE = __name__.split(".")[0]  # "torchair_dist"
ALIAS = "torchair"

# TorchAir module paths with no torchair_dist module of that name: the names each one holds,
# as "torchair_dist module:attribute".
EXTRA_PATHS = {
    "torchair.core": {},
    "torchair.core.utils": {"logger": "torchair_dist.compat.names:logger"},
    "torchair.experimental": {},
    "torchair.experimental.inference": {
        "use_internal_format_weight": "torchair_dist.compat.names:use_internal_format_weight",
        "npu_format_cast_via_cpu": "torchair_dist.compat.names:npu_format_cast_via_cpu"},
}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``torchair.<path>`` with the already-imported module ``torchair_dist.<path>``."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(ALIAS + "."):
            return None
        real_name = PACKAGE + fullname[len(ALIAS):]
        try:
            real = importlib.import_module(real_name)
        except ModuleNotFoundError as exc:
            if exc.name == real_name:
                return None  # torchair.<path> that torchair_dist does not have
            raise
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=hasattr(real,
                                                                                 "__path__"))
        spec.loader_state = (real, real.__spec__)
        return spec

    def create_module(self, spec):
        return spec.loader_state[0]

    def exec_module(self, module):
        # the import system has just set __spec__ to the alias spec: the module keeps its own
        module.__spec__ = module.__spec__.loader_state[1]


def _finder() -> Optional[_AliasFinder]:
    return next((f for f in sys.meta_path if isinstance(f, _AliasFinder)), None)


def real_torchair_origin() -> Optional[str]:
    """Where a real (non-alias) ``torchair`` package is, None when there is none."""
    loaded = sys.modules.get(ALIAS)
    if loaded is not None:
        return None if loaded is sys.modules[PACKAGE] else (
            getattr(loaded, "__file__", None) or repr(loaded))
    finder = _finder()
    if finder is not None:  # not ours to ask: find_spec would only see the alias
        sys.meta_path.remove(finder)
    try:
        spec = importlib.util.find_spec(ALIAS)
    except (ImportError, ValueError):
        spec = None
    finally:
        if finder is not None:
            sys.meta_path.insert(0, finder)
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or ()) or ALIAS


def _resolve(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def install_torchair_alias() -> types.ModuleType:
    """Register torchair_dist as ``torchair`` (see the module docstring); returns the package.

    Raises ``ConfigError`` when a real TorchAir is importable: the alias never shadows it."""
    package = sys.modules[PACKAGE]  # loaded: this module is inside it
    if sys.modules.get(ALIAS) is package and _finder() is not None:
        return package
    origin = real_torchair_origin()
    if origin is not None:
        raise ConfigError(
            f"install_torchair_alias: a real TorchAir is installed ({origin}); torchair_dist "
            f"does not shadow it. Use TorchAir, or `import torchair_dist as torchair` in your "
            f"own code, or uninstall TorchAir to run TorchAir code on torchair_dist")
    sys.modules[ALIAS] = package
    for name, module in list(sys.modules.items()):
        if name.startswith(PACKAGE + ".") and module is not None:
            sys.modules.setdefault(ALIAS + name[len(PACKAGE):], module)
    for name, attrs in EXTRA_PATHS.items():
        if name not in sys.modules:
            namespace = types.ModuleType(name, f"TorchAir's {name}: names of torchair_dist")
            for attr, target in attrs.items():
                setattr(namespace, attr, _resolve(target))
            sys.modules[name] = namespace
        parent, _, child = name.rpartition(".")
        if not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, sys.modules[name])
    if _finder() is None:
        sys.meta_path.insert(0, _AliasFinder())
    return package


__all__ = ["install_torchair_alias", "real_torchair_origin", "EXTRA_PATHS"]
