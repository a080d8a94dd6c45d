"""The decomposition table of a backend: default -> user -> platform patches (last word)."""
from __future__ import annotations

from typing import Callable, Dict, Mapping

from ..collectives.decompositions import default_decompositions
from ..errors import ConfigTypeError
from .torch_patches import decomposition_patches


def merge_decompositions(custom: Mapping) -> Dict:
    """Merge the three tables in order; later tables override earlier entries."""
    if not isinstance(custom, Mapping):
        raise ConfigTypeError(f"custom_decompositions must be a dict of op -> function, got "
                              f"{type(custom).__name__}")
    for op, fn in custom.items():
        if not callable(fn):
            raise ConfigTypeError(f"custom_decompositions[{op}] is {fn!r}, not a function")
    merged: Dict[object, Callable] = dict(default_decompositions())
    merged.update(custom)
    merged.update(decomposition_patches())
    return merged
