"""Padding proven safe or refused (``npugraphex_config.pad_to_capture_size``).

A padded call runs the capture of the next declared size on the caller's rows plus zero rows,
and slices the outputs back. That equals the eager call only where every output row depends
on its own input row alone. Before a graph pads, :func:`prove_rows_independent` follows the
batch dimension (its symbol in the ``meta['val']`` fake tensors) through the post-pass ATen
graph and gives each value a state:

* ``None``: does not depend on the batch rows (weights, constants);
* ``k`` (an int): row ``i`` along dim ``k`` depends on batch row ``i`` alone;
* ``COUNT``: an integer that is (or is computed from) the batch size;
* ``_Buffer``: a buffer without the batch dim whose rows ``[start, start + B)`` along a dim
  were written with batch rows (a KV cache row per request).

Rows stay independent through pointwise ops and broadcasts, matmuls that do not contract the
batch dim, views that keep it a dim of its own, indexing along other dims, embedding lookups,
attention with the batch as a batch (or head, or query) dim, reductions over other dims,
all_reduce/broadcast, all_to_all/reduce_scatter along other dims. Every other op is refused,
named with the user's source line: reductions, scans, sorts and softmax along the batch dim,
views merging it with another dim, indexing or scattering along it, the batch size used as a
value, collectives that move rows between ranks (all_gather along dim 0 puts rank ``r``'s rows
at ``r * B``: the padded rows of rank 0 land before rank 1's, so it is refused), and any op
this module does not know. ``pad_unchecked_ops`` names ops the user vouches for: each one
relied on is named in a warning and in ``capture_summary()``.

Writes of batch rows into a graph input without the batch dim (``cache[:B] = ...`` on a
per-slot KV cache) are allowed: a padded call writes rows ``[start + n, start + size)`` that
the eager call would not; those rows are saved before and restored after it (:class:`RowWrite`).
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, List, Sequence, Set, Tuple

import torch

from ...base.util import source_line
from ...errors import TorchairDistError
from . import pad_rules
from . import pad_rules_ops  # noqa: F401  (registers its rules)
from .pad_rules import COUNT, RowWrite, _Buffer, _Gathered, _Merged, _Mix, _val


class PaddingUnsafeError(TorchairDistError, RuntimeError):
    """``pad_to_capture_size`` is on but rows of the batch dim mix in the graph."""


@dataclasses.dataclass(frozen=True)
class PadProof:
    row_writes: Tuple[RowWrite, ...] = ()
    unchecked: Tuple[str, ...] = ()   # "op at line" accepted only through pad_unchecked_ops


def op_label(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _matches(node: torch.fx.Node, names: Set[str]) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return op_label(node) in names or f"{target.namespace}.{target._opname}" in names
    return op_label(node) in names


class _Checker:
    def __init__(self, gm, symbols, shape_env, sizes: Sequence[int], lowest: int):
        self.gm = gm
        self.symbols = set(symbols)
        self.raw_symbols = set(symbols)
        self.shape_env = shape_env
        top = max(sizes)
        self.values = list(range(max(lowest, 1), top + 1))  # every batch size the graph serves
        self.state: Dict[torch.fx.Node, Any] = {}
        self.inputs: Dict[torch.fx.Node, int] = {}
        self._is_b: Dict[Any, bool] = {}
        self.views: Dict[torch.fx.Node, RowWrite] = {}  # rows [start, start + B) of an input
        if shape_env is not None:  # the symbols Dynamo unified the batch's with
            self.symbols |= {shape_env.replace(sym) for sym in symbols}

    # -- sizes ----------------------------------------------------------------------------
    def _expr(self, size):
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            return self.shape_env.replace(expr) if self.shape_env is not None else expr
        return size

    def mentions(self, size) -> bool:
        expr = self._expr(size)
        return hasattr(expr, "free_symbols") and bool(expr.free_symbols & self.symbols)

    def is_b(self, size, factor: int = 1) -> bool:
        """The size equals ``factor`` times the batch size at every batch size the graph
        serves."""
        if isinstance(size, torch.fx.Node):
            size = _val(size)
        expr = self._expr(size)
        if not self.mentions(size):
            return False
        if expr in self.symbols and factor == 1:
            return True
        if (expr, factor) not in self._is_b:
            (sym,) = expr.free_symbols & self.symbols if len(
                expr.free_symbols & self.symbols) == 1 else (None,)
            ok = sym is not None and len(expr.free_symbols) == 1
            for v in self.values if ok else ():
                try:
                    if int(expr.subs(sym, v)) != factor * v:
                        ok = False
                        break
                except (TypeError, ValueError):
                    ok = False
                    break
            self._is_b[(expr, factor)] = ok
        return self._is_b[(expr, factor)]

    # -- states ---------------------------------------------------------------------------
    def settle(self, val, state):
        """``state`` checked against the shape of ``val`` (a free value whose shape has the
        batch size as a dim becomes aligned there: rows of constants are independent)."""
        if isinstance(val, (list, tuple)):
            states = state if isinstance(state, (list, tuple)) else [state] * len(val)
            return [self.settle(v, s) for v, s in zip(val, states)]
        if isinstance(val, torch.SymInt):
            return COUNT if self.mentions(val) else None
        if not isinstance(val, torch.Tensor):
            return None if state != COUNT else COUNT
        shape = list(val.shape)
        if isinstance(state, _Buffer):
            if any(self.mentions(s) for s in shape):
                raise _Mix("the batch size is part of a buffer's shape")
            return state
        if isinstance(state, _Merged):
            if not (0 <= state.dim < len(shape)) or not self.is_b(
                    self._expr(shape[state.dim]) / state.inner) or any(
                    self.mentions(s) for d, s in enumerate(shape) if d != state.dim):
                raise _Mix(f"the flattened batch rows do not survive (shape {tuple(shape)})")
            return state
        if isinstance(state, _Gathered):
            if not shape or not self.is_b(shape[0], state.world) or any(
                    self.mentions(s) for s in shape[1:]):
                raise _Mix(f"ranks' gathered rows do not survive (shape {tuple(shape)})")
            return state
        if state is None:
            at = [d for d, s in enumerate(shape) if self.mentions(s)]
            if not at:
                return None
            if len(at) > 1 or not self.is_b(shape[at[0]]):
                raise _Mix(f"the batch size is merged into dim {at[0]} of shape "
                           f"{tuple(shape)}")
            return at[0]
        if state == COUNT:
            raise _Mix("the batch size is used as a value")
        if not (0 <= state < len(shape)) or not self.is_b(shape[state]):
            raise _Mix(f"the batch dim does not survive (shape {tuple(shape)})")
        for d, s in enumerate(shape):
            if d != state and self.mentions(s):
                raise _Mix(f"dim {d} of shape {tuple(shape)} is sized by the batch as well")
        return state

    def of(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.state.get(arg)
        if isinstance(arg, (list, tuple)):
            return [self.of(a) for a in arg]
        if isinstance(arg, torch.SymInt):
            return COUNT if self.mentions(arg) else None
        return None


def _flat(states) -> List[Any]:
    out = []
    for s in states if isinstance(states, (list, tuple)) else [states]:
        out.extend(_flat(s) if isinstance(s, (list, tuple)) else [s])
    return out


def prove_rows_independent(gm: torch.fx.GraphModule, symbols, sizes: Sequence[int],
                           lowest: int, unchecked_ops: Sequence[str], graph: str,
                           placeholder_vals: Sequence[Any]) -> PadProof:
    """Follow the batch dim through ``gm``; raise :class:`PaddingUnsafeError` naming the first
    op where rows mix (unless ``unchecked_ops`` names it), else the proof's row writes."""
    shape_env = next((s.node.shape_env for v in placeholder_vals for s in _sizes_of(v)
                      if isinstance(s, torch.SymInt)), None)
    checker = _Checker(gm, symbols, shape_env, sizes, lowest)
    names = set(unchecked_ops or ())
    writes: List[RowWrite] = []
    vouched: List[str] = []
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        checker.inputs[node] = i
        try:
            state = checker.settle(_val(node), None)
        except _Mix as mix:
            raise PaddingUnsafeError(_message(graph, f"input {i} ({node.name})", mix.why,
                                              "")) from None
        checker.state[node] = state  # the dim padded (:func:`.sizes.resized`)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            try:
                state, write = pad_rules.apply(checker, node)
                checker.state[node] = checker.settle(_val(node), state)
                write = write or _write_through_view(checker, node)
                if write is not None:
                    writes.append(write)
                elif _reads_data(node) and all(
                        s is None for s in _flat(checker.state[node])) and any(
                        s not in (None, COUNT) for s in _flat(checker.of(list(node.args))
                                                              + checker.of(list(
                                                                  node.kwargs.values())))):
                    raise _Mix("the batch dim of its input disappears from its output (each "
                               "output element reads several rows)")
            except _Mix as mix:
                if any(isinstance(a, _Gathered) for a in _flat(checker.of(list(node.args)))):
                    mix.why += (" (its input is an all_gather along the batch dim, dim 0: "
                                "rank r's rows at r * B; it is accepted only where split back "
                                "into one block of B rows per rank)")
                if not _matches(node, names):
                    raise PaddingUnsafeError(_message(graph, op_label(node), mix.why,
                                                      source_line(node))) from None
                vouched.append(f"{op_label(node)} at {source_line(node)}")
                try:
                    checker.state[node] = checker.settle(_val(node), None)
                except _Mix as again:
                    raise PaddingUnsafeError(_message(
                        graph, op_label(node), again.why + " (named in pad_unchecked_ops, but "
                        "its output's batch dim cannot be placed)", source_line(node))) from None
        elif node.op == "output":
            _check_outputs(checker, node, graph)
        elif node.op != "placeholder":
            checker.state[node] = None
    return PadProof(tuple(dict.fromkeys(writes)), tuple(vouched))


def _reads_data(node: torch.fx.Node) -> bool:
    """A tensor-valued op whose output is computed from its inputs' values (not a factory
    that only reads their shape, dtype and device)."""
    vals = [v for v in _flat([_val(node)]) if isinstance(v, torch.Tensor)]
    target = node.target
    name = (f"{target.namespace}.{target._opname}"
            if isinstance(target, torch._ops.OpOverload) else "")
    return bool(vals) and name not in pad_rules.SHAPE_ONLY


def _write_through_view(checker: _Checker, node: torch.fx.Node):
    """An in-place op writing rows ``[start, start + B)`` of a graph input through a slice."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not node.args:
        return None
    first = target._schema.arguments[0] if target._schema.arguments else None
    if first is None or first.alias_info is None or not first.alias_info.is_write:
        return None
    return checker.views.get(node.args[0])


def _sizes_of(v) -> List[Any]:
    if isinstance(v, torch.Tensor):
        return list(v.shape)
    if isinstance(v, torch.SymInt):
        return [v]
    return []


def _check_outputs(checker: _Checker, node: torch.fx.Node, graph: str) -> None:
    outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
    for k, out in enumerate(outs):
        state = checker.of(out)
        where = source_line(out) if isinstance(out, torch.fx.Node) else ""
        if state == COUNT and _is_batch_size(checker, out):
            continue  # the batch size itself: a padded call returns the call's own size
        if state == COUNT:
            why = "it is computed from the batch size (a padded call would return it for the " \
                  "padded size)"
        elif isinstance(state, _Merged):
            why = (f"its dim {state.dim} holds the batch rows flattened with other dims (a view "
                   f"merging the batch dim; only the batch dim itself is sliced back)")
        elif isinstance(state, (_Buffer, _Gathered)):
            why = "it holds batch rows among other rows (not sliced back)"
        elif isinstance(state, int) and not _sliced_back(checker, out, state):
            why = (f"its dim {state} holds the batch rows but is not the batch size itself (it "
                   f"would not be sliced back)")
        else:
            continue
        raise PaddingUnsafeError(_message(graph, f"output {k}", why, where))


def _is_batch_size(checker: _Checker, out) -> bool:
    """The output is a batch symbol itself (:func:`.sizes.sliced` returns the call's size)."""
    val = _val(out)
    return isinstance(val, torch.SymInt) and val.node.expr in checker.raw_symbols


def _sliced_back(checker: _Checker, out, dim: int) -> bool:
    """Dim ``dim`` is a batch symbol itself, the first dim of the output that is: what
    :func:`.sizes.sliced` slices."""
    val = _val(out)
    if not isinstance(val, torch.Tensor) or val.dim() <= dim:
        return False
    first = next((d for d, size in enumerate(val.shape) if isinstance(size, torch.SymInt)
                  and size.node.expr in checker.raw_symbols), None)
    return first == dim


def _message(graph: str, what: str, why: str, where: str) -> str:
    at = f" at {where}" if where else ""
    return (f"npugraphex_config.pad_to_capture_size: graph {graph} cannot be padded: rows of "
            f"the batch dim are not independent at {what}{at}: {why}. A padded call would "
            f"differ from the eager one. Set pad_to_capture_size=False (calls of undeclared "
            f"sizes run eagerly), declare every batch size in capture_sizes, or, if you know "
            f"the rows stay independent there, name the op in "
            f"npugraphex_config.pad_unchecked_ops.")


def check_padding(gm: torch.fx.GraphModule, batch, sizes: Sequence[int],
                  unchecked_ops: Sequence[str], graph: str,
                  placeholder_vals: Sequence[Any]) -> Tuple[RowWrite, ...]:
    """The hook of :class:`.sizes.DeclaredSizes` where padding is decided: the proof's row
    writes; raises :class:`PaddingUnsafeError`. Ops accepted only through
    ``pad_unchecked_ops`` are named in one warning and in ``capture_summary()``."""
    proof = prove_rows_independent(gm, batch.symbols, sizes, batch.lowest, unchecked_ops, graph,
                                   placeholder_vals)
    if proof.unchecked:
        import warnings

        from . import report

        report.pad_unchecked(graph, proof.unchecked)
        warnings.warn(f"graph {graph} pads with ops its rows were not proven independent "
                      f"through, accepted by npugraphex_config.pad_unchecked_ops: "
                      f"{'; '.join(proof.unchecked)}", UserWarning, stacklevel=4)
    return proof.row_writes


@contextlib.contextmanager
def restoring_rows(args: Sequence[Any], writes: Sequence[RowWrite], n: int, size: int):
    """Rows ``[start + n, start + size)`` of each written input as they were before a padded
    call (the eager call of ``n`` rows would not write them)."""
    saved = []
    for w in writes:
        buf = args[w.index]
        stop = min(w.start + size, buf.size(w.dim))
        if stop > w.start + n:
            rows = buf.narrow(w.dim, w.start + n, stop - w.start - n)
            saved.append((rows, rows.clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for rows, value in saved:
                rows.copy_(value)
