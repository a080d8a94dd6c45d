"""The one table of per-collective facts: :data:`SPECS`, one :class:`CollectiveSpec` per op.

Every consumer reads it instead of keeping its own list:

* the cross-rank check (:mod:`.consistency`): which ops its fingerprint records, under what name,
  from which argument (dtype/shape), with which extra fields (reduce op, root, peer, tag);
* the ``torchair_dist::`` op library (:mod:`.collective_ops`): the schemas it defines and which ops are
  side-effectful;
* send/recv preprocessing (:mod:`.p2p`): the p2p ops, their role, peer and tag arguments;
* the overlap scheduler and the deadlock check (``passes.overlap``): the communication
  namespaces and the wait ops;
* re-inplacing (``passes.reinplace``): a functional op's in-place twin;
* the compile cache (``cache.groups``): which argument is the group;
* the GE converters (``backends.ge.converters.collectives*``): the Hcom op(s) an op becomes.

Argument positions are positions in the op's schema (what ``node.args`` holds);
``tests/unit/test_collectives_spec.py`` checks every row against the registered schemas and that
each consumer's view is derived from this table.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, FrozenSet, Optional, Tuple

import torch
import torch.distributed as dist

from ..base.torch_support import functional_p2p_ops
from ..base.util import op_name

NAMESPACE = "torchair_dist"           # the namespace of our own op library (:mod:`.collective_ops`)
WAIT_OPS: FrozenSet[str] = frozenset({"_c10d_functional::wait_tensor"})
# op names that finish a collective in any communication namespace (the overlap pass's waits)
WAIT_NAMES: FrozenSet[str] = frozenset({"wait_tensor", "wait"})
# eager c10d ops (``c10d::allreduce_`` ...): no rows (they mutate, so passes never move them),
# but they are communication
EAGER_NAMESPACES: FrozenSet[str] = frozenset({"c10d"})


@dataclasses.dataclass(frozen=True)
class CollectiveSpec:
    """Facts about one collective op.

    ``op``: ``ns::name``. ``kind``: the name the cross-rank fingerprint records (None: the
    fingerprint does not record the op). ``tensor_arg``/``group_arg``: the argument the
    fingerprint's dtype/shape come from, and the group name argument. ``fields``: extra
    fingerprint fields as (field, argument position). ``rank_varying_dim0``: dim 0 may differ
    between ranks (the fingerprint records it as ``*``). ``by_numel``: matched across ranks by
    dtype and element count (what the transport moves), not shape. ``inplace``: writes its input.
    ``inplace_twin``: the in-place form of a functional op; ``reinplace``: the re-inplacing pass
    rewrites the op to it. ``p2p``: ``send``/``recv``/``batch``; ``peer_arg``/``tag_arg``: the
    global peer rank and the tag. ``ge_ops``: the GE ops the converter emits for it (besides
    helpers such as Reshape/Const). ``schema``/``side_effect``: for ``torchair_dist::`` ops, the
    schema :mod:`.collective_ops` defines and whether the op is never dead-code eliminated.
    """

    op: str
    kind: Optional[str]
    tensor_arg: int
    group_arg: int
    fields: Tuple[Tuple[str, int], ...] = ()
    rank_varying_dim0: bool = False
    by_numel: bool = False
    inplace: bool = False
    inplace_twin: Optional[str] = None
    reinplace: bool = False
    p2p: Optional[str] = None
    peer_arg: Optional[int] = None
    tag_arg: Optional[int] = None
    ge_ops: Tuple[str, ...] = ()
    schema: Optional[str] = None
    side_effect: bool = False

    @property
    def namespace(self) -> str:
        return self.op.split("::")[0]

    @property
    def name(self) -> str:
        return self.op.split("::")[1]

    def overload(self) -> torch._ops.OpOverload:
        """The op's ``.default`` overload (``torchair_dist::`` ops need :mod:`.collective_ops` imported)."""
        return getattr(getattr(torch.ops, self.namespace), self.name).default

    def fingerprint_fields(self, args) -> Dict[str, Any]:
        return {field: args[i] for field, i in self.fields}


_REDUCE = (("reduce", 1),)
_P2P = (("peer", 1), ("tag", 2))
_F = "_c10d_functional::"
_FA = "_c10d_functional_autograd::"
_TD = NAMESPACE + "::"

SPECS: Dict[str, CollectiveSpec] = {s.op: s for s in (
    # torch's functional collectives
    CollectiveSpec(_F + "all_reduce", "all_reduce", 0, 2, _REDUCE, inplace_twin=_F + "all_reduce_",
                   reinplace=True, ge_ops=("HcomAllReduce",)),
    CollectiveSpec(_F + "all_reduce_", "all_reduce", 0, 2, _REDUCE, inplace=True),
    CollectiveSpec(_F + "all_reduce_coalesced", None, 0, 2,
                   inplace_twin=_F + "all_reduce_coalesced_", ge_ops=("HcomAllReduce",)),
    CollectiveSpec(_F + "all_reduce_coalesced_", None, 0, 2, inplace=True),
    CollectiveSpec(_F + "all_gather_into_tensor", "all_gather", 0, 2, ge_ops=("HcomAllGather",)),
    CollectiveSpec(_F + "all_gather_into_tensor_out", None, 0, 2, inplace=True),
    CollectiveSpec(_F + "all_gather_into_tensor_coalesced", None, 0, 2),
    CollectiveSpec(_F + "reduce_scatter_tensor", "reduce_scatter", 0, 3, _REDUCE,
                   ge_ops=("HcomReduceScatter",)),
    CollectiveSpec(_F + "reduce_scatter_tensor_out", None, 0, 3, inplace=True),
    CollectiveSpec(_F + "reduce_scatter_tensor_coalesced", None, 0, 3),
    CollectiveSpec(_F + "all_to_all_single", "all_to_all", 0, 3, rank_varying_dim0=True,
                   ge_ops=("HcomAllToAll", "HcomAllToAllV")),
    CollectiveSpec(_F + "broadcast", "broadcast", 0, 2, (("root", 1),), by_numel=True,
                   inplace_twin=_F + "broadcast_", ge_ops=("HcomBroadcast",)),
    CollectiveSpec(_F + "broadcast_", "broadcast", 0, 2, (("root", 1),), by_numel=True,
                   inplace=True),
    CollectiveSpec(_F + "isend", "send", 0, 3, _P2P, by_numel=True, p2p="send", peer_arg=1,
                   tag_arg=2),
    CollectiveSpec(_F + "irecv", "recv", 0, 3, _P2P, by_numel=True, p2p="recv", peer_arg=1,
                   tag_arg=2),
    CollectiveSpec(_F + "batch_p2p_ops", None, 3, 4, p2p="batch"),
    # the autograd-aware variants (training graphs)
    CollectiveSpec(_FA + "all_gather_into_tensor", None, 0, 2),
    CollectiveSpec(_FA + "reduce_scatter_tensor", None, 0, 3),
    CollectiveSpec(_FA + "all_to_all_single", None, 0, 3),
    # this library's ops (:mod:`.collective_ops` defines them from ``schema``)
    CollectiveSpec(_TD + "all_gather", "all_gather_list", 1, 2, rank_varying_dim0=True,
                   ge_ops=("HcomAllGather", "HcomBroadcast"),
                   schema="all_gather(Tensor[] output_like, Tensor input, str group_name) "
                          "-> Tensor[]"),
    CollectiveSpec(_TD + "all_to_all_v", "all_to_all", 0, 5, rank_varying_dim0=True,
                   ge_ops=("HcomAllToAllV",),
                   schema="all_to_all_v(Tensor input, SymInt[] send_counts, "
                          "SymInt[] send_displacements, SymInt[] recv_counts, "
                          "SymInt[] recv_displacements, str group_name) -> Tensor"),
    CollectiveSpec(_TD + "send", "send", 0, 3, _P2P, by_numel=True, p2p="send", peer_arg=1,
                   tag_arg=2, ge_ops=("HcomSend",), side_effect=True,
                   schema="send(Tensor input, int dst, int tag, str group_name) -> Tensor"),
    CollectiveSpec(_TD + "recv", "recv", 0, 3, _P2P, by_numel=True, p2p="recv", peer_arg=1,
                   tag_arg=2, ge_ops=("HcomReceive",), side_effect=True,
                   schema="recv(Tensor like, int src, int tag, str group_name) -> Tensor"),
    CollectiveSpec(_TD + "barrier", "barrier", 0, 1, ge_ops=("HcomAllReduce",),
                   side_effect=True,
                   schema="barrier(Tensor token, str group_name) -> Tensor"),
)}

# torch's functional p2p ops exist from torch 2.13 (absent on 2.11): their rows only where they do
if not functional_p2p_ops():
    for _op in (_F + "isend", _F + "irecv", _F + "batch_p2p_ops"):
        del SPECS[_op]

# reduce-op names as graphs spell them (``_c10d_functional``: "product"; GE's ``reduction``
# attribute: "prod") -> torch.distributed's ReduceOp, for kernels that call torch.distributed
DIST_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
                   "product": dist.ReduceOp.PRODUCT, "prod": dist.ReduceOp.PRODUCT}

# namespaces whose ops are communication: every row's, and the eager c10d ops
COMM_NAMESPACES: FrozenSet[str] = frozenset({s.namespace for s in SPECS.values()}) \
    | EAGER_NAMESPACES


def add_rows(rows) -> None:
    """Add rows for ops defined outside this package (the CPU wing's shared-memory twins,
    :mod:`torchair_dist.cpu.shm_graph`); a row already present must be identical."""
    for row in rows:
        if SPECS.setdefault(row.op, row) != row:
            raise ValueError(f"collective spec row {row.op} is already defined differently")


def spec_of(target: Any) -> Optional[CollectiveSpec]:
    """The row of an FX target (OpOverload/packet), None for anything else."""
    return SPECS.get(op_name(target))


def fingerprinted() -> Dict[str, CollectiveSpec]:
    """Rows the cross-rank fingerprint records, by op name."""
    return {op: s for op, s in SPECS.items() if s.kind is not None}


def p2p_kinds() -> FrozenSet[str]:
    """Fingerprint kinds of point-to-point ops (compared per pair of ranks, not per group)."""
    return frozenset(s.kind for s in SPECS.values() if s.p2p and s.kind)


def library_specs() -> Dict[str, CollectiveSpec]:
    """Rows of this library's ``torchair_dist::`` ops, by short name."""
    return {s.name: s for s in SPECS.values() if s.namespace == NAMESPACE}


def group_arg_position(target: Any) -> Optional[int]:
    """The position of ``target``'s group-name argument (None: it has none): the row's
    ``group_arg``, else (an op with no row, such as a symmetric-memory op) found by name in the
    schema — an argument ``group_name`` of type ``str`` or ``Any``."""
    spec = spec_of(target)
    if spec is not None:
        return spec.group_arg
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    for i, arg in enumerate(schema.arguments):
        if arg.name == "group_name" and str(arg.type) in ("str", "Any"):
            return i
    return None
