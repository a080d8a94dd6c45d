"""send/recv preprocessing of the Dynamo graph (before AOT).

The remap (:mod:`.remap`) captures every point-to-point call as ``torchair_dist.send`` /
``torchair_dist.recv`` (see :mod:`.collective_ops`). By construction:

* **program order** — they are side-effectful ops, emitted in program order; FX node order is
  that order, and nothing drops them (``has_side_effect``);
* **receive buffer** — ``recv`` returns a fresh tensor that the remap ``wait_tensor``s and copies
  into the user's buffer, so every later reader of the buffer depends on the receive (no pass can
  read the buffer before the data is there; TorchAir/stock ``irecv`` leave no such edge).

:func:`assign_tags` adds what needs the whole graph (the ``send_recv`` stage,
:mod:`torchair_dist.passes.send_recv`, runs it):

* **tags identical on both ranks** — the n-th message from rank ``a`` to rank ``b`` with user tag
  ``t`` on a group gets tag ``t * TAG_STRIDE + n`` on the sender AND on the receiver (each counts
  its own sends to ``b`` / receives from ``a``), so pairs match by position whatever order the
  program interleaves channels in — what HCCL/GE ``sr_tag`` matching needs;
* **max-autotune** — with more than one p2p op, GE's topological ordering is switched to
  ``"StableRDFS"`` (keeps program order) with a ``UserWarning``, as TorchAir does
  (the ``p2p_order`` stage in :mod:`torchair_dist.passes.send_recv`, GE mode only).
"""
from __future__ import annotations

import collections
import logging
from typing import Dict, Tuple

import torch

from ..errors import CollectiveCaptureError
from ..base.util import current_rank_and_world, op_name
from . import spec

log = logging.getLogger("torchair_dist")

TAG_STRIDE = 1 << 12  # sequence numbers per (channel, user tag); user tags must stay below 2**19

# From the spec table: every p2p op, and the ones whose tags we assign (this library's
# send/recv, which the remap emits) by op name -> spec row.
P2P_OPS = frozenset(op for op, row in spec.SPECS.items() if row.p2p)
TAGGED = {op: row for op, row in spec.SPECS.items()
          if row.p2p in ("send", "recv") and row.namespace == spec.NAMESPACE}


def _arg(node: torch.fx.Node, index: int, name: str):
    return node.args[index] if len(node.args) > index else node.kwargs[name]


def _set_arg(node: torch.fx.Node, index: int, name: str, value) -> None:
    if len(node.args) > index:
        args = list(node.args)
        args[index] = value
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, name: value}


def assign_tags(gm: torch.fx.GraphModule) -> int:
    """Rewrite the tag of every send/recv to ``user_tag * TAG_STRIDE + n``; returns the count."""
    me, _ = current_rank_and_world()
    counters: Dict[Tuple, int] = collections.defaultdict(int)
    count = 0
    for node in gm.graph.nodes:
        name = op_name(node.target) if node.op == "call_function" else ""
        row = TAGGED.get(name)
        if row is None:
            continue
        sends = row.p2p == "send"
        peer = _arg(node, row.peer_arg, "dst" if sends else "src")
        tag = _arg(node, row.tag_arg, "tag")
        group = _arg(node, row.group_arg, "group_name")
        if not isinstance(peer, int) or not isinstance(tag, int):
            raise CollectiveCaptureError(
                f"{name} in {node.format_node()} has a non-constant peer or tag; p2p peers and "
                f"tags must be Python ints at trace time")
        if not 0 <= tag < (1 << 19):
            raise CollectiveCaptureError(f"{name}: tag {tag} out of range [0, 2**19)")
        channel = (me, peer) if sends else (peer, me)  # (sender, receiver)
        key = (channel, tag, group)
        _set_arg(node, row.tag_arg, "tag", tag * TAG_STRIDE + counters[key])
        counters[key] += 1
        count += 1
    if count:
        gm.recompile()
    return count


def count_p2p(gm: torch.fx.GraphModule) -> int:
    names = (op_name(n.target) for n in gm.graph.nodes if n.op == "call_function")
    return sum(1 for n in names if n in P2P_OPS)
