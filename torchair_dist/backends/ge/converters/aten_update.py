"""Converters: indexed updates (``index_copy``, ``index_put``, ``scatter``) as ``ScatterNdUpdate``.

Every update becomes ``ScatterNdUpdate(var, indices, updates)``: ``indices`` has one row of
coordinates per updated slice (the leading dims enumerated with ``Range``/Const grids, the
indexed dim taken from the index tensor, stacked with ``Pack``), ``updates`` is the source.
GE writes ``var`` in place.

The KV-cache update (transformers' ``StaticCache`` does ``self.keys.index_copy_(2, pos, k)``,
which AOT functionalizes into ``u = index_copy(keys, 2, pos, k); copy_(keys, u)``) is the case
that matters: when a graph input's only readers are one such update and the ``copy_`` of its
result back into the input (:func:`plan_inplace`), the input becomes a ``RefData`` and the
update writes the user's buffer directly, as TorchAir does with ``enable_ref_data``: no copy of
the cache, no extra graph output, nothing copied back by the runner. Any other update first
copies ``var`` (``TensorMove``; the FX graph is functional, ``var`` may have other readers).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch

from ....errors import UnsupportedOpError
from ..builder import TensorRef
from .indexing import int_indices
from .registry import register

aten = torch.ops.aten

UPDATE_TARGETS = (aten.index_copy.default, aten.index_put.default, aten.scatter.src,
                  aten.scatter.value)
# TensorMove's dtypes in the operator IR; other dtypes get their private copy from a Cast
_MOVE_DTYPES = {torch.bool, torch.float32, torch.float16, torch.int32, torch.int64, torch.int8,
                torch.uint32, torch.uint64, torch.uint8}
_EMITS = ["ScatterNdUpdate", "TensorMove", "Cast", "Const", "Range", "Reshape", "BroadcastTo",
          "Pack", "Shape", "GatherV2", "Less", "Add", "SelectV2", "StridedSlice", "Fill"]


# -- planning: which graph inputs are updated in place -----------------------------------------
def _index_put_pattern(node: torch.fx.Node) -> Optional[int]:
    """For ``index_put(x, indices, v)``: the first indexed dim when the index tensors are 1-D
    integer tensors on consecutive dims (the form ScatterNdUpdate expresses), else None."""
    indices = list(node.args[1])
    given = [i for i, t in enumerate(indices) if t is not None]
    if not given or given != list(range(given[0], given[-1] + 1)):
        return None
    for i in given:
        val = indices[i].meta.get("val") if isinstance(indices[i], torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dim() != 1 or val.dtype not in (
                torch.int32, torch.int64):
            return None
    return given[0]


def expressible(node: torch.fx.Node) -> bool:
    """True when the update ``node`` converts to ScatterNdUpdate (else another lowering)."""
    if node.target is aten.index_put.default:
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
        return not accumulate and _index_put_pattern(node) is not None
    return node.target in UPDATE_TARGETS


def plan_inplace(gm: torch.fx.GraphModule) -> Dict[torch.fx.Node, torch.fx.Node]:
    """{placeholder: update node} for each graph input written back in place: its only users
    are one expressible update of it and ``copy_(input, update)``."""
    plan = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder" or len(node.users) != 2:
            continue
        updates = [u for u in node.users if u.op == "call_function" and u.target in
                   UPDATE_TARGETS and u.args[0] is node]
        copies = [u for u in node.users if u.op == "call_function" and
                  u.target is aten.copy_.default and u.args[0] is node]
        val = node.meta.get("val")
        if (len(updates) == 1 and len(copies) == 1 and copies[0].args[1] is updates[0]
                and expressible(updates[0]) and getattr(val, "dtype", None) != torch.bool):
            plan[node] = updates[0]
    return plan


# -- building coordinates ------------------------------------------------------------------------
def _axis_grid(cx, size: Any, axis: int, rank: int) -> TensorRef:
    """arange(size) as int64, shaped to lie along ``axis`` of a rank-``rank`` grid."""
    shape = [1] * rank
    if isinstance(size, int):
        shape[axis] = size
        return cx.const(torch.arange(size, dtype=torch.int64).reshape(shape))
    line = cx.emit1("Range", [("start", cx.const(0, torch.int64)), ("limit", size),
                              ("delta", cx.const(1, torch.int64))], None, (torch.int64, (-1,)))
    shape[axis] = -1
    return cx.reshape(line, shape, tuple(shape))


def _coords(cx, parts: Sequence[TensorRef], grid: Sequence[Any]) -> TensorRef:
    """Broadcast each int64 part to ``grid`` and stack them on a new last axis."""
    desc = tuple(g if isinstance(g, int) else -1 for g in grid)
    target = cx.int_list(list(grid))
    full = [cx.emit1("BroadcastTo", [("x", cx.cast(p, torch.int64)), ("shape", target)], None,
                     (torch.int64, desc)) for p in parts]
    return cx.emit1("Pack", [("x", full)], {"axis": len(grid), "N": len(full)},
                    (torch.int64, desc + (len(full),)))


def _lying(cx, idx: TensorRef, axis: int, rank: int) -> TensorRef:
    """A 1-D index reshaped to lie along ``axis`` of a rank-``rank`` grid."""
    shape = [1] * rank
    shape[axis] = cx.dim(idx, 0)
    return cx.reshape(idx, shape, tuple(s if isinstance(s, int) else -1 for s in shape))


def _wrap_negative(cx, idx: TensorRef, size: Any) -> TensorRef:
    """Python-style negative indices made non-negative (ScatterNdUpdate needs them so)."""
    idx = cx.cast(idx, torch.int64)
    neg = cx.emit1("Less", [("x1", idx), ("x2", cx.const(0, torch.int64))], None,
                   (torch.bool, idx.shape))
    up = cx.emit1("Add", [("x1", idx), ("x2", cx.tensor(size, torch.int64))], None,
                  (torch.int64, idx.shape))
    return cx.emit1("SelectV2", [("condition", neg), ("then", up), ("else", idx)], None,
                    (torch.int64, idx.shape), port="result")


# -- emitting ----------------------------------------------------------------------------------------
def _var(cx, x: TensorRef) -> TensorRef:
    """The buffer the update writes: the input itself when planned in place, else a copy."""
    if x.op in cx.ref_data and cx.ref_data[x.op] is cx.node:
        cx.inplace_done.add(x.op)
        return x
    if x.dtype == torch.bool:  # outside ScatterNdUpdate's BasicType: updated as int8
        return cx.cast(x, torch.int8)
    if x.dtype in _MOVE_DTYPES:
        return cx.emit1("TensorMove", [("x", x)], None, (x.dtype, x.shape))
    return cx.cast(x, torch.float32)  # a fresh buffer; cast back after the update


def _scatter(cx, x: TensorRef, indices: TensorRef, updates: TensorRef) -> TensorRef:
    var = _var(cx, x)
    y = cx.emit1("ScatterNdUpdate", [("var", var), ("indices", indices),
                                     ("updates", cx.cast(updates, var.dtype))], None,
                 (var.dtype, x.shape), port="var")
    return cx.cast(y, x.dtype)


def _leading(cx, x: TensorRef, d: int, rank: int) -> List[TensorRef]:
    return [_axis_grid(cx, cx.dim(x, j), j, rank) for j in range(d)]


@register([aten.index_copy.default], _EMITS)
def _index_copy(cx, x, dim, index, source):
    """``x`` with ``x.select(dim, index[i]) = source.select(dim, i)``."""
    if not x.shape:  # 0-d: the only element is replaced (index is [0])
        return cx.reshape(cx.cast(source, x.dtype), [], ())
    d = dim % len(x.shape)
    if len(index.shape) == 0:
        index = cx.reshape(index, [1], (1,))
    grid = [cx.dim(x, j) for j in range(d)] + [cx.dim(index, 0)]
    parts = _leading(cx, x, d, d + 1) + [_lying(cx, index, d, d + 1)]
    return _scatter(cx, x, _coords(cx, parts, grid), source)


@register([aten.index_put.default], _EMITS + ["IndexPutV2", "NonZero", "Unpack"])
def _index_put(cx, x, indices, values, accumulate=False):
    """1-D integer indices on consecutive dims: ScatterNdUpdate; otherwise (boolean masks,
    multi-dim or scattered indices, accumulation) GE ``IndexPutV2``, whose ``indexed_sizes``
    marks the indexed dims as in ``Index``."""
    if any(t is not None and t.dtype == torch.bool for t in indices):
        return _index_put_mask(cx, x, indices, values, accumulate)
    if accumulate or _index_put_pattern(cx.node) is None:
        return _index_put_v2(cx, x, indices, values, accumulate)
    d = _index_put_pattern(cx.node)
    given = [t for t in indices if t is not None]
    m = len(given)
    n = next((t.shape[0] for t in given if t.shape[0] >= 0 and t.shape[0] != 1), None)
    length = n if n is not None else cx.dim(given[0], 0)
    grid = [cx.dim(x, j) for j in range(d)] + [length]
    parts = _leading(cx, x, d, d + 1) + [
        _lying(cx, _wrap_negative(cx, t, cx.dim(x, d + i)), d, d + 1) for i, t in enumerate(given)]
    upd_dims = grid + [cx.dim(x, j) for j in range(d + m, len(x.shape))]
    upd_desc = tuple(g if isinstance(g, int) else -1 for g in upd_dims)
    upd = cx.emit1("BroadcastTo", [("x", cx.tensor(values, x.dtype)),
                                   ("shape", cx.int_list(upd_dims))], None, (x.dtype, upd_desc))
    return _scatter(cx, x, _coords(cx, parts, grid), upd)


def _index_put_mask(cx, x, indices, values, accumulate):
    """``x[..., mask] = v`` (one boolean index; GE's index inputs are int64): with ``v``
    broadcast over the selected elements this is ``SelectV2(mask, v, x)`` (``x + where(mask,
    v, 0)`` when accumulating: a mask selects each element at most once)."""
    given = [(i, t) for i, t in enumerate(indices) if t is not None]
    rank = len(x.shape)
    if len(given) != 1:
        # a mask among other indices: its True coordinates (NonZero) are int64 indices that
        # broadcast with the others, as torch defines it; IndexPutV2 writes them
        return _index_put_v2(cx, x, int_indices(cx, indices), values, accumulate)
    d, mask = given[0]
    k = len(mask.shape)
    trailing = rank - d - k
    v_rank = len(values.shape) if isinstance(values, TensorRef) else 0
    if v_rank > trailing and any(s != 1 for s in values.shape[:v_rank - trailing]):
        return _index_put_nonzero(cx, x, d, mask, values, accumulate)
    if v_rank > trailing:
        values = cx.reshape(values, list(values.shape[v_rank - trailing:]),
                            tuple(values.shape[v_rank - trailing:]))
    shape = [1] * d + list(mask.shape) + [1] * trailing
    cond = cx.reshape(mask, [1] * d + [cx.dim(mask, i) for i in range(k)] + [1] * trailing,
                      tuple(shape))
    value = cx.tensor(values, x.dtype)
    if accumulate:
        zero = cx.const(0, x.dtype)
        picked = cx.emit1("SelectV2", [("condition", cond), ("then", value), ("else", zero)], None,
                          (x.dtype, x.shape), port="result")
        return cx.emit1("Add", [("x1", x), ("x2", picked)], None, (x.dtype, x.shape))
    return cx.emit1("SelectV2", [("condition", cond), ("then", value), ("else", x)], None,
                    (x.dtype, x.shape), port="result")


def _index_put_nonzero(cx, x, d, mask, values, accumulate):
    """One value per selected element: the mask's coordinates (``NonZero``, transposed to one
    row per mask dim, a data-dependent count) become int64 index tensors for IndexPutV2."""
    return _index_put_v2(cx, x, int_indices(cx, [None] * d + [mask]), values, accumulate)


def _index_put_v2(cx, x, indices, values, accumulate):
    mask = [0 if t is None else 1 for t in indices]
    given = [cx.cast(t, torch.int64) for t in indices if t is not None]
    return cx.emit1("IndexPutV2", [("x", x), ("value", cx.tensor(values, x.dtype)),
                                   ("indexed_sizes", cx.const(mask, torch.int64)),
                                   ("indexed_strides", cx.const([0] * len(mask), torch.int64)),
                                   ("indices", given)], {"accumulate": bool(accumulate)}, port="x")


@register([aten.scatter.src, aten.scatter.value], _EMITS)
def _scatter_elements(cx, x, dim, index, src):
    """``x[..., index[i,j,..], ...] = src[i,j,..]`` along ``dim`` (torch.scatter, no reduce)."""
    rank = len(x.shape)
    d = dim % rank
    grid = cx.dims(index)
    parts = [index if j == d else _axis_grid(cx, grid[j], j, rank) for j in range(rank)]
    desc = tuple(index.shape)
    if isinstance(src, TensorRef):
        if tuple(src.shape) != desc or any(s < 0 for s in desc):
            src = cx.emit1("StridedSlice", [("x", src), ("begin", cx.int_list([0] * rank)),
                                            ("end", cx.int_list(grid)),
                                            ("strides", cx.int_list([1] * rank))],
                           {"begin_mask": 0, "end_mask": 0}, (src.dtype, desc))
        upd = src
    else:
        upd = cx.emit1("Fill", [("dims", cx.int_list(grid)), ("value", cx.tensor(src, x.dtype))],
                       None, (x.dtype, desc))
    return _scatter(cx, x, _coords(cx, parts, grid), upd)


def check_planned(cx) -> None:
    """Every input planned for an in-place update was updated in place (a converter bug
    otherwise: the runner would not write the new value back)."""
    missing = set(cx.ref_data) - cx.inplace_done
    if missing:
        raise UnsupportedOpError(f"GE inputs {sorted(missing)} were planned as in-place "
                                 f"(RefData) but their update was not converted in place")
