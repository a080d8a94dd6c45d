"""The shared-memory twins of the CPU collectives, and the graph rewrite that points a runner's
copy of a graph at them (``distributed_config.cpu_shm_collectives``; the transport itself is
:mod:`.shm`).

The twins are ``torchair_dist::shm_all_reduce``, ``shm_all_reduce_`` and ``shm_all_to_all_v``:
the same arguments as the collective they replace, a finished result (no ``wait_tensor``). They
only ever appear in the runner's copy of a CPU graph, after the cross-rank check fingerprinted
the original, so the compile cache and export never see them. They are defined here, in the
``torchair_dist`` op namespace, with rows in the collectives' spec table (added when this module
is imported), so every pass and the record capture treat them as collectives.
"""
from __future__ import annotations

import copy
import dataclasses
import logging

import torch

from ..collectives import spec
from ..collectives.collective_ops import a2a_output_shape
from ..base.util import op_name
from . import shm
from .shm import DTYPES, REDUCE_OPS

log = logging.getLogger("torchair_dist")

_TD = spec.NAMESPACE + "::"
_REDUCE = (("reduce", 1),)
ROWS = (
    spec.CollectiveSpec(_TD + "shm_all_reduce", None, 0, 2, _REDUCE,
                        inplace_twin=_TD + "shm_all_reduce_",
                        schema="shm_all_reduce(Tensor input, str reduce_op, str group_name) "
                               "-> Tensor"),
    spec.CollectiveSpec(_TD + "shm_all_reduce_", None, 0, 2, _REDUCE, inplace=True,
                        schema="shm_all_reduce_(Tensor(a!) input, str reduce_op, "
                               "str group_name) -> Tensor(a!)"),
    spec.CollectiveSpec(_TD + "shm_all_to_all_v", None, 0, 5, rank_varying_dim0=True,
                        schema="shm_all_to_all_v(Tensor input, SymInt[] send_counts, "
                               "SymInt[] send_displacements, SymInt[] recv_counts, "
                               "SymInt[] recv_displacements, str group_name) -> Tensor"),
)


def _all_reduce_inplace(input, reduce_op, group_name):
    return shm.all_reduce_(input, reduce_op, group_name)


def _all_reduce(input, reduce_op, group_name):
    return shm.all_reduce_(input.clone(memory_format=torch.contiguous_format), reduce_op,
                           group_name)


def _all_to_all_v(input, send_counts, send_displacements, recv_counts, recv_displacements,
                  group_name):
    return shm.all_to_all_v(input, send_counts, send_displacements, recv_counts,
                            recv_displacements, group_name)


def _all_reduce_inplace_fake(input, reduce_op, group_name):
    return input


def _all_reduce_fake(input, reduce_op, group_name):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _all_to_all_v_fake(input, send_counts, send_displacements, recv_counts, recv_displacements,
                       group_name):
    return input.new_empty(a2a_output_shape(input, recv_counts))


_KERNELS = {"shm_all_reduce": (_all_reduce, _all_reduce_fake),
            "shm_all_reduce_": (_all_reduce_inplace, _all_reduce_inplace_fake),
            "shm_all_to_all_v": (_all_to_all_v, _all_to_all_v_fake)}

_lib = torch.library.Library(spec.NAMESPACE, "FRAGMENT")


def _register() -> None:
    spec.add_rows(ROWS)
    namespace = getattr(torch.ops, spec.NAMESPACE)
    for row in ROWS:
        if hasattr(namespace, row.name):
            continue
        _lib.define(row.schema, tags=(torch.Tag.pt2_compliant_tag,))
        eager, fake = _KERNELS[row.name]
        _lib.impl(row.name, eager, "CompositeExplicitAutograd")
        torch.library.register_fake(row.op, fake, lib=_lib)


_register()

_REWRITES = {
    "_c10d_functional::all_reduce_": "shm_all_reduce_",
    "_c10d_functional::all_reduce": "shm_all_reduce",
    "torchair_dist::all_to_all_v": "shm_all_to_all_v",
}


def rewrite_graph(gm: torch.fx.GraphModule, functional: bool = False) -> int:
    """Point the CPU collectives of ``gm`` that the transport covers at it, in place: the
    op becomes its ``torchair_dist::shm_*`` twin (same arguments, a finished result) and its
    ``wait_tensor`` goes. ``functional``: an in-place all_reduce becomes the functional twin
    (inductor cannot call an op that returns its mutated input; the re-inplacing pass only
    made it in place because nothing reads the input afterwards). Returns how many were
    rewritten."""
    done, kept = 0, []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        twin = _REWRITES.get(name)
        if twin is None:
            if spec.spec_of(node.target) is not None and name not in spec.WAIT_OPS:
                kept.append(f"{node.name} ({name}: not covered)")
            continue
        val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.device.type != "cpu" \
                or val.dtype not in DTYPES:
            kept.append(f"{node.name} ({getattr(val, 'dtype', '?')} on "
                        f"{getattr(val, 'device', '?')})")
            continue
        if twin != "shm_all_to_all_v" and node.args[1] not in REDUCE_OPS:
            kept.append(f"{node.name} (reduce op {node.args[1]!r})")
            continue
        if functional and twin == "shm_all_reduce_":
            twin = "shm_all_reduce"
        node.target = getattr(torch.ops.torchair_dist, twin).default
        for user in list(node.users):
            if user.op == "call_function" and op_name(user.target) == \
                    "_c10d_functional::wait_tensor":
                user.replace_all_uses_with(node)
                gm.graph.erase_node(user)
        done += 1
    if kept:
        log.debug("collectives that stay on gloo: %s", ", ".join(kept))
    if done:
        gm.recompile()
    return done


def for_runner(ctx, functional: bool = False):
    """``ctx`` with a rewritten copy of its graph (the route's ``shm_collectives`` stage chose
    this transport: on CPU, with the option on); ``ctx`` itself (and when nothing in the graph is covered). The
    original graph stays what the cross-rank check, the cache and export see.
    ``functional``: see :func:`rewrite_graph` (inductor compiles the graph)."""
    gm = torch.fx.GraphModule(ctx.gm, copy.deepcopy(ctx.gm.graph))
    n = rewrite_graph(gm, functional)
    if not n:
        return ctx
    log.debug("%s: %d collective(s) exchange through shared memory", ctx.graph_name, n)
    return dataclasses.replace(ctx, gm=gm)
