"""Stable process-group names.

c10d names groups by creation order ("0", "1", ...), which is only stable while every process
creates its groups in the same order. The graph backends (GE attributes, export, the compile
cache, the cross-rank check) need a name that is a pure function of what the group *is*, so we
derive it from the group's tag and its global ranks::

    stable_group_name([0, 1])            -> "tag=;ranks=0,1"
    stable_group_name([0, 2], "tp")      -> "tag=tp;ranks=0,2"

The name is identical on every rank and in every process, and :func:`resolve` maps it back to
a live ``ProcessGroup`` (the default group when the ranks are the whole world).
"""
from __future__ import annotations

from typing import List, Sequence, Union

import torch.distributed as dist

from ..errors import CollectiveCaptureError

GroupLike = Union[None, str, "dist.ProcessGroup"]

_PREFIX_TAG = "tag="
_PREFIX_RANKS = "ranks="


def stable_group_name(ranks: Sequence[int], tag: str = "") -> str:
    """The stable name of the group with these global ranks (order kept) and tag."""
    if not ranks:
        raise CollectiveCaptureError("a process group needs at least one rank")
    return f"{_PREFIX_TAG}{tag};{_PREFIX_RANKS}{','.join(str(int(r)) for r in ranks)}"


def parse_group_name(name: str) -> tuple:
    """Inverse of :func:`stable_group_name`: ``(tag, [ranks])``."""
    try:
        tag_part, rank_part = name.split(";", 1)
        if not (tag_part.startswith(_PREFIX_TAG) and rank_part.startswith(_PREFIX_RANKS)):
            raise ValueError
        ranks = [int(r) for r in rank_part[len(_PREFIX_RANKS):].split(",")]
    except ValueError:
        raise CollectiveCaptureError(
            f"{name!r} is not a torchair_dist group name; expected 'tag=<tag>;ranks=<r0>,<r1>,...'"
        ) from None
    return tag_part[len(_PREFIX_TAG):], ranks


def to_process_group(group: GroupLike) -> "dist.ProcessGroup":
    """A live ProcessGroup from None (WORLD), a ProcessGroup, a c10d name or a stable name."""
    if group is None:
        return dist.group.WORLD
    if isinstance(group, str):
        if group.startswith(_PREFIX_TAG):
            return resolve(group)
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(group)
    return group


def ranks_of(group: GroupLike) -> List[int]:
    """Global ranks of a group, in group-rank order."""
    pg = to_process_group(group)
    return list(dist.get_process_group_ranks(pg))


def tag_of(group: GroupLike) -> str:
    """The user tag of a group ('' for the default group and untagged groups)."""
    pg = to_process_group(group)
    if pg is dist.group.WORLD:
        return ""
    from torch.distributed.distributed_c10d import _get_group_tag

    tag = _get_group_tag(pg)
    # c10d gives untagged groups the synthetic tag "ptd:<c10d name>", which is creation-order
    # dependent; it is dropped so the stable name depends on the ranks only.
    return "" if tag.startswith("ptd:") else tag


def stable_name_of(group: GroupLike) -> str:
    """The stable name of a group given as None, a ProcessGroup or a (c10d or stable) name."""
    if isinstance(group, str) and group.startswith(_PREFIX_TAG):
        return group
    return stable_group_name(ranks_of(group), tag_of(group))


def resolve(name: str) -> "dist.ProcessGroup":
    """The live ProcessGroup a stable name refers to (found, never created).

    Raises CollectiveCaptureError naming the ranks when this process has no such group: the
    program must create it with ``dist.new_group(ranks)`` before the compiled graph runs.
    """
    tag, ranks = parse_group_name(name)
    if not dist.is_initialized():
        raise CollectiveCaptureError(
            f"group {name!r} used before torch.distributed.init_process_group()"
        )
    if ranks == list(range(dist.get_world_size())) and tag == "":
        return dist.group.WORLD
    from torch.distributed import distributed_c10d as c10d

    for pg in c10d._world.pg_map:
        if pg is dist.group.WORLD and tag:
            continue
        if list(dist.get_process_group_ranks(pg)) == ranks and tag_of(pg) == tag:
            return pg
    raise CollectiveCaptureError(
        f"no process group with ranks {ranks} and tag {tag!r} exists in this process; "
        f"create it with torch.distributed.new_group({ranks}) on every rank first"
    )


_hccl_warned: set = set()


def ge_group_attr(group: GroupLike) -> str:
    """The ``group`` attribute GE gets for a group: on Ascend (torch_npu) the HCCL communicator
    name, read lazily at conversion (``pg._get_backend(npu).get_hccl_comm_name(rank)``);
    elsewhere — and, with one warning, when the communicator cannot be read — the stable
    rank-based name, which the reference GE runtime resolves."""
    stable = stable_name_of(group)
    from .. import platform

    if not platform.current().runs_ge_natively:
        return stable
    try:
        import torch

        pg = resolve(stable)
        return pg._get_backend(torch.device("npu")).get_hccl_comm_name(dist.get_rank())
    except Exception as exc:  # noqa: BLE001 - degrade to the stable name, clearly
        if stable not in _hccl_warned:
            _hccl_warned.add(stable)
            import logging

            logging.getLogger("torchair_dist").warning(
                "no HCCL communicator name for group %s (%s); GE gets the rank-based name, "
                "which only the reference runtime resolves", stable, exc)
        return stable
