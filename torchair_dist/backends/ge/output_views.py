"""Outputs that are views of intermediates, as eager returns them.

In an inference graph AOT autograd leaves it to the compiler to return an output that views an
intermediate (``y = relu(x); return y.t(), y[1:, ::2]``) as a view: eager's outputs share one
storage, at eager's strides and storage offsets. A GE graph returns every output as a dense
tensor of its own. :func:`outputs_as_bases` rewrites a copy of the graph so that each such output
is its base (the intermediate it views); :func:`rebuild_views` makes the views again from the
bases GE returned, with the sizes, strides and offsets the graph's example values give.

A view with symbolic sizes, strides or offset is rebuilt from the run's sizes: its
expressions are evaluated with the symbols bound from the graph inputs (a symbolic size input,
a tensor input's symbolic dims); where a symbol cannot be bound (a data-dependent size) the
output stays GE's dense copy: eager's values, not eager's aliasing.
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Tuple

import torch
import torch.fx

from ...base.layout import SymbolBinder, _plain, symbol_sources

aten = torch.ops.aten

# (output position, position of its base among the outputs, sizes, strides, storage offset);
# the last three hold sympy expressions where the graph's sizes are symbolic
View = Tuple[int, int, Tuple[Any, ...], Tuple[Any, ...], Any]


# Views that are windows on their input's elements (sizes, strides, offset: an as_strided of
# the base gives them back). Not here: view.dtype (a reinterpretation), _conj / _neg_view
# (a flag on the tensor), view_as_real / view_as_complex (another dtype).
_WINDOWS = frozenset({"view", "_unsafe_view", "reshape", "alias", "detach", "t", "transpose", "permute",
                      "slice", "select", "narrow", "expand", "squeeze", "unsqueeze", "diagonal",
                      "unfold", "as_strided", "split", "split_with_sizes", "unbind", "chunk",
                      "tensor_split", "unflatten", "movedim"})


def _is_view(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # split / chunk / unbind results
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and _is_view(src)
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.name.split("::")[-1] not in _WINDOWS or target._overloadname == "dtype":
        return False
    return bool(target._schema.returns) and any(
        r.alias_info is not None and not r.alias_info.is_write for r in target._schema.returns)


def _root(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The first node that is not a view, walking back from the view ``node`` through views
    of their first argument (None where a view's source is not a node)."""
    base = node
    while _is_view(base):
        src = base.args[0]
        if not isinstance(src, torch.fx.Node):
            return None
        base = src
    return base


def _base_of(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """:func:`_root` of a view; None when ``node`` is not a view or its base is a graph input
    (AOT already regenerates views of inputs)."""
    base = _root(node) if _is_view(node) else None
    return None if base is None or base.op == "placeholder" else base


def views_an_input(node: Any) -> bool:
    """Whether ``node`` is a view (through views of their first argument) of a graph input."""
    if not isinstance(node, torch.fx.Node) or not _is_view(node):
        return False
    base = _root(node)
    return base is not None and base.op == "placeholder"


def check_input_views(gm: torch.fx.GraphModule, layouts: List[Any], graph_name: str) -> None:
    """Refuse a graph with an output that views an input where its layout cannot be known
    per run (a size, stride or offset over a data-dependent symbol no input carries): AOT
    rebuilds such an output from the layout the graph returns, and GE's dense result would
    make it view the wrong elements."""
    from ...errors import UnsupportedOpError

    (output,) = gm.graph.find_nodes(op="output")
    outs = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    for i, (out, layout) in enumerate(zip(outs, layouts)):
        if layout is not None or not views_an_input(out):
            continue
        val = out.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        raise UnsupportedOpError(
            f"{graph_name}: output {i} (%{out.name}) views a graph input with sizes "
            f"{tuple(val.size())}, strides {tuple(val.stride())} and storage offset "
            f"{val.storage_offset()} that the run's inputs do not determine (a data-dependent "
            f"size); max-autotune cannot return that view. Return a copy "
            f"(`.clone()`) or make the size static")


def _layout(node: torch.fx.Node, bound) -> Optional[Tuple[Tuple[Any, ...], Tuple[Any, ...], Any]]:
    """(sizes, strides, offset) of the node's example value, ints or sympy expressions over
    the ``bound`` symbols; None for a non-tensor or an unbound symbol."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    layout = (tuple(_plain(v) for v in val.size()), tuple(_plain(v) for v in val.stride()),
              _plain(val.storage_offset()))
    for v in (*layout[0], *layout[1], layout[2]):
        if not isinstance(v, int) and not v.free_symbols <= bound:
            return None
    return layout


def outputs_as_bases(gm: torch.fx.GraphModule) -> Tuple[torch.fx.GraphModule, List[View]]:
    """A copy of ``gm`` whose outputs that view an intermediate are that intermediate, and the
    views to rebuild after a run (:class:`ViewRebuilder`); ``gm`` itself when no output needs
    it."""
    (output,) = gm.graph.find_nodes(op="output")
    outs = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    bound = {source[0] for source in symbol_sources(gm)}
    plan = []
    for i, out in enumerate(outs):
        base = _base_of(out) if isinstance(out, torch.fx.Node) else None
        layout = _layout(out, bound) if base is not None else None
        base_layout = _layout(base, bound) if layout is not None else None
        if layout is None or base_layout is None or base_layout[2] != 0:
            continue
        if out.meta["val"].dtype != base.meta["val"].dtype:
            continue  # view.dtype: a reinterpretation, not a window on the base's elements
        plan.append((i, base, layout))
    if not plan:
        return gm, []
    new_outs = list(outs)
    first: dict = {}
    for i, out in enumerate(outs):
        if isinstance(out, torch.fx.Node):
            first.setdefault(out, i)
    views: List[View] = []
    for i, base, (size, stride, offset) in plan:
        new_outs[i] = base
        src = first.setdefault(base, i)
        views.append((i, src, size, stride, offset))
    graph = torch.fx.Graph()
    mapping: dict = {}
    graph.graph_copy(gm.graph, mapping)
    graph.output(tuple(mapping[o] if isinstance(o, torch.fx.Node) else o for o in new_outs))
    copied = torch.fx.GraphModule(gm, graph)
    return copied, views


class ViewRebuilder:
    """Makes each planned output again as a view of its base's run result; symbolic layouts
    are evaluated with the symbols read from the run's inputs."""

    def __init__(self, views: List[View], binder: SymbolBinder):
        self.views = views
        self.symbolic = any(not isinstance(v, int) for _, _, size, stride, offset in views
                            for v in (*size, *stride, offset))
        self.binder = binder

    def __call__(self, outs: List[Any], args: List[Any], values: Optional[dict] = None) -> List[Any]:
        if self.symbolic and values is None:
            values = self.binder(args)

        def ints(exprs):
            return [v if isinstance(v, int) else int(v.xreplace(values)) for v in exprs]

        bases = {src: outs[src] for _, src, *_ in self.views}
        for i, src, size, stride, offset in self.views:
            if self.symbolic:
                size, stride, (offset,) = ints(size), ints(stride), ints([offset])
            outs[i] = bases[src].as_strided(size, stride, offset)
        return outs
