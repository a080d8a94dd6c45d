"""Small AOT-graph passes every mode uses: the user's pre/post passes, noop removal,
copy-into-empty removal, view -> reshape, reshape-chain collapsing.

Each pass is ``(gm, example_inputs, config) -> gm``. Which of them run, and in what order, is
the stage table's alone (``torchair_dist.pipeline.stages``: each mode's row, each stage's gate);
a pass never checks its own switch.
"""
from __future__ import annotations

import inspect
import logging
from typing import Callable

import torch
import torch.fx

log = logging.getLogger("torchair_dist")
aten = torch.ops.aten


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _same_shape(a, b) -> bool:
    va, vb = _val(a), _val(b)
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.shape == vb.shape and va.dtype == vb.dtype and va.device == vb.device
            and va.stride() == vb.stride())


def _is_noop(node: torch.fx.Node) -> bool:
    target, args = node.target, node.args
    if target in (aten.view.default, aten.reshape.default, aten._unsafe_view.default,
                  aten.expand.default, aten.alias.default):
        return _same_shape(node, args[0])
    if target is aten.slice.Tensor:
        dim = args[1] if len(args) > 1 else 0
        start = args[2] if len(args) > 2 else None
        end = args[3] if len(args) > 3 else None
        step = args[4] if len(args) > 4 else 1
        val = _val(args[0])
        return (val is not None and step == 1 and start in (None, 0)
                and (end is None or (isinstance(end, int) and end >= val.shape[dim]))
                and _same_shape(node, args[0]))
    if target in (aten._to_copy.default, aten.clone.default):
        return False  # they create new storage: removing them could alias an input/output
    if target is aten.cat.default:
        return len(args[0]) == 1 and _same_shape(node, args[0][0])
    return False


def remove_noop_ops(gm, example_inputs, config):
    """Replace ops that return their input unchanged (same shape/stride/dtype) by the input.

    Requires: node.meta["val"] (AOT provides it). Guarantees: numerics unchanged; a node whose
    value is a graph output or is written by copy_ is kept, so no output starts aliasing an
    input that did not before.
    """
    removed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not _is_noop(node):
            continue
        if any(u.op == "output" or u.target is aten.copy_.default for u in node.users):
            continue
        src = node.args[0][0] if node.target is aten.cat.default else node.args[0]
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        removed += 1
    if removed:
        gm.graph.lint()
        gm.recompile()
        log.debug("remove_noop_ops: %d ops removed", removed)
    return gm


_EMPTY_OPS = (aten.empty_like.default, aten.empty.memory_format, aten.empty_strided.default,
              aten.new_empty.default)


def _fresh_result(node) -> bool:
    """``node`` is a call whose result is new storage or a collective's result (no alias of a
    graph input): removing a copy of it cannot make an output alias an input."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is torch.ops._c10d_functional.wait_tensor.default:
        return _fresh_result(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return (schema is not None and len(schema.returns) == 1 and not schema.is_mutable
            and schema.returns[0].alias_info is None)


def remove_copy_into_empty(gm, example_inputs, config):
    """``aten.copy(empty_like(x), src)`` -> ``src`` when src already has the copy's shape,
    strides, dtype and device: the functionalized form of ``out = empty_like(x);
    collective(out, ...)`` (the collective's result is copied into a buffer nobody wrote).

    Requires: node.meta["val"]. Guarantees: same values; the buffer has no other reader; src
    is fresh storage (an op result or a collective's result), never an input or a view, and
    is not itself a graph output, so no output starts aliasing an input or another output.
    """
    removed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy.default:
            continue
        dst, src = node.args[0], node.args[1]
        if not (isinstance(dst, torch.fx.Node) and dst.target in _EMPTY_OPS
                and len(dst.users) == 1 and _fresh_result(src) and _same_shape(node, src)):
            continue
        if any(u.op == "output" for u in src.users):
            continue
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        gm.graph.erase_node(dst)
        removed += 1
    if removed:
        gm.graph.lint()
        gm.recompile()
        log.debug("remove_copy_into_empty: %d copies removed", removed)
    return gm


def view_to_reshape(gm, example_inputs, config):
    """Replace ``aten.view`` by ``aten.reshape`` so later passes may change layouts freely.

    Guarantees: same values (reshape of a contiguous tensor is a view).
    """
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.view.default:
            node.target = aten.reshape.default
            changed = True
    if changed:
        gm.recompile()
    return gm


def collapse_view_chains(gm, example_inputs, config):
    """(``npu_fx_pass``) reshape(reshape(x, a), b) -> reshape(x, b) when the inner has no
    other user. Guarantees: same values; fewer nodes for the backends to lower."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.reshape.default:
            inner = node.args[0]
            if (isinstance(inner, torch.fx.Node) and inner.target is aten.reshape.default
                    and len(inner.users) == 1):
                node.args = (inner.args[0],) + tuple(node.args[1:])
                gm.graph.erase_node(inner)
                changed = True
    if changed:
        gm.recompile()
    return gm


def _takes_graph_only(fn: Callable) -> bool:
    """True for a one-argument pass ``fn(graph)`` (inductor's convention); False for
    TorchAir's ``fn(gm, example_inputs, config)`` (and anything that accepts 3 arguments)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(None, None, None)
    except TypeError:
        try:
            sig.bind(None)
        except TypeError:
            return False
        return True
    return False


_warned_graph_only: set = set()


def _run_custom(name: str, gm, example_inputs, config):
    """Run ``config.<name>`` as TorchAir does, ``fn(gm, example_inputs, config)`` (the pass edits
    ``gm`` in place or returns a GraphModule); a one-argument pass is called as
    ``fn(gm.graph)`` (inductor's convention) with a warning."""
    fn = config.get(name)  # the stage runs only when it is set (its gate)
    if _takes_graph_only(fn):
        key = (name, getattr(fn, "__qualname__", repr(fn)))
        if key not in _warned_graph_only:
            _warned_graph_only.add(key)
            log.warning("%s %s takes one argument: called as fn(gm.graph) (inductor's "
                        "convention); TorchAir calls fn(gm, example_inputs, config)",
                        name, key[1])
        result = fn(gm.graph)
    else:
        result = fn(gm, example_inputs, config)
    if isinstance(result, torch.fx.GraphModule):
        gm = result
    gm.graph.lint()
    gm.recompile()
    return gm


def custom_pre_pass(gm, example_inputs, config):
    """The ``custom_pre_pass`` stage: the user's ``post_grad_custom_pre_pass`` (see
    :func:`_run_custom`)."""
    return _run_custom("post_grad_custom_pre_pass", gm, example_inputs, config)


def custom_post_pass(gm, example_inputs, config):
    """The ``custom_post_pass`` stage: the user's ``post_grad_custom_post_pass`` (see
    :func:`_run_custom`)."""
    return _run_custom("post_grad_custom_post_pass", gm, example_inputs, config)
