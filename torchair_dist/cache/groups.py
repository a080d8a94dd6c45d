"""Process groups in cache entries and keys: named by their ranks (and tag), never by c10d's
creation-order names.

A graph from Dynamo names a group by c10d's name (``"0"``, ``"1"``, ... in creation order), so
the same name can be another group in another job (one that created an extra group first). An
entry therefore stores each operator argument that is a group name as
``{"group": {"ranks": [...], "tag": "...", "form": "c10d" | "stable"}}`` (``form``: what the
operator was given: a c10d name or a :mod:`torchair_dist.collectives.groups` stable name), and
the loader rebinds it to *this* job's group with the same ranks and tag (:func:`rebind`); an
entry whose group this job has not created is refused (:class:`CacheRejectedError`, then
recompiled) — never run on another group.

Keys hash groups the same way: the groups (and device meshes) a module holds as attributes,
DTensor meshes and group arguments of a call enter the keys as their ranks.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from ..collectives import groups as cgroups
from ..collectives.spec import group_arg_position  # noqa: F401 - graph_data reads it here
from ..errors import CacheRejectedError, CollectiveCaptureError, NotCacheableError


class GroupRef:
    """A group argument of a graph node as the entry stores it."""

    __slots__ = ("ranks", "tag", "form")

    def __init__(self, ranks: List[int], tag: str, form: str):
        self.ranks, self.tag, self.form = ranks, tag, form

    def data(self) -> Dict[str, Any]:
        return {"group": {"ranks": list(self.ranks), "tag": self.tag, "form": self.form}}


def to_ref(name: Any, node_name: str) -> GroupRef:
    """The rank-based description of the group ``name`` (a c10d or a stable name) has in this
    process; NotCacheableError when it names no group here."""
    if isinstance(name, dist.ProcessGroup):
        name = name.group_name
    if not isinstance(name, str):
        raise NotCacheableError(f"node {node_name}: group argument {name!r} is not a name")
    if name.startswith("tag="):
        tag, ranks = cgroups.parse_group_name(name)
        return GroupRef(ranks, tag, "stable")
    try:
        pg = cgroups.to_process_group(name)
        return GroupRef(cgroups.ranks_of(pg), cgroups.tag_of(pg), "c10d")
    except Exception as exc:  # noqa: BLE001 - an unknown name: the entry cannot describe it
        raise NotCacheableError(f"node {node_name}: process group {name!r} cannot be "
                                f"described by its ranks ({exc})") from None


def rebind(data: Any) -> str:
    """The name *this* job gives the stored group (its c10d name, or the stable name, as the
    operator was given); CacheRejectedError when this job has no group with those ranks."""
    if not (isinstance(data, dict) and isinstance(data.get("ranks"), list) and data["ranks"]
            and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                    for r in data["ranks"])
            and isinstance(data.get("tag"), str) and data.get("form") in ("c10d", "stable")):
        raise CacheRejectedError(f"malformed process-group record {data!r}")
    ranks, tag = data["ranks"], data["tag"]
    stable = cgroups.stable_group_name(ranks, tag)
    if not dist.is_initialized():
        raise CacheRejectedError(f"the entry uses process group {ranks} but torch.distributed "
                                 f"is not initialised in this process")
    try:
        pg = cgroups.resolve(stable)
    except CollectiveCaptureError:
        raise CacheRejectedError(
            f"the entry uses a process group with ranks {ranks}"
            f"{f' and tag {tag!r}' if tag else ''}, which this job (rank {dist.get_rank()}) "
            f"has not created; entries name groups by their ranks, not by c10d's "
            f"creation-order names. Create it with torch.distributed.new_group({ranks}) "
            f"before the first call to use the entry") from None
    return pg.group_name if data["form"] == "c10d" else stable


# ----------------------------------------------------------------------------------- keys
def describe(value: Any) -> Optional[str]:
    """A rank-based description of a ProcessGroup / DeviceMesh (None for anything else)."""
    if isinstance(value, dist.ProcessGroup):
        return "group:" + cgroups.stable_name_of(value)
    mesh_cls = _device_mesh_cls()
    if mesh_cls is not None and isinstance(value, mesh_cls):
        return f"mesh:{value.mesh.tolist()}:{getattr(value, 'mesh_dim_names', None)}"
    return None


def _device_mesh_cls():
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:  # pragma: no cover - builds without distributed
        return None
    return DeviceMesh


def module_groups(module: torch.nn.Module) -> List[str]:
    """``"<submodule>.<attr>=<ranks>"`` for every ProcessGroup / DeviceMesh a submodule holds
    as an attribute (directly or in a list/tuple/dict), sorted."""
    found = []
    for prefix, m in module.named_modules(remove_duplicate=False):
        for attr, value in vars(m).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            items = (value.items() if isinstance(value, dict) else
                     enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)])
            for k, v in items:
                desc = describe(v)
                if desc is not None:
                    found.append(f"{prefix}.{attr}{'' if k is None else f'[{k!r}]'}={desc}")
    return sorted(found)
