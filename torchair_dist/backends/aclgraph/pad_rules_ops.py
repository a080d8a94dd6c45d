"""More rules of :mod:`.pad_safety` (registered into :mod:`.pad_rules`' table): select,
split, cat, indexing, scatters, norms, attention, collectives, bookkeeping ops."""
from __future__ import annotations

import torch

from .pad_rules import COUNT, _Buffer, _Gathered, _Mix, _ndim, _norm, _rule, _shape, _val


@_rule("aten.select")
def _select(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    if not isinstance(state, int):
        if isinstance(state, _Buffer):
            raise _Mix("selects from a buffer the batch wrote")
        return state
    dim = _norm(args["dim"], _ndim(x))
    if dim == state:
        raise _Mix("selects one row of the batch dim")
    return state - 1 if dim < state else state


@_rule("aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind", "aten.unsafe_split",
       "aten.unsafe_chunk", "aten.split_with_sizes_copy", "aten.tensor_split")
def _split(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    dim = _norm(args.get("dim", 0), _ndim(x))
    if isinstance(state, _Gathered) and dim == 0 and node.target._opname == "split" and \
            checker.is_b(args["split_size"]):
        return [0] * len(_val(node))  # back to one block of B rows per rank
    if not isinstance(state, int):
        if state is not None:
            raise _Mix("splits a value that is not row-aligned")
        return state
    if dim == state:
        raise _Mix("splits the batch dim")
    keep = state - 1 if node.target._opname == "unbind" and dim < state else state
    return [keep] * len(_val(node))


@_rule("aten.cat", "aten.stack")
def _cat(checker, node, args):
    tensors = args["tensors"]
    n = _ndim(node)
    dim = _norm(args.get("dim", 0), n)
    stack = node.target._opname == "stack"
    found = set()
    for t in tensors:
        state = checker.of(t)
        if state is None:
            continue
        if not isinstance(state, int):
            raise _Mix("concatenates a value that is not row-aligned")
        found.add(state + 1 if stack and dim <= state else state)
    if len(found) > 1:
        raise _Mix("concatenates tensors whose batch dims differ")
    state = found.pop() if found else None
    if state == dim and not stack:
        raise _Mix("concatenates along the batch dim (rows after the first input shift)")
    return state


def _aligned(checker, x, what: str):
    state = checker.of(x)
    if state is not None and not isinstance(state, int):
        raise _Mix(f"{what} is not row-aligned")
    return state


@_rule("aten.embedding")
def _embedding(checker, node, args):
    if checker.of(args["weight"]) is not None:
        raise _Mix("an embedding table that depends on the batch")
    return _aligned(checker, args["indices"], "the indices")


@_rule("aten.index_select")
def _index_select(checker, node, args):
    x, index = args["self"], args["index"]
    sx, si = _aligned(checker, x, "the input"), _aligned(checker, index, "the index")
    dim = _norm(args["dim"], max(_ndim(x), 1))
    if sx is not None and (dim == sx or si is not None):
        raise _Mix("indexes along the batch dim with data-dependent indices")
    return dim if si is not None else sx


@_rule("aten.gather")
def _gather(checker, node, args):
    x, index = args["self"], args["index"]
    sx, si = _aligned(checker, x, "the input"), _aligned(checker, index, "the index")
    dim = _norm(args["dim"], max(_ndim(x), 1))
    if sx is not None and (dim == sx or si != sx):
        raise _Mix("gathers across rows of the batch dim")
    return si


@_rule("aten.index")
def _index(checker, node, args):
    x, indices = args["self"], args["indices"]
    sx = _aligned(checker, x, "the input")
    states = [_aligned(checker, i, "an index") if i is not None else None for i in indices]
    used = [d for d, i in enumerate(indices) if i is not None]
    if sx is not None:
        if sx in used or any(s is not None for s in states):
            raise _Mix("indexes along the batch dim with data-dependent indices")
        if used and sx > used[0]:
            return None  # placed by its shape (the index dims replace the indexed ones)
        return sx
    return None  # the output's batch dim comes from the index: placed by its shape


@_rule("aten.scatter", "aten.scatter_add", "aten.scatter_reduce", "aten.scatter_",
       "aten.scatter_add_", "aten.scatter_reduce_")
def _scatter(checker, node, args):
    x, index = args["self"], args["index"]
    src = args.get("src")
    sx = _aligned(checker, x, "the destination")
    si = _aligned(checker, index, "the index")
    ss = _aligned(checker, src, "the source") if isinstance(src, torch.fx.Node) else None
    dim = _norm(args["dim"], max(_ndim(x), 1))
    if dim == sx or {s for s in (sx, si, ss) if s is not None} - {sx} or (
            sx is None and (si is not None or ss is not None)):
        raise _Mix("scatters rows to data-dependent rows")
    return sx


@_rule("aten.index_put", "aten.index_put_", "aten._unsafe_index_put", "aten.index_add",
       "aten.index_add_", "aten.index_copy", "aten.index_copy_", "aten.index_fill",
       "aten.index_fill_")
def _index_put(checker, node, args):
    x = args["self"]
    sx = _aligned(checker, x, "the destination")
    if _masked_fill(checker, args, sx):
        return sx
    others = [v for k, v in args.items() if k != "self" and isinstance(v, torch.fx.Node)]
    others += [i for i in args.get("indices") or [] if isinstance(i, torch.fx.Node)]
    if any(checker.of(v) is not None for v in others):
        raise _Mix("writes rows to data-dependent positions (rows of the batch reach others)")
    if sx is not None and "dim" in args and _norm(args["dim"], _ndim(x)) == sx:
        raise _Mix("writes along the batch dim")
    indices = args.get("indices")
    if sx is not None and indices is not None and sx < len(indices) and indices[sx] is not None:
        raise _Mix("writes along the batch dim")
    return sx


def _masked_fill(checker, args, sx) -> bool:
    """``x[mask] = scalar`` with one boolean mask over x's leading dims (a masked fill: each
    row writes its own elements)."""
    indices, values = args.get("indices"), args.get("values")
    if not indices or len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
        return False
    mask = indices[0].meta.get("val")
    value = values.meta.get("val") if isinstance(values, torch.fx.Node) else None
    return (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
            and isinstance(value, torch.Tensor) and value.numel() == 1
            and checker.of(values) is None
            and checker.of(indices[0]) in (None, sx) and (sx is None or sx < mask.dim()))


@_rule("aten.slice_scatter")
def _slice_scatter(checker, node, args):
    x, src = args["self"], args["src"]
    sx, ss = checker.of(x), _aligned(checker, src, "the source")
    dim = _norm(args.get("dim", 0), _ndim(x))
    start = args.get("start", 0) or 0
    if ss is None:
        return sx
    if sx is None and ss == dim and isinstance(start, int) and args.get("step", 1) == 1 and \
            checker.is_b(_shape(src)[dim]):
        return _Buffer(dim, start)  # rows [start, start + B) hold the batch's rows
    if isinstance(sx, _Buffer) and sx == _Buffer(dim, start) and ss == dim:
        return sx
    if isinstance(sx, int) and sx == ss and dim != sx:
        return sx
    raise _Mix("writes batch rows into other rows")


@_rule("aten.native_layer_norm", "aten._fused_rms_norm", "aten.rms_norm", "aten.layer_norm")
def _layer_norm(checker, node, args):
    x = args["input"]
    state = _aligned(checker, x, "the input")
    for key in ("weight", "bias"):
        if checker.of(args.get(key)) is not None:
            raise _Mix("a norm weight that depends on the batch")
    if state is not None and state >= _ndim(x) - len(args["normalized_shape"]):
        raise _Mix("normalizes over the batch dim")
    val = node.meta.get("val")
    return [state] * len(val) if isinstance(val, (list, tuple)) else state


@_rule("aten._native_batch_norm_legit_no_training")
def _batch_norm_eval(checker, node, args):
    state = _aligned(checker, args["input"], "the input")
    if state == 1:
        raise _Mix("the batch dim is the channel dim of a batch norm")
    return [state, None, None]


_ATTENTION = ("aten._scaled_dot_product_flash_attention_for_cpu",
              "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
              "aten._scaled_dot_product_cudnn_attention", "aten.scaled_dot_product_attention",
              "aten._scaled_dot_product_attention_math",
              "aten._scaled_dot_product_fused_attention_overrideable")


@_rule(*_ATTENTION)
def _attention(checker, node, args):
    q, k, v = args["query"], args["key"], args["value"]
    n = _ndim(q)
    sq, sk, sv = (_aligned(checker, t, "an attention input") for t in (q, k, v))
    if sk != sv:
        raise _Mix("keys and values hold the batch in different dims")
    if sk is not None and sk >= n - 2:
        raise _Mix("the batch dim is the key length (every query attends to every row)")
    if sk is not None and sq != sk:
        raise _Mix("queries and keys hold the batch in different dims")
    mask = args.get("attn_mask")
    sm = _aligned(checker, mask, "the attention mask") if mask is not None else None
    if sm is not None:
        at = sm + n - _ndim(mask)
        if at == n - 1 or at != (sq if sq is not None else sk):
            raise _Mix("the attention mask holds the batch in another dim")
    return None  # the outputs are placed by their shapes (the query's batch dim)


@_rule("_c10d_functional.all_reduce", "_c10d_functional.all_reduce_",
       "_c10d_functional.wait_tensor", "_c10d_functional.broadcast",
       "_c10d_functional.broadcast_", "torchair_dist.shm_all_reduce",
       "torchair_dist.shm_all_reduce_")
def _elementwise_collective(checker, node, args):
    state = checker.of(node.args[0])
    if isinstance(state, _Gathered) and node.target._opname == "wait_tensor":
        return state
    if state is not None and not isinstance(state, int):
        raise _Mix("a collective over a value that is not row-aligned")
    return state


@_rule("_c10d_functional.all_gather_into_tensor", "_c10d_functional.reduce_scatter_tensor",
       "_c10d_functional.all_to_all_single", "_c10d_functional_autograd.all_gather_into_tensor",
       "_c10d_functional_autograd.reduce_scatter_tensor",
       "_c10d_functional_autograd.all_to_all_single", "torchair_dist.all_to_all_v",
       "torchair_dist.shm_all_to_all_v")
def _dim0_collective(checker, node, args):
    state = _aligned(checker, node.args[0], "the collective's input")
    for a in node.args[1:]:
        for s in (a if isinstance(a, (list, tuple)) else [a]):
            if checker.of(s) == COUNT:
                raise _Mix("split sizes that depend on the batch size")
    if state == 0 and node.target._opname == "all_gather_into_tensor" and isinstance(
            node.args[1], int):
        return _Gathered(node.args[1])  # accepted only where split back per rank (pad_rules)
    if state == 0:
        raise _Mix("gathers, scatters or exchanges along dim 0, the batch dim: ranks' rows "
                   "interleave with the padding rows (rank r's rows start at r * padded size)")
    return state


@_rule("torchair_dist.all_gather")
def _gather_list(checker, node, args):
    if any(checker.of(a) is not None for a in node.args[:2] for a in (
            a if isinstance(a, (list, tuple)) else [a])):
        raise _Mix("gathers along dim 0, the batch dim: ranks' rows interleave with the "
                   "padding rows")
    return None


@_rule("aten._assert_scalar", "aten.sym_constrain_range_for_size", "aten.sym_constrain_range",
       "aten._assert_async", "aten.lift_fresh")
def _bookkeeping(checker, node, args):
    return None
