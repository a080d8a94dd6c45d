"""``torchair_dist.inference``: TorchAir's ``torchair.inference`` names.

* ``cache_compile``: :func:`torchair_dist.cache.cache_compile` (TorchAir's signature, ``**kwargs``
  included: ``fullgraph`` is used, other keywords are named in a warning; our default ``dynamic=False``;
  TorchAir's is ``True``, accepted with a warning: entries are static per input signature).
* ``readable_cache``: the graph of a cache entry as text.
* ``set_dim_gears``: TorchAir's GE "gears" (a dim takes one of a few sizes). Here the dims
  are marked dynamic for Dynamo (``torch._dynamo.mark_dynamic``) and
  the gears are kept on the tensor; no mode compiles per gear (a warning says so).
"""
from __future__ import annotations

import glob
import json
import logging
import os
from typing import Dict, List, Optional

import torch

from .cache import cache_compile
from .cache.graph_data import graph_from_data
from .errors import ConfigError

log = logging.getLogger("torchair_dist")

GEARS_ATTR = "_torchair_dim_gears"


def readable_cache(cache_bin: str, print_output: bool = True, file: Optional[str] = None) -> str:
    """The graphs stored under ``cache_bin`` as Python text: an ``entry-*.json`` file, or a
    directory of a ``cache_compile`` cache (every entry below it, sorted by path). Each entry
    shows its signature, versions and FX code. Printed when ``print_output``; written to
    ``file`` when given. Reads JSON only (no code of an entry runs)."""
    if os.path.isdir(cache_bin):
        paths = sorted(glob.glob(os.path.join(cache_bin, "**", "entry-*.json"), recursive=True))
        if not paths:
            raise ConfigError(f"readable_cache: no cache entry (entry-*.json) under {cache_bin}")
    else:
        paths = [cache_bin]
    text = "\n".join(_entry_text(p) for p in paths)
    if print_output:
        print(text)
    if file is not None:
        with open(file, "w") as f:
            f.write(text)
    return text


def _entry_text(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or "graph" not in data:
        raise ConfigError(f"readable_cache: {path} is not a torchair_dist cache entry "
                          f"(an entry-*.json file of a cache_compile directory)")
    gm = graph_from_data(data["graph"])
    return (f"# entry: {path}\n# signature: {data.get('signature')}\n"
            f"# versions: {data.get('versions')}\n{gm.code}")


def set_dim_gears(t: torch.Tensor, dim_gears: Dict[int, List[int]]) -> None:
    """Declare that dim ``d`` of ``t`` takes only the sizes ``dim_gears[d]``."""
    if not isinstance(t, torch.Tensor):
        raise ConfigError(f"set_dim_gears: expected a tensor, got {type(t).__name__}")
    if not isinstance(dim_gears, dict) or not dim_gears:
        raise ConfigError(f"set_dim_gears: dim_gears must be a non-empty dict "
                          f"{{dim: [sizes]}}, got {dim_gears!r}")
    for dim, gears in dim_gears.items():
        if not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
            raise ConfigError(f"set_dim_gears: dim {dim!r} is not a dim of a {t.dim()}-d "
                              f"tensor")
        if (not isinstance(gears, (list, tuple)) or not gears or
                not all(isinstance(g, int) and g > 0 for g in gears)):
            raise ConfigError(f"set_dim_gears: gears of dim {dim} must be a non-empty list of "
                              f"positive ints, got {gears!r}")
        dim = dim % t.dim()
        if len(set(gears)) > 1:
            torch._dynamo.mark_dynamic(t, dim)
    setattr(t, GEARS_ATTR, {d % t.dim(): sorted(set(g)) for d, g in dim_gears.items()})
    log.warning("set_dim_gears: the dims are marked dynamic; no per-gear graphs are compiled "
                "here (GE gears are an Ascend feature)")


__all__ = ["cache_compile", "readable_cache", "set_dim_gears"]
