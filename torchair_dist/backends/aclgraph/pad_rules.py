"""The per-op rules of :mod:`.pad_safety`: where each op puts the batch dim of its inputs.

``apply(checker, node) -> (state, row_write)``: the state of the node's value (see
:mod:`.pad_safety`; :meth:`_Checker.settle` then checks it against the value's shape), or
``_Mix`` raised with why rows mix. An op not in these tables is refused (an allow-list).
"""
from __future__ import annotations

import operator
import dataclasses
from typing import Any, Callable, Dict, List, Optional

import torch

@dataclasses.dataclass(frozen=True)
class RowWrite:
    """Graph input ``index`` gets batch rows written at ``[start, start + B)`` of dim ``dim``."""

    index: int
    dim: int
    start: int


COUNT = "count"


@dataclasses.dataclass(frozen=True)
class _Buffer:
    dim: int
    start: int


@dataclasses.dataclass(frozen=True)
class _Gathered:
    """all_gather along the batch dim: rank r's rows at ``[r * B, (r + 1) * B)`` of dim 0."""

    world: int


@dataclasses.dataclass(frozen=True)
class _Merged:
    """The batch dim flattened with the dims after it into dim ``dim``: batch row ``i`` is
    ``[i * inner, (i + 1) * inner)`` of it (a 3-D linear's reshape to 2-D)."""

    dim: int
    inner: Any


class _Mix(Exception):
    """Rows mix at the node being checked (``why``)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why



def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node



SYM_OPS = (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
           operator.truediv, operator.neg, operator.pow, torch.sym_max, torch.sym_min,
           torch.sym_int, torch.sym_float, torch.sym_sqrt, torch.sym_ite, torch.sym_not,
           operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


Rule = Callable[[Any, torch.fx.Node, Dict[str, Any]], Any]
_RULES: Dict[str, Rule] = {}


def _rule(*names: str):
    def register(fn):
        for name in names:
            _RULES[name] = fn
        return fn
    return register


def _bound(node: torch.fx.Node) -> Dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    out: Dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _ndim(x) -> int:
    val = _val(x)
    return val.dim() if isinstance(val, torch.Tensor) else 0


def _norm(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


def _tensor_states(checker, node, args) -> List[Any]:
    return [(a, checker.of(a)) for a in args]


def apply(checker, node: torch.fx.Node):
    target = node.target
    if target is operator.getitem:
        state = checker.of(node.args[0])
        return (state[node.args[1]] if isinstance(state, (list, tuple)) else state), None
    if target in SYM_OPS or (isinstance(target, torch._ops.OpOverload)
                             and target.namespace == "aten" and target._opname.startswith("sym_")):
        return None, None  # settle: COUNT where the value mentions the batch size
    if not isinstance(target, torch._ops.OpOverload):
        raise _Mix("an op the padding check does not know")
    args = _bound(node)
    name = f"{target.namespace}.{target._opname}"
    rule = _RULES.get(name)
    if rule is None and torch.Tag.pointwise in target.tags:
        rule = _pointwise
    if rule is None:
        raise _Mix("an op the padding check does not know (rows are assumed to mix)")
    result = rule(checker, node, args)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], RowWrite):
        return result
    return result, None


# -- pointwise and broadcast ------------------------------------------------------------------
def _broadcast(checker, node, inputs, out_ndim: Optional[int] = None):
    """The output dim of the batch of every input (aligned from the right); one dim or mix."""
    out_ndim = _ndim(node) if out_ndim is None else out_ndim
    found = set()
    for arg in inputs:
        state = checker.of(arg)
        if state is None:
            continue
        if state == COUNT:
            raise _Mix("the batch size is used as a value")
        if isinstance(state, _Merged) and _ndim(arg) == out_ndim:
            found.add(state)
            continue
        if not isinstance(state, int):
            raise _Mix("reads rows of a buffer or gathered tensor other than the batch's")
        found.add(state + out_ndim - _ndim(arg))
    if len(found) > 1:
        raise _Mix(f"combines batch dims {sorted(found)} of its inputs (each row with others)")
    return found.pop() if found else None


def _pointwise(checker, node, args):
    inputs = [v for v in args.values() if isinstance(v, torch.fx.Node)
              or isinstance(v, torch.SymInt)]
    for v in args.values():
        if isinstance(v, (list, tuple)) and any(isinstance(a, torch.fx.Node) for a in v):
            inputs.extend(a for a in v if isinstance(a, torch.fx.Node))
    return _broadcast(checker, node, inputs)


_rule("aten.clone", "aten._to_copy", "aten.contiguous", "aten.alias", "aten.detach",
      "aten.lift_fresh_copy", "aten.where", "aten.masked_fill", "aten.clamp", "aten.copy",
      "aten.fill", "aten.zeros_like", "aten.ones_like", "aten.empty_like", "aten.full_like",
      "aten.type_as", "aten.to", "aten._assert_tensor_metadata")(_pointwise)


@_rule("aten.copy_")
def _copy_(checker, node, args):
    dst, src = args["self"], args["src"]
    ds, ss = checker.of(dst), checker.of(src)
    if dst in checker.inputs and ds is None and isinstance(ss, _Buffer):
        return ds, RowWrite(checker.inputs[dst], ss.dim, ss.start)
    if ss is not None and ss != ds:
        raise _Mix("writes batch rows into a tensor that does not hold them in the same dim")
    return ds


# ops that read only the shape, dtype and device of their tensor inputs
SHAPE_ONLY = frozenset(("aten.new_zeros", "aten.new_ones", "aten.new_empty", "aten.new_full",
                        "aten.new_empty_strided", "aten.zeros_like", "aten.ones_like",
                        "aten.empty_like", "aten.full_like"))


# -- factories ----------------------------------------------------------------------------------
@_rule("aten.full", "aten.zeros", "aten.ones", "aten.empty", "aten.empty_strided",
       "aten.new_zeros", "aten.new_ones", "aten.new_empty", "aten.new_full",
       "aten.new_empty_strided", "aten.scalar_tensor", "aten.arange")
def _factory(checker, node, args):
    for key in ("fill_value", "s", "start", "step"):
        if checker.of(args.get(key)) == COUNT:
            raise _Mix("the batch size is used as a value")
    return None  # settle: aligned where the size is the batch size


# -- reductions, scans, sorts --------------------------------------------------------------------
_REDUCE_LIST = ("aten.sum", "aten.mean", "aten.amax", "aten.amin", "aten.var", "aten.std",
                "aten.var_mean", "aten.std_mean", "aten.logsumexp", "aten.any", "aten.all",
                "aten.linalg_vector_norm", "aten.prod", "aten.max", "aten.min", "aten.argmax",
                "aten.argmin", "aten.norm", "aten.nansum", "aten.count_nonzero")
_KEEP_SHAPE = ("aten._softmax", "aten._log_softmax", "aten.softmax", "aten.log_softmax",
               "aten._safe_softmax", "aten.cumsum", "aten.cumprod", "aten.cummax",
               "aten.cummin", "aten.logcumsumexp", "aten.sort", "aten.topk", "aten.kthvalue",
               "aten.median", "aten.mode", "aten.argsort")


@_rule(*_REDUCE_LIST, *_KEEP_SHAPE)
def _reduction(checker, node, args):
    x = args.get("self", args.get("input"))
    state = checker.of(x)
    if state is None:
        return None
    if not isinstance(state, int):
        raise _Mix("reduces a value that is not row-aligned")
    ndim = _ndim(x)
    dims = args.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    if not dims:  # None or []: every dim
        dims = list(range(ndim))
    dims = [_norm(d, max(ndim, 1)) for d in dims]
    name = f"{node.target.namespace}.{node.target._opname}"
    if state in dims:
        what = "reduces" if name in _REDUCE_LIST else "softmaxes, scans or sorts"
        raise _Mix(f"{what} along the batch dim (dim {state}): every row reads the others")
    if name in _KEEP_SHAPE or args.get("keepdim"):
        return state
    return state - sum(1 for d in dims if d < state)


# -- matmul --------------------------------------------------------------------------------------
def _mm_axes(checker, a, b):
    """(output dim of a's batch, output dim of b's batch) for a 2-D or batched matmul."""
    sa, sb = checker.of(a), checker.of(b)
    na, nb = _ndim(a), _ndim(b)
    if isinstance(sa, _Merged) and sb is None and sa.dim == na - 2:
        return sa  # the flattened rows stay rows
    out = []
    if sa is not None:
        if not isinstance(sa, int) or sa == na - 1:
            raise _Mix("contracts the batch dim (dim -1 of the left operand)")
        out.append(sa)
    if sb is not None:
        if not isinstance(sb, int) or sb == nb - 2 or nb == 1:
            raise _Mix("contracts the batch dim (dim -2 of the right operand)")
        out.append(sb if sb == nb - 1 else sb)
    if len(set(out)) > 1 or (sa is not None and sb is not None
                             and (sa >= na - 2 or sb >= nb - 2)):
        raise _Mix("multiplies batch rows with batch columns (every row with every other)")
    return out[0] if out else None


@_rule("aten.mm", "aten.bmm", "aten.matmul")
def _mm(checker, node, args):
    a, b = args["self"], args.get("mat2", args.get("other"))
    if _ndim(a) != _ndim(b) and node.target._opname == "matmul":
        raise _Mix("matmul of operands of different rank (not checked)")
    return _mm_axes(checker, a, b)


@_rule("aten.addmm", "aten.baddbmm")
def _addmm(checker, node, args):
    state = _mm_axes(checker, args["mat1" if "mat1" in args else "batch1"],
                     args["mat2" if "mat2" in args else "batch2"])
    bias = args["self"]
    found = {s for s in (state, None if checker.of(bias) is None else
                         checker.of(bias) + _ndim(node) - _ndim(bias)) if s is not None}
    if len(found) > 1:
        raise _Mix("adds batch rows of one operand to others")
    return found.pop() if found else None


@_rule("aten.linear")
def _linear(checker, node, args):
    x, w = args["input"], args["weight"]
    if checker.of(w) is not None or checker.of(args.get("bias")) is not None:
        raise _Mix("a weight that depends on the batch")
    state = checker.of(x)
    if state is not None and (not isinstance(state, int) or state == _ndim(x) - 1):
        raise _Mix("contracts the batch dim")
    return state


def _not_aligned(state):
    if state is not None:
        raise _Mix("moves the dims of a buffer or gathered tensor")
    return None


# -- views and shape moves -----------------------------------------------------------------------
def _shape(x) -> list:
    val = _val(x)
    return list(val.shape) if isinstance(val, torch.Tensor) else []


def _same(checker, a, b) -> bool:
    ea, eb = checker._expr(a), checker._expr(b)
    try:
        return bool(ea == eb) or (hasattr(ea - eb, "free_symbols") and (ea - eb) == 0)
    except TypeError:
        return False


def _prod(checker, sizes):
    out = 1
    for s in sizes:
        out = out * checker._expr(s)
    return out


@_rule("aten.view", "aten.reshape", "aten._unsafe_view", "aten.view_copy")
def _view(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    if state is None:
        return None
    before, after = _shape(x), _shape(node)
    if isinstance(state, _Merged):
        state, inner = state.dim, state.inner
    elif isinstance(state, int):
        inner = 1
    else:
        raise _Mix("reshapes a value that is not row-aligned")
    head = _prod(checker, before[:state])
    for k, size in enumerate(after):
        if not _same(checker, _prod(checker, after[:k]), head):
            continue
        if checker.is_b(size) and _same(checker, _prod(checker, after[k + 1:]),
                                          _prod(checker, before[state + 1:]) * inner):
            return k
        if not checker.is_b(size) and checker.mentions(size):
            new_inner = checker._expr(size) / (checker._expr(before[state]) / inner)
            if not checker.mentions(new_inner) and _same(
                    checker, _prod(checker, before[state + 1:]) * inner,
                    new_inner * _prod(checker, after[k + 1:])):
                return _Merged(k, new_inner)
    raise _Mix(f"reshapes {tuple(before)} to {tuple(after)}, merging the batch dim (dim "
               f"{state}) with another")


@_rule("aten.permute")
def _permute(checker, node, args):
    state = checker.of(args["self"])
    if not isinstance(state, int):
        return _not_aligned(state)
    dims = [_norm(d, _ndim(args["self"])) for d in args["dims"]]
    return dims.index(state)


@_rule("aten.transpose", "aten.t", "aten.swapaxes", "aten.swapdims")
def _transpose(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    if not isinstance(state, int):
        return _not_aligned(state)
    n = max(_ndim(x), 1)
    d0, d1 = (_norm(args.get("dim0", 0), n), _norm(args.get("dim1", 1), n)) \
        if "dim0" in args else (0, 1) if n == 2 else (0, 0)
    return d1 if state == d0 else d0 if state == d1 else state


@_rule("aten.unsqueeze")
def _unsqueeze(checker, node, args):
    state = checker.of(args["self"])
    if not isinstance(state, int):
        return _not_aligned(state)
    return state + 1 if _norm(args["dim"], _ndim(node)) <= state else state


@_rule("aten.squeeze")
def _squeeze(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    if not isinstance(state, int):
        return _not_aligned(state)
    before = _shape(x)
    dims = args.get("dim")
    dims = range(len(before)) if dims is None else [dims] if isinstance(dims, int) else dims
    gone = [_norm(d, len(before)) for d in dims if before[_norm(d, len(before))] == 1]
    if state in gone:
        raise _Mix("squeezes the batch dim away")
    return state - sum(1 for d in gone if d < state)


@_rule("aten.expand", "aten.expand_copy")
def _expand(checker, node, args):
    state = checker.of(args["self"])
    if not isinstance(state, int):
        return _not_aligned(state)
    return state + _ndim(node) - _ndim(args["self"])


@_rule("aten.slice", "aten.narrow")
def _slice(checker, node, args):
    x = args["self"]
    state = checker.of(x)
    n = max(_ndim(x), 1)
    dim = _norm(args.get("dim", 0), n)
    start = args.get("start", 0) or 0
    if checker.of(start) == COUNT:
        raise _Mix("slices from a position that depends on the batch size")
    if isinstance(state, _Buffer):
        if dim == state.dim and start == state.start and checker.is_b(_shape(node)[dim]):
            return dim  # reads back the rows the batch wrote
        raise _Mix("reads a buffer's rows other than the ones the batch wrote")
    if isinstance(state, int) and dim == state:
        if start != 0 or not checker.is_b(_shape(node)[dim]):
            raise _Mix("slices along the batch dim (rows shift or are dropped)")
        return state
    if state is None and isinstance(start, int) and checker.is_b(_shape(node)[dim]):
        if x in checker.inputs and args.get("step", 1) == 1:
            checker.views[node] = RowWrite(checker.inputs[x], dim, start)
        return dim  # rows [start, start + B) of a buffer: row i reads buffer row start + i
    return state
