"""The one GE converter registry: aten/collective op -> converter, and the GE ops it emits.

A converter is ``fn(cx, *args, **kwargs)``: ``cx`` is the :class:`~.context.ConvertContext` of
the FX node being converted, ``args``/``kwargs`` are the node's arguments with every FX node
replaced by what it was converted to (a ``TensorRef``, a list of them, or a Python value).
It returns a ``TensorRef`` (or a list/tuple of them) standing for the node's value.

Each entry declares the GE op types it may emit (``emits``); a test checks that every declared
type exists in the operator registry and that converted graphs only use declared types.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch


@dataclasses.dataclass(frozen=True)
class Converter:
    target: str          # "aten.add.Tensor" (one overload) or "aten.add" (all overloads)
    fn: Callable[..., Any]
    emits: Tuple[str, ...]


CONVERTERS: Dict[str, Converter] = {}


def target_key(target: Any) -> str:
    """The registry key of an FX call_function target (OpOverload, packet or Python callable)."""
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target.name().split("::", 1)
        return f"{ns}.{name}" if "." in name else f"{ns}.{name}.default"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target).replace("::", ".")
    mod = getattr(target, "__module__", "") or ""
    return f"{mod.replace('_operator', 'operator')}.{getattr(target, '__name__', repr(target))}"


def register(targets: Iterable[Any], emits: Iterable[str]) -> Callable:
    """Decorator: register ``fn`` for each target (OpOverload, OpOverloadPacket or callable)."""
    emits = tuple(emits)

    def deco(fn: Callable) -> Callable:
        for t in targets:
            key = t if isinstance(t, str) else target_key(t)
            if key in CONVERTERS:
                raise RuntimeError(f"two GE converters registered for {key}")
            CONVERTERS[key] = Converter(key, fn, emits)
        return fn

    return deco


def lookup(target: Any) -> Optional[Converter]:
    key = target_key(target)
    conv = CONVERTERS.get(key)
    if conv is None and isinstance(target, torch._ops.OpOverload):
        conv = CONVERTERS.get(key.rsplit(".", 1)[0])  # packet-level registration
    return conv
