"""Declared capture sizes (``npugraphex_config.capture_sizes``): the batch dimension, padding.

A server decodes with a batch size that changes every step. Instead of one capture per size
met (each at an unpredictable moment), the sizes are declared; the first call captures them all,
largest first, so each smaller capture reuses the blocks the larger one freed in the graph's one
pool (vLLM's ``cudagraph_capture_sizes``, vllm-ascend's ``torchair_graph_batch_sizes``). A call
of another size is padded up to the next declared size when the caller says rows are
independent (``pad_to_capture_size``), its outputs sliced back; else it runs eagerly, that call
only; a call above the largest size runs eagerly too.

The batch dimension is dim 0 of the first graph input whose dim 0 is symbolic (``dynamic=True``
or ``mark_dynamic``); every user input whose dim 0 is that symbol (after the shape
environment's replacements: Dynamo may give each input its own symbol and unify them where the
graph ties them), and every integer input equal to it, follows the batch size; every output
whose dim 0 is it is sliced back. An input of another symbol is left alone, whatever its size
(an unrelated input whose dim 0 happens to equal the batch size is not padded). A graph where
the batch symbol also sizes another dim of an input (Dynamo gives equal sizes one symbol when
traced with ``dynamic=True``) cannot be resized along dim 0 alone: its declared sizes are
ignored with a warning (calls of other batch sizes get graphs of their own). Only the sizes
all those symbols' ranges admit are captured in this graph. Before a graph pads, its rows are
proven independent (:mod:`.pad_safety`).
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import logging

import torch


log = logging.getLogger("torchair_dist")


@dataclasses.dataclass(frozen=True)
class BatchDim:
    """Where the batch size lives in a graph's inputs and outputs: per batch input and output,
    the dim that holds it (dim 0 for a batch of rows; dim 1 of ``[1, tokens]`` for a flattened
    token batch)."""

    symbol: Any
    symbols: Tuple[Any, ...]         # the batch symbol and the symbols unified with it
    tensor_inputs: Tuple[int, ...]   # inputs that hold the batch
    int_inputs: Tuple[int, ...]      # integer inputs equal to the batch size
    outputs: Tuple[int, ...]         # outputs that hold the batch
    lowest: int = 0                  # the sizes the graph was traced for (Dynamo's guards:
    highest: Optional[int] = None    # size 0 and 1 are usually graphs of their own)
    input_dims: Tuple[int, ...] = ()   # per tensor input, its batch dim (default: all 0)
    output_dims: Tuple[int, ...] = ()  # per output, its batch dim (default: all 0)
    count_outputs: Tuple[int, ...] = ()  # outputs that are the batch size itself

    def accepts(self, size: int) -> bool:
        return size >= self.lowest and (self.highest is None or size <= self.highest)

    def size_of(self, args: Sequence[Any]) -> int:
        return int(args[self.tensor_inputs[0]].size(self.dim_of_input(0)))

    def dim_of_input(self, k: int) -> int:
        return self.input_dims[k] if self.input_dims else 0

    def dim_of_output(self, k: int) -> int:
        return self.output_dims[k] if self.output_dims else 0

    def describe(self) -> str:
        """Where the batch was found, for the capture summary and messages."""
        return f"dim {self.dim_of_input(0)} of input {self.tensor_inputs[0]} ({self.symbol})"


def _dim_symbol(value: Any, dim: int = 0):
    if isinstance(value, torch.Tensor) and value.dim() > dim and isinstance(value.size(dim),
                                                                            torch.SymInt):
        expr = value.size(dim).node.expr
        return expr if expr.is_Symbol else None
    return None


def _dim0_symbol(value: Any):
    return _dim_symbol(value, 0)


def _first_symbolic_dim(value: Any) -> Optional[int]:
    if not isinstance(value, torch.Tensor):
        return None
    return next((d for d in range(value.dim()) if _dim_symbol(value, d) is not None), None)


def _is_token_batch(value: Any) -> bool:
    """``[1, tokens, ...]`` with a dynamic token count: the flattened batch of transformers'
    continuous batching (every request's tokens in one row)."""
    return (isinstance(value, torch.Tensor) and value.dim() >= 2 and value.size(0) == 1
            and not isinstance(value.size(0), torch.SymInt) and _dim_symbol(value, 1) is not None)


def _batch_dim_of(value: Any, symbols) -> Optional[int]:
    """The first dim of ``value`` whose size is one of ``symbols``."""
    if not isinstance(value, torch.Tensor):
        return None
    return next((d for d in range(value.dim()) if _dim_symbol(value, d) in symbols), None)


def find_batch_dim(gm: torch.fx.GraphModule, examples: Sequence[Any],
                   user_indices: Sequence[int]) -> Optional[BatchDim]:
    """The batch dimension of a graph (None where no user input has one): dim 0 of the first
    user input whose dim 0 is symbolic; where none is, dim 1 of the first user input of shape
    ``[1, tokens, ...]`` with a symbolic token count (a flattened token batch)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    values = [p.meta.get("val", examples[i] if i < len(examples) else None)
              for i, p in enumerate(placeholders)]
    users = [i for i in user_indices if i < len(values)]
    symbol = next((_dim0_symbol(values[i]) for i in users
                   if _dim0_symbol(values[i]) is not None), None)
    if symbol is None:  # a flattened token batch: [1, tokens, ...]
        symbol = next((_dim_symbol(values[i], 1) for i in users if _is_token_batch(values[i])),
                      None)
    if symbol is None:
        return None
    # Dynamo may give each input its own symbol for the same batch (mark_dynamic, no duck
    # shaping) and unify them where the graph ties them: an input follows the batch where its
    # symbol is the batch's after the shape environment's replacements
    canonical = _canonical(values, symbol)
    symbols = {symbol}
    for i in users:
        d = _first_symbolic_dim(values[i])
        other = _dim_symbol(values[i], d) if d is not None else None
        if other is not None and _canonical(values, other) == canonical:
            symbols.add(other)
    lowest, highest = 0, None
    for sym in symbols:
        low, high = _range_of(sym, values)
        lowest = max(lowest, low)
        highest = high if highest is None else (highest if high is None else min(highest, high))
    tensors, dims = [], []
    for i, v in enumerate(values):
        d = _batch_dim_of(v, symbols)
        if d is not None:
            tensors.append(i)
            dims.append(d)
    ints = tuple(i for i, v in enumerate(values)
                 if isinstance(v, torch.SymInt) and v.node.expr in symbols)
    outputs: List[int] = []
    out_dims: List[int] = []
    counts: List[int] = []
    for node in gm.graph.find_nodes(op="output"):
        outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
        for k, out in enumerate(outs):
            val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
            d = _batch_dim_of(val, symbols)
            if d is not None:
                outputs.append(k)
                out_dims.append(d)
            elif isinstance(val, torch.SymInt) and val.node.expr in symbols:
                counts.append(k)
    return BatchDim(symbol, tuple(symbols), tuple(tensors), ints, tuple(outputs), lowest,
                    highest, tuple(dims), tuple(out_dims), tuple(counts))


def _shape_env_of(symbol, values):
    for v in values:
        d = _batch_dim_of(v, {symbol})
        if d is not None:
            return v.size(d).node.shape_env
    return None


def _canonical(values, symbol):
    """``symbol`` after its shape environment's replacements (the symbol Dynamo unified it
    with, where the graph ties two sizes)."""
    shape_env = _shape_env_of(symbol, values)
    return shape_env.replace(symbol) if shape_env is not None else symbol


def unresizable(values: Sequence[Any], batch: BatchDim) -> Optional[str]:
    """Why the graph's inputs cannot be resized along dim 0 alone (None: they can): the batch
    symbol also sizes another dim of an input, or an input that is not padded."""
    dims = dict(zip(batch.tensor_inputs, batch.input_dims or [0] * len(batch.tensor_inputs)))
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            continue
        for d, size in enumerate(v.shape):
            if not isinstance(size, torch.SymInt) or not (size.node.expr.free_symbols
                                                          & set(batch.symbols)):
                continue
            if d != dims.get(i):
                return (f"the batch size {batch.symbol} also sizes dim {d} of input {i} "
                        f"{tuple(v.shape)} (Dynamo gives sizes that were equal when traced "
                        f"one symbol); padding dim 0 alone would break the graph. Calls of "
                        f"other batch sizes get graphs of their own; mark only the batch dim "
                        f"dynamic (torch._dynamo.mark_dynamic) to avoid it")
    return None


def _range_of(symbol, values) -> Tuple[int, Optional[int]]:
    """The batch sizes the graph's guards admit (its shape environment's value range)."""
    shape_env = _shape_env_of(symbol, values)
    found = shape_env.var_to_range.get(symbol) if shape_env is not None else None
    if found is None:
        return 0, None
    return _finite(found.lower) or 0, _finite(found.upper)


def resized(args: Sequence[Any], batch: BatchDim, size: int) -> List[Any]:
    """``args`` with the batch dimension made ``size``: cut, or padded with zero rows (valid
    indices and positions for the padding rows, whose results are thrown away)."""
    out = list(args)
    for k, i in enumerate(batch.tensor_inputs):
        x = args[i]
        d = batch.dim_of_input(k)
        n = x.size(d)
        if n >= size:
            out[i] = x.narrow(d, 0, size)
        else:
            shape = list(x.shape)
            shape[d] = size
            padded = x.new_zeros(shape)
            padded.narrow(d, 0, n).copy_(x)
            out[i] = padded
    for i in batch.int_inputs:
        out[i] = size
    return out


def sliced(outputs: Sequence[Any], batch: BatchDim, n: int) -> List[Any]:
    """The first ``n`` rows of every batch output, and ``n`` for an output that is the batch
    size itself (a padded call's own results)."""
    out = list(outputs)
    for j, k in enumerate(batch.outputs):
        if isinstance(out[k], torch.Tensor):
            out[k] = out[k].narrow(batch.dim_of_output(j), 0, n)
    for k in batch.count_outputs:
        out[k] = n
    return out


def padded_size(sizes: Sequence[int], n: int) -> Optional[int]:
    """The smallest declared size >= ``n`` (None: above the largest)."""
    ordered = sorted(sizes)
    at = bisect.bisect_left(ordered, n)
    return ordered[at] if at < len(ordered) else None


def admitted_sizes(sizes: Sequence[int], batch: Optional[BatchDim], examples: Sequence[Any],
                   user_indices: Sequence[int], graph: str) -> List[int]:
    """The declared sizes this graph captures: those its guards admit (1 is usually a graph
    of its own). A graph without a dynamic batch dim captures none, with a warning unless it
    was traced for one of the declared sizes (Dynamo's graph for a batch of 1)."""
    if not sizes:
        return []
    if batch is None:
        # traced for one of the sizes (Dynamo's graph of a batch of 1, or the static first
        # graph of automatic dynamic shapes): no warning
        static = {n for i in user_indices if i < len(examples) for x in [examples[i]]
                  if isinstance(x, torch.Tensor) for n in x.shape if isinstance(n, int)}
        if not static & set(sizes):
            import warnings

            warnings.warn(f"npugraphex_config.capture_sizes is ignored for graph {graph}: no "
                          f"input has a dynamic dim 0 (compile with dynamic=True or "
                          f"torch._dynamo.mark_dynamic the batch dim)", UserWarning, stacklevel=3)
        return []
    return [n for n in sizes if batch.accepts(n) and _guards_admit(batch, examples, n)]


def _guards_admit(batch: BatchDim, values: Sequence[Any], size: int) -> bool:
    """Whether the shape guards of the graph that depend on the batch size alone hold for
    ``size`` (a graph Dynamo compiled for some sizes only, e.g. a batch of 1 split off by a
    guard its value range does not show, gets no call of the others: it captures none)."""
    shape_env = _shape_env_of(batch.symbol, values)
    if shape_env is None:
        return True
    symbols = set(batch.symbols)
    subs = {sym: size for sym in symbols}
    for guard in getattr(shape_env, "guards", ()):
        expr = getattr(guard, "expr", None)
        free = getattr(expr, "free_symbols", None)
        if not free or not free <= symbols:
            continue
        try:
            if not bool(expr.xreplace(subs)):
                return False
        except TypeError:  # not decidable from the size alone
            continue
    return True


def check_sizes(sizes: Sequence[int], graph: str) -> List[int]:
    """The declared sizes, largest first; each must be a positive int."""
    bad = [s for s in sizes if not isinstance(s, int) or s < 1]
    if bad:
        from ...errors import ConfigError

        raise ConfigError(f"npugraphex_config.capture_sizes of graph {graph}: {bad} are not "
                          f"positive batch sizes")
    return sorted(set(sizes), reverse=True)


def _finite(bound) -> Optional[int]:
    """A value-range bound as an int; None for an infinite one (sympy's oo, torch's int_oo)."""
    try:
        return int(bound)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


class DeclaredSizes:
    """A graph's declared capture sizes, and how a call is served by them: the one place both
    the capturing runner and the piecewise runner ask (``npugraphex_config.capture_sizes``).

    It plans, the runner carries out (no call back into the runner): ``first_captures(args)``
    lists, at the first call, ``args`` cut or padded to each size this graph admits, largest
    first (a size another graph of the frame was compiled for, such as Dynamo's graph for a
    batch of 1, is not admitted by this one's guards), and restores the inputs the graph
    mutates when the runner has captured them; ``route(args)`` is None for a declared size
    (the runner serves it as it is), else a :class:`Route`: run eagerly, or padded."""

    def __init__(self, config, gm, examples, user_indices, mutated_indices, graph: str,
                 enabled: bool = True):
        self.graph = graph
        sizes = check_sizes(config.get("npugraphex_config.capture_sizes") or [], graph) \
            if enabled else []
        self.pad = config.get("npugraphex_config.pad_to_capture_size")
        unchecked = config.get("npugraphex_config.pad_unchecked_ops") or []
        self.batch = find_batch_dim(gm, examples, user_indices) if sizes else None
        values = [p.meta.get("val") for p in gm.graph.find_nodes(op="placeholder")]
        why = unresizable(values, self.batch) if self.batch is not None else None
        if why is not None:
            import warnings

            warnings.warn(f"npugraphex_config.capture_sizes is ignored for graph {graph}: {why}",
                          UserWarning, stacklevel=3)
            self.batch = None
        self.sizes = admitted_sizes(sizes, self.batch, examples, user_indices, graph) \
            if why is None else []
        self.mutated = sorted(set(mutated_indices))
        self.pad_refused = self.batch is not None and bool(
            set(self.batch.tensor_inputs) & set(self.mutated))
        self.row_writes: tuple = ()
        if self.pad and self.sizes and not self.pad_refused:
            from .pad_safety import check_padding

            self.row_writes = check_padding(gm, self.batch, self.sizes, unchecked, graph,
                                            values)
        self.pending = bool(self.sizes)
        self._warned_later = False
        if self.batch is not None:
            from . import report

            report.batch_dim(graph, self.batch.describe(), self.sizes)

    @contextlib.contextmanager
    def first_captures(self, args: Sequence[Any]):
        """The first call's plan: ``(size, sized_args, made_up)`` for every size this graph
        captures up front, largest first (``made_up``: inputs cut or padded from this call's;
        the caller captures each, and reports one it could not through :meth:`not_up_front`);
        inputs the graph mutates are restored when the block ends."""
        import time

        self.pending = False
        saved = {i: args[i].clone() for i in self.mutated if isinstance(args[i], torch.Tensor)}
        self._own = own = self.batch.size_of(args)
        started = time.perf_counter()
        try:
            yield [(size, resized(args, self.batch, size), size != own) for size in self.sizes]
        finally:
            with torch.no_grad():
                for i, value in saved.items():
                    args[i].copy_(value)
        log.info("%s: captured %d declared sizes in %.2f s", self.graph, len(self.sizes),
                 time.perf_counter() - started)

    def not_up_front(self, size: int, exc: Exception) -> None:
        """A made-up capture of ``size`` failed: where the graph's other inputs are tied to the
        batch size (a KV length, offsets of the flattened requests), inputs cut or padded
        from another call's do not fit; the size is captured at its first real call, named in
        one warning and in ``capture_summary()['declared_later']``."""
        from . import report

        report.declared_later(self.graph, size)
        if self._warned_later:
            return
        self._warned_later = True
        import warnings

        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        warnings.warn(
            f"graph {self.graph}: declared capture size {size} cannot be captured up front "
            f"from a call of size {self._own} ({type(exc).__name__}: {first}): other inputs "
            f"depend on the batch size, so the made-up inputs do not fit the graph. It is "
            f"captured at its first call instead (and so is any other size that fails the "
            f"same way).", UserWarning, stacklevel=4)

    def route(self, args: Sequence[Any]) -> Optional["Route"]:
        """How a call is served: None for a declared size (or no batch dim: the caller serves
        it as it is), else a :class:`Route`, counted in the capture summary."""
        if self.batch is None:
            return None
        n = self.batch.size_of(args)
        if n in self.sizes:
            return None
        from . import report

        target = padded_size(self.sizes, n) if self.pad and not self.pad_refused else None
        if target is None:
            why = ("a mutated input has the batch dim" if self.pad_refused else
                   "above the largest declared size" if self.pad else
                   "pad_to_capture_size is off")
            report.eager_call(self.graph, n, why)
            return Route(n, None)
        report.padded(self.graph, n, target)
        return Route(n, target, resized(args, self.batch, target), self.batch, self.row_writes,
                     args)


@dataclasses.dataclass
class Route:
    """A call of ``n`` rows, not a declared size: run eagerly (``target`` None), or run on
    ``args`` padded up to ``target`` (:meth:`restoring` around it: the rows of inputs the
    padding rows write, put back; :meth:`sliced`: the call's own rows of the outputs)."""

    n: int
    target: Optional[int]
    args: Optional[List[Any]] = None
    batch: Optional[BatchDim] = None
    row_writes: Sequence[Any] = ()
    original: Sequence[Any] = ()

    @property
    def eager(self) -> bool:
        return self.target is None

    def restoring(self):
        if not self.row_writes:
            return contextlib.nullcontext()
        from .pad_safety import restoring_rows

        return restoring_rows(self.original, self.row_writes, self.n, self.target)

    def sliced(self, outputs) -> List[Any]:
        return sliced(list(outputs), self.batch, self.n)
