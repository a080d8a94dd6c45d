"""Decompose the ops that have no GE converter with PyTorch's own tables, before conversion.

Only the nodes whose target has no converter are touched: each is re-traced alone with
``make_fx`` over its own decomposition (Core ATen first, then the rest of
``torch._decomp.decomposition_table``), the table restricted to ops that still lack a converter,
so a decomposition that produces another unconverted op is decomposed further in the same
trace, and every op that has a converter (matmuls, attention, norms, collectives, in-place cache
updates: the fast paths) is kept as it is. The traced nodes replace the original node in place
(their ``meta["val"]`` comes from the same fake mode), so the converters see an ordinary graph.

Runtime asserts on values (``torch._check`` on a data-dependent size: ``aten._assert_scalar``;
``torch._assert_async``) are kept: they become GE ``Assert`` ops (a failed one raises, as eager
does, instead of a result of another shape). Metadata asserts and size-range constraints
(``_assert_tensor_metadata``, ``sym_constrain_range*``: what Dynamo's guards already hold) and
the error checks AOT wraps in ``with_effects`` (``aten._linalg_check_errors``: a singular matrix)
are dropped here, each with one DEBUG line; the latter is a known difference from eager, which
raises for a singular input where the GE graph returns inf/nan.
"""
from __future__ import annotations

import logging
import operator
from typing import Any, Callable, Dict, Optional

import torch
import torch.utils._pytree as pytree

from .converters import lookup

log = logging.getLogger("torchair_dist.ge.lowering")
aten = torch.ops.aten

STATS = {"decomposed": 0, "asserts_dropped": 0}
ASSERTS = frozenset({aten._assert_tensor_metadata.default,
                     aten.sym_constrain_range.default, aten.sym_constrain_range_for_size.default,
                     aten._functional_assert_async.msg, aten._functional_assert_scalar.default})

_TABLE: Optional[Dict[Any, Callable]] = None


def decomposition_table() -> Dict[Any, Callable]:
    """Core ATen decompositions, then every other decomposition torch ships (core wins)."""
    global _TABLE
    if _TABLE is None:
        from torch._decomp import core_aten_decompositions, decomposition_table as everything

        table = dict(everything)
        table.update(core_aten_decompositions())
        pool = table.get(aten._adaptive_avg_pool2d.default)
        if pool is not None:
            table[aten._adaptive_avg_pool2d.default] = _empty_aware(pool)
        _TABLE = table
    return _TABLE


def _empty_aware(decomposition: Callable) -> Callable:
    """``decomposition``, except that an output size of 0 (an empty result, where torch's
    windows would divide by zero) is the empty tensor of the output's shape."""
    def decompose(x, output_size):
        if any(isinstance(s, int) and s == 0 for s in output_size):
            return x.new_zeros((*x.shape[:-2], *output_size))
        return decomposition(x, output_size)
    return decompose


def _unconverted(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and lookup(target) is None


def _fake_mode(gm: torch.fx.GraphModule):
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if "val" in n.meta]
    return detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])


def _restricted_table() -> Dict[Any, Callable]:
    return {op: fn for op, fn in decomposition_table().items() if _unconverted(op)}


def _trace(node: torch.fx.Node, table: Dict[Any, Callable]) -> Optional[torch.fx.GraphModule]:
    """The node's own op decomposed: a graph whose placeholders are the node's FX inputs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]
    examples = [flat[i].meta.get("val") for i in positions]
    if any(e is None for e in examples):
        return None

    out_val = node.meta.get("val")
    low = (torch.bfloat16, torch.float16)
    widen = (any(isinstance(e, torch.Tensor) and e.dtype in low for e in examples)
             and all(isinstance(v, torch.Tensor) for v in pytree.tree_leaves(out_val)))

    def fn(*values):
        leaves = list(flat)
        for i, v in zip(positions, values):
            # low-precision floats are decomposed in float32 (torch's CPU kernels compute
            # them in float32 too): the decomposition's steps do not each round to bf16
            leaves[i] = v.float() if widen and v.dtype in low else v
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        out = node.target(*args, **kwargs)
        if widen:
            out = pytree.tree_map(lambda o, ref: o.to(ref.dtype) if o.dtype != ref.dtype else o,
                                  out, out_val)
        return out

    sub = make_fx(fn, decomposition_table=table, tracing_mode="real")(*examples)
    sub.graph.eliminate_dead_code()
    return sub


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node, sub: torch.fx.GraphModule) -> None:
    inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
    val_map: Dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, arg in zip(placeholders, inputs):
        val_map[ph] = arg
    for n in sub.graph.nodes:
        if n.op == "get_attr":  # a constant the decomposition created
            name = f"_decomp_const_{STATS['decomposed']}_{n.target}"
            setattr(gm, name, getattr(sub, n.target))
            with gm.graph.inserting_before(node):
                val_map[n] = gm.graph.get_attr(name)
            val_map[n].meta = dict(n.meta)
    with gm.graph.inserting_before(node):
        out = gm.graph.graph_copy(sub.graph, val_map, return_output_node=False)
    for n in sub.graph.nodes:
        if n in val_map and isinstance(val_map[n], torch.fx.Node) and n.op == "call_function":
            val_map[n].meta.setdefault("stack_trace", node.meta.get("stack_trace"))
    if isinstance(out, (list, tuple)):
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(out[user.args[1]])
                gm.graph.erase_node(user)
        if node.users:  # the tuple itself is used (an output): rebuild it
            raise RuntimeError(f"decomposed tuple node %{node.name} used as a whole")
    else:
        node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


CHECKS = frozenset({aten._linalg_check_errors.default})  # error checks AOT wraps in with_effects


def _drop_effect_check(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """``with_effects(token, <a check>, ...)``: its users read only the new token (getitem 0);
    they get the old one, and the node goes."""
    from torch._higher_order_ops.effects import with_effects

    if node.target is not with_effects or len(node.args) < 2:
        return False
    if node.args[1] not in ASSERTS and node.args[1] not in CHECKS:
        return False
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
        return False
    for user in list(node.users):
        user.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(user)
    log.debug("GE graph: dropped runtime check %s (FX node %%%s): inference graphs do not "
              "re-check input invariants", node.args[1], node.name)
    gm.graph.erase_node(node)
    return True


def drop_asserts(gm: torch.fx.GraphModule) -> int:
    dropped = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _drop_effect_check(gm, node):
            dropped += 1
            continue
        if node.op == "call_function" and node.target in ASSERTS and not node.users:
            log.debug("GE graph: dropped runtime assert %s (FX node %%%s): inference graphs do "
                      "not re-check input invariants", node.target, node.name)
            gm.graph.erase_node(node)
            dropped += 1
    STATS["asserts_dropped"] += dropped
    return dropped


def decompose_unconverted(gm: torch.fx.GraphModule) -> int:
    """Decompose every node without a GE converter that PyTorch can decompose; returns how
    many nodes were replaced. Nodes that cannot be decomposed are left for ``check_supported``
    to report."""
    changed = drop_asserts(gm)
    todo = [n for n in gm.graph.nodes if n.op == "call_function" and _unconverted(n.target)
            and n.target in decomposition_table()]
    if not todo:
        if changed:
            gm.recompile()
        return 0
    table = _restricted_table()
    mode = _fake_mode(gm)
    import contextlib

    done = 0
    with (mode if mode is not None else contextlib.nullcontext()):
        for node in todo:
            try:
                sub = _trace(node, table)
            except Exception as exc:  # noqa: BLE001 - left for check_supported to report
                log.debug("GE graph: decomposing %s failed: %s", node.target, exc)
                continue
            if sub is None:
                continue
            _inline(gm, node, sub)
            done += 1
    STATS["decomposed"] += done
    gm.graph.lint()
    gm.recompile()
    return done


# Why an op that neither converts nor decomposes is refused (matched on the op name, first
# match wins); the refusal lists it next to the op.
REFUSALS = [
    (("histogram", "_histogramdd"),
     "the bin range comes from the data: GE's Histogram takes it as attributes, and "
     "HistogramFixedWidth (range as a tensor) bins by its own rounding, which may put a value "
     "on a bin edge in the neighbouring bin, unlike torch"),
    (("sym_storage_offset",),
     "a view at a storage offset that depends on the input values (tensor_split at tensor "
     "indices): GE tensors have no storage offsets"),
    (("segment_reduce", "_embedding_bag"),
     "a segmented-reduction overload with no converter (segment_reduce.default and "
     "_embedding_bag[_forward_only].default convert through GE's UnsortedSegment* ops)"),
    (("linalg_eig", "linalg_householder_product", "geqrf", "ormqr", "linalg_ldl"),
     "a factorisation GE has no op for: complex eigen-decomposition (eig), Householder "
     "reflector forms (geqrf/ormqr/householder_product; GE's Qr gives Q and R only), LDL^T"),
    (("linalg_matrix_exp", "matrix_exp"),
     "matrix_exp scales and squares a data-dependent number of times: not lowered"),
    (("linalg_", "_linalg_", "cholesky", "lu_", "lu", "triangular_solve"),
     "dense linear algebra variant with no converter"),
    (("special_hermite", "special_laguerre", "special_legendre"),
     "a special function with no GE op and no closed form: its recurrence runs n steps, and "
     "the degree n is a tensor whose value is unknown when the graph is built"),
    (("special_", "bessel"),
     "a special function with no GE op, not composed from elementwise ops yet (Bessel J/Y/K, "
     "Airy; lgamma, digamma, polygamma, erfcx, i0/i1, Chebyshev polynomials are)"),
    (("avg_pool", "adaptive_", "max_pool", "fractional_max_pool", "max_unpool", "upsample"),
     "no converter yet for this pooling/resampling variant"),
    (("bernoulli", "normal", "uniform", "native_dropout", "exponential", "multinomial",
      "randperm", "rand", "randn", "randint"),
     "a random op with no converter (rand/randn/randint and their _like forms convert to GE's "
     "stateless generators, and dropout/bernoulli(p) decompose into them); generate the random "
     "tensor outside the compiled region and pass it in, or use mode='npugraph_ex'"),
    (("_scaled_mm", "hash_tensor", "copy_to"),
     "not meaningful in a GE graph (float8 scaled matmul / hashing / a copy into a view)"),
]


_TORCH_NAMESPACES = ("aten", "prims", "quantized", "_c10d_functional", "c10d_functional",
                     "torchair_dist", "torchair_dist_streams")


def refusal_reason(target: Any) -> str:
    """Why ``target`` (no converter, no decomposition) is refused, for the error message."""
    qualified = str(getattr(target, "_name", None) or target)
    if "auto_functionalized" in qualified:
        return ("a custom op that mutates its inputs (auto_functionalized): GE graphs run no "
                "Python or eager kernels; give the op a GE converter "
                "(torchair_dist.register_fx_node_ge_converter), or use mode='npugraph_ex'")
    namespace = qualified.split("::")[0] if "::" in qualified else None
    if isinstance(target, torch._ops.OpOverload) and namespace not in _TORCH_NAMESPACES:
        return (f"a custom op (namespace {namespace!r}) whose kernels are eager code: GE graphs "
                "run no Python or eager kernels; give it a GE converter "
                "(torchair_dist.register_fx_node_ge_converter), or use mode='npugraph_ex'")
    name = qualified.split("::")[-1].split(".")[0]
    for keys, reason in REFUSALS:
        if any(name == k or name.startswith(k) for k in keys):
            return reason
    return "no GE converter and no PyTorch decomposition into converted ops"


__all__ = ["refusal_reason", "REFUSALS", "decompose_unconverted", "drop_asserts", "decomposition_table",
           "STATS", "ASSERTS"]
