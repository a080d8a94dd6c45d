"""Tensor layouts as eager has them: sizes, strides and storage offset.

A compiled graph must hand back what eager would: the same values *and* the same layout. A view,
``as_strided`` or ``resize`` reads storage order; a caller's ``.view()`` needs eager's strides.

- :func:`written_part`: a tensor with its expanded dims narrowed to one element (what a copy
  into a buffer of that layout writes);
- :class:`OutputLayout` / :func:`output_layouts`: what layout each output of an FX graph must
  have (from the graph's example values, static or symbolic), and :meth:`OutputLayout.conform`,
  which gives a tensor that layout where a backend produced another (GE returns dense
  row-major tensors; eager may return channels_last or permuted ones);
- :func:`symbol_sources` / :class:`SymbolBinder`: where a run's inputs carry each symbol of a
  graph with symbolic sizes, and the symbols' values for one run (a layout with symbolic sizes,
  strides or storage offset is evaluated with them).

A symbolic layout that is not a dense tensor at offset 0 (``x.narrow(0, 1, n)``, ``x[:, ::2][:n]``
of an input: eager returns a view at an offset, with the input's strides) is kept as sympy
expressions and evaluated per run: AOT rebuilds an output that aliases an input from the layout
the compiled graph returns, so a dense result at offset 0 would make it view the wrong elements.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import torch


def written_part(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its expanded dims (stride 0, size > 1) narrowed to one element."""
    if all(s != 0 or n <= 1 for n, s in zip(x.size(), x.stride())):
        return x
    return x[tuple(slice(0, 1) if s == 0 and n > 1 else slice(None)
                   for n, s in zip(x.size(), x.stride()))]


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` where ``dst`` may have expanded dims (stride 0): each element of its
    memory is written once, from the first element along those dims of ``src``."""
    index = _expanded_index(dst)
    if index is None:
        dst.copy_(src)
    else:
        dst[index].copy_(src.expand(dst.shape)[index])


def _expanded_index(x: torch.Tensor):
    if all(s != 0 or n <= 1 for n, s in zip(x.size(), x.stride())):
        return None
    return tuple(slice(0, 1) if s == 0 and n > 1 else slice(None)
                 for n, s in zip(x.size(), x.stride()))


def empty_with_layout(size: Sequence[int], stride: Sequence[int], offset: int,
                      like: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor with exactly these sizes, strides and storage offset."""
    extent = 0 if any(n == 0 for n in size) else 1 + sum(
        (n - 1) * s for n, s in zip(size, stride))
    storage = torch.empty(offset + extent, dtype=like.dtype, device=like.device)
    return storage.as_strided(tuple(size), tuple(stride), offset)


def clone_keeping_views(outs: Sequence[Any], keep: Sequence[bool] = ()) -> List[Any]:
    """Copies of the tensors in ``outs`` that keep what the caller can observe between them:
    outputs that view one storage get one new storage, and keep their strides and storage
    offsets (``tensor.clone()`` gives each its own dense memory at offset 0). Only the
    elements the outputs show are copied; the new storage is as long as the last of them
    (no longer than eager's). ``keep[i]``: return ``outs[i]`` itself (an output that aliases
    an input)."""
    groups: dict = {}
    for i, out in enumerate(outs):
        if isinstance(out, torch.Tensor) and not (i < len(keep) and keep[i]):
            groups.setdefault((out.untyped_storage().data_ptr(), out.dtype), []).append(i)
    result = list(outs)
    for members in groups.values():
        end = max(_end(outs[i]) for i in members)
        first = outs[members[0]]
        storage = torch.empty(end, dtype=first.dtype, device=first.device)
        for i in members:
            out = outs[i]
            copy = storage.as_strided(out.size(), out.stride(), out.storage_offset())
            copy_into(copy, out)
            result[i] = copy
    return result


def _end(t: torch.Tensor) -> int:
    """One past the last storage element (in elements of ``t``'s dtype) ``t`` shows."""
    if t.numel() == 0:
        return t.storage_offset()
    return t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.size(), t.stride()))


@dataclasses.dataclass(frozen=True)
class OutputLayout:
    """The layout one graph output must have.

    ``exact``: (sizes, strides, storage offset), where the graph's example value has them as
    plain integers; else ``order``: the dims from outermost to innermost of a dense tensor
    (symbolic sizes: the strides follow from the run's sizes)."""

    exact: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], int]] = None
    order: Optional[Tuple[int, ...]] = None
    # (sizes, strides, storage offset) as ints or sympy expressions over symbols the graph's
    # inputs carry, where the layout is symbolic and not dense at offset 0: :meth:`at` gives
    # the exact layout of one run
    symbolic: Optional[Tuple[Tuple[Any, ...], Tuple[Any, ...], Any]] = None

    def at(self, values: dict) -> "OutputLayout":
        """This layout for one run: ``values`` binds the symbols (:class:`SymbolBinder`)."""
        if self.symbolic is None:
            return self
        size, stride, offset = self.symbolic
        return OutputLayout(exact=(_ints(size, values), _ints(stride, values),
                                   _ints((offset,), values)[0]))

    def matches(self, t: torch.Tensor) -> bool:
        if self.exact is not None:
            size, stride, offset = self.exact
            return t.storage_offset() == offset and _same_strides(t.size(), t.stride(), stride)
        return _same_strides(t.size(), t.stride(), _dense_strides(t.size(), self.order))

    def conform(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` itself when it has this layout, else a copy that has it."""
        if not isinstance(t, torch.Tensor) or self.matches(t):
            return t
        if self.exact is not None:
            size, stride, offset = self.exact
            if tuple(t.size()) != size:
                return t  # not the shape traced (cannot happen for a static graph): leave it
            out = empty_with_layout(size, stride, offset, t)
        else:
            out = torch.empty_permuted(t.size(), self.order, dtype=t.dtype, device=t.device)
        copy_into(out, t)
        return out


def _same_strides(size, actual, expected) -> bool:
    """Strides equal where they matter: dims of size 1 may differ (no element moves)."""
    if tuple(actual) == tuple(expected):
        return True
    if any(n == 0 for n in size):
        return True  # an empty tensor has no layout to read
    return all(n == 1 or a == e for n, a, e in zip(size, actual, expected))


def _dense_strides(size, order: Sequence[int]) -> List[int]:
    stride = [0] * len(size)
    step = 1
    for dim in reversed(order):
        stride[dim] = step
        step *= max(int(size[dim]), 1)
    return stride


def _ints(exprs, values: dict) -> Tuple[int, ...]:
    return tuple(v if isinstance(v, int) else int(v.xreplace(values)) for v in exprs)


def _plain(v: Any) -> Any:
    """An int, or the sympy expression of a SymInt."""
    return v.node.expr if isinstance(v, torch.SymInt) else int(v)


def layout_of(value: Any, bound: frozenset = frozenset()) -> Optional[OutputLayout]:
    """The layout of an example value (a fake tensor), or None where it says nothing a run
    can be held to (not a tensor; symbolic, not dense at offset 0, and over a symbol outside
    ``bound``, the symbols a run's inputs carry)."""
    if not isinstance(value, torch.Tensor):
        return None
    size, stride = tuple(value.size()), tuple(value.stride())
    offset = value.storage_offset()
    plain = [*size, *stride, offset]
    if all(isinstance(v, int) for v in plain):
        return OutputLayout(exact=(size, stride, offset))
    from .torch_support import symbolic_size_hint

    hint = symbolic_size_hint()
    try:
        sizes = [int(hint(n)) for n in size]
        strides = [int(hint(s)) for s in stride]
    except Exception:  # noqa: BLE001 - an unbacked size has no hint: nothing to hold to
        return None
    order = tuple(sorted(range(len(size)), key=lambda d: (-strides[d], d)))
    dense = _dense_strides(sizes, order) == strides or _same_strides(
        sizes, strides, _dense_strides(sizes, order))
    if dense and isinstance(offset, int) and offset == 0:
        return OutputLayout(order=order)
    exprs = (tuple(_plain(n) for n in size), tuple(_plain(s) for s in stride), _plain(offset))
    free = set()
    for v in (*exprs[0], *exprs[1], exprs[2]):
        if not isinstance(v, int):
            free |= v.free_symbols
    if not free <= bound:
        return None
    return OutputLayout(symbolic=exprs)


def output_layouts(gm: torch.fx.GraphModule) -> List[Optional[OutputLayout]]:
    """Per flat output of ``gm``: the layout its example value (``meta['val']``) has."""
    bound = frozenset(source[0] for source in symbol_sources(gm))
    found: List[Optional[OutputLayout]] = []
    for node in gm.graph.find_nodes(op="output"):
        outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
        for out in outs:
            value = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
            found.append(layout_of(value, bound))
    return found


# (symbol, input position, what of the input carries it: "int" (a size input itself),
# "size" / "stride" (with the dim), "offset")
SymbolSource = Tuple[Any, int, str, int]


def symbol_sources(gm: torch.fx.GraphModule) -> List[SymbolSource]:
    """Where the graph's inputs carry each symbol as itself: a symbolic size input, or a
    tensor input's size, stride or storage offset that is a bare symbol (the first place
    for each symbol)."""
    found: List[SymbolSource] = []
    seen: set = set()

    def add(v, i, kind, d):
        if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol and v.node.expr not in seen:
            seen.add(v.node.expr)
            found.append((v.node.expr, i, kind, d))

    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            add(val, i, "int", 0)
        elif isinstance(val, torch.Tensor):
            for d, n in enumerate(val.size()):
                add(n, i, "size", d)
            for d, s in enumerate(val.stride()):
                add(s, i, "stride", d)
            add(val.storage_offset(), i, "offset", 0)
    return found


class SymbolBinder:
    """The values of a graph's symbols in one run, read from the run's inputs where
    :func:`symbol_sources` says they are."""

    def __init__(self, sources: List[SymbolSource]):
        self.sources = tuple(sources)

    def __call__(self, args: Sequence[Any]) -> dict:
        import sympy

        values = {}
        for sym, i, kind, d in self.sources:
            arg = args[i]
            if kind == "int":
                v = int(arg)
            elif kind == "size":
                v = arg.size(d)
            elif kind == "stride":
                v = arg.stride(d)
            else:
                v = arg.storage_offset()
            values[sym] = sympy.Integer(v)
        return values
