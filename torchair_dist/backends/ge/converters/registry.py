"""The one GE converter registry: aten/collective op -> converter, and the GE ops it emits.

A converter is ``fn(cx, *args, **kwargs)``: ``cx`` is the :class:`~.context.ConvertContext` of
the FX node being converted, ``args``/``kwargs`` are the node's arguments with every FX node
replaced by what it was converted to (a ``TensorRef``, a list of them, or a Python value).
It returns a ``TensorRef`` (or a list/tuple of them) standing for the node's value.

Every entry goes through :func:`register` (one converter per key: a second one is an error) or
:func:`alias` (a target converted exactly as another one, resolved when looked up, so the order
the converter modules are imported in does not matter). Each entry declares the GE op types it
may emit (``emits``); before the first lookup every declared type is checked against the
operator registry in use (:func:`validate`): a type it does not know is an error then, not a
silent pass later. A test checks that converted graphs only use declared types.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch

from ....errors import TorchairDistError


class ConverterIrError(TorchairDistError, RuntimeError):
    """A converter and the GE operator IR disagree (an op type or port the registry lacks)."""


@dataclasses.dataclass(frozen=True)
class Converter:
    target: str          # "aten.add.Tensor" (one overload) or "aten.add" (all overloads)
    fn: Callable[..., Any]
    emits: Tuple[str, ...]


CONVERTERS: Dict[str, Converter] = {}
ALIASES: Dict[str, str] = {}  # key -> the key of the converter it is converted as
_unchecked: list = []  # keys registered since the last validate()


def target_key(target: Any) -> str:
    """The registry key of an FX call_function target (OpOverload, packet or Python callable)."""
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target.name().split("::", 1)
        return f"{ns}.{name}" if "." in name else f"{ns}.{name}.default"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target).replace("::", ".")
    mod = getattr(target, "__module__", "") or ""
    return f"{mod.replace('_operator', 'operator')}.{getattr(target, '__name__', repr(target))}"


def _claim(key: str) -> None:
    if key in CONVERTERS or key in ALIASES:
        raise ConverterIrError(f"two GE converters registered for {key}")


def register(targets: Iterable[Any], emits: Iterable[str]) -> Callable:
    """Decorator: register ``fn`` for each target (OpOverload, OpOverloadPacket or callable)."""
    emits = tuple(emits)

    def deco(fn: Callable) -> Callable:
        for t in targets:
            key = target_key(t)
            _claim(key)
            CONVERTERS[key] = Converter(key, fn, emits)
            _unchecked.append(key)
        return fn

    return deco


def alias(target: Any, of: Any) -> None:
    """Convert ``target`` exactly as ``of`` (e.g. a ``prims`` op as its aten twin). Resolved at
    lookup, so ``of``'s converter may be registered before or after this call."""
    key = target_key(target)
    _claim(key)
    ALIASES[key] = target_key(of)


def unregister(key: str) -> None:
    """Remove a user's registration (``torchair_dist.ge``'s undo for tests and re-registration)."""
    CONVERTERS.pop(key, None)
    ALIASES.pop(key, None)


def validate() -> None:
    """Check every converter registered since the last call: each declared GE op type is in the
    operator registry in use (a ConverterIrError lists the ones that are not)."""
    if not _unchecked:
        return
    from ..registry_check import load_registry

    known = load_registry()
    missing = {}
    for key in _unchecked:
        conv = CONVERTERS.get(key)
        if conv is not None:
            bad = [t for t in conv.emits if t not in known]
            if bad:
                missing[key] = bad
    if missing:
        raise ConverterIrError(
            "GE converters declare op types the operator registry in use does not know: "
            + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(missing.items()))
            + " (fix the op type, or regenerate the bundled subset with `make registry`)")
    _unchecked.clear()


def resolve(key: str) -> Optional[Converter]:
    """The converter registered under ``key``, following an alias."""
    conv = CONVERTERS.get(key)
    if conv is None and key in ALIASES:
        target = CONVERTERS.get(ALIASES[key])
        conv = None if target is None else Converter(key, target.fn, target.emits)
    return conv


def lookup(target: Any) -> Optional[Converter]:
    validate()
    key = target_key(target)
    conv = resolve(key)
    if conv is None and isinstance(target, torch._ops.OpOverload):
        conv = resolve(key.rsplit(".", 1)[0])  # packet-level registration
    return conv


def all_converters() -> Dict[str, Converter]:
    """Every registered key with its converter (aliases resolved)."""
    keys = list(CONVERTERS) + [k for k in ALIASES if resolve(k) is not None]
    return {k: resolve(k) for k in keys}
