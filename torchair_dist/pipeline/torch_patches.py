"""Platform patches: one table, applied once per process, each a named function.

TorchAir's ``add_npu_patch`` bundles meta/decomposition fixes, forced graph breaks for
debugging and extra FX passes. Ours are the ones that matter on torch 2.13 for multi-card
graphs; each entry says what it fixes. ``decomposition_patches`` contributes to the
decomposition table last, so patches have the final word over default and user entries.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable, Dict, List

import torch

log = logging.getLogger("torchair_dist")

BREAK_GRAPH_ENV = "TORCHAIR_DIST_BREAK_GRAPH_OPS"


@dataclasses.dataclass(frozen=True)
class Patch:
    name: str
    apply: Callable[[], None]
    doc: str


def patch_enable_p2p_compilation() -> None:
    """Let Dynamo trace isend/irecv/batch_isend_irecv (off by default in torch 2.13; torch 2.11
    has no such switch, and nothing to set)."""
    from ..base.torch_support import p2p_compilation_switch

    if p2p_compilation_switch():
        torch._dynamo.config.enable_p2p_compilation = True


def patch_break_graph_ops() -> None:
    """Force a graph break at each callable named in $TORCHAIR_DIST_BREAK_GRAPH_OPS.

    A debugging aid (TorchAir's BREAK_GRAPH_OP_LIST): e.g.
    ``TORCHAIR_DIST_BREAK_GRAPH_OPS=torch.nn.functional.gelu`` runs gelu outside the graph,
    to bisect which op of a graph misbehaves.
    """
    for qualname in filter(None, os.environ.get(BREAK_GRAPH_ENV, "").split(",")):
        target = resolve_qualname(qualname.strip())
        torch._dynamo.disallow_in_graph(target)
        log.info("forcing a graph break at %s (%s)", qualname, BREAK_GRAPH_ENV)


def resolve_qualname(qualname: str):
    """``"torch.nn.functional.gelu"`` -> the object; a clear error when it does not exist."""
    from ..errors import ConfigError
    from ..base.util import resolve_dotted

    obj = resolve_dotted(qualname) if "." in qualname else None
    if obj is not None:
        return obj
    raise ConfigError(f"{BREAK_GRAPH_ENV}: cannot find {qualname!r}; use a dotted name such as "
                      f"torch.nn.functional.gelu")


PATCHES: List[Patch] = [
    Patch("enable_p2p_compilation", patch_enable_p2p_compilation,
          patch_enable_p2p_compilation.__doc__.strip()),
    Patch("break_graph_ops", patch_break_graph_ops, "forced graph breaks for debugging"),
]

_applied: Dict[str, bool] = {}


def apply_platform_patches() -> List[str]:
    """Apply every patch not yet applied in this process; returns the names applied now."""
    done = []
    for patch in PATCHES:
        if not _applied.get(patch.name):
            patch.apply()
            _applied[patch.name] = True
            done.append(patch.name)
    return done


def decomposition_patches() -> Dict:
    """Decompositions the platform insists on (merged last).

    ``aten.linalg_vector_norm`` has no GE converter and, left whole, would stop RMS-norm
    models in max-autotune; decomposing it keeps every backend on basic ops.
    """
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return dict(get_decompositions([aten.linalg_vector_norm]))
