"""Pattern fusion (ACL modes on NPU, ``experimental_config.pattern_fusion_pass``): known
subgraphs become one fused NPU op, as TorchAir's pattern passes do.

The pattern: a residual add followed by an RMSNorm, in the shape transformers' ``LlamaRMSNorm``
(and its Qwen/Mistral copies) takes after AOT autograd::

    x  = add(x1, x2)                               # the residual stream, may have more users
    xf = _to_copy(x, dtype=float32)                # only when x is not float32
    r  = rsqrt(add(mean(pow(xf, 2), [-1], True), eps))
    y  = mul(weight, _to_copy(mul(xf, r), dtype=x.dtype))   # cast only when x is not float32

becomes ``y, _, x = torch_npu.npu_add_rms_norm(x1, x2, weight, eps)``: one kernel reads x1 and
x2 once and writes the sum and the normalized value.

Requires: ``node.meta["val"]`` (AOT provides it); node order is the execution order.
Guarantees: the same values up to the fused kernel's rounding. A match needs: both add operands
of x's shape and dtype, a weight of shape ``[x.shape[-1]]`` and x's dtype defined before x, the
mean over the last dim only, and every intermediate of the norm used only inside the pattern
(x itself may have other users: they read the fused op's sum output), and every node it replaces
on one stream (never fused across a stream boundary). Anything else is left alone. The fused op
exists only in torch_npu, so the pass runs only on the NPU platform.
"""
from __future__ import annotations

import logging
import operator
from typing import Dict, List, Optional

import torch
import torch.fx

from .. import platform as _platform
from .stream_ordering import same_stream, streams_of

log = logging.getLogger("torchair_dist")
aten = torch.ops.aten


def fused_add_rms_norm():
    """torch_npu's ``npu_add_rms_norm`` op on the NPU platform; None elsewhere."""
    return _platform.current().vendor_op("npu_add_rms_norm")


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _call(node, target) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


def _only_used_by(node: torch.fx.Node, users) -> bool:
    return set(node.users) <= set(users)


def _other_operand(node: torch.fx.Node, known) -> Optional[torch.fx.Node]:
    """``node`` is mul(known, other) or mul(other, known): the other operand."""
    a, b = node.args[:2]
    if a is known:
        return b
    return a if b is known else None


def _cast_source(node, dtype) -> Optional[torch.fx.Node]:
    """``node`` is ``_to_copy(src, dtype=dtype)`` (nothing else changed): src."""
    if (_call(node, aten._to_copy.default) and set(node.kwargs) == {"dtype"}
            and node.kwargs["dtype"] == dtype and len(node.args) == 1):
        return node.args[0]
    return None


def _match(out: torch.fx.Node, order) -> Optional[Dict[str, torch.fx.Node]]:
    """The pattern ending at ``out`` (the weight multiply), or None."""
    if not _call(out, aten.mul.Tensor) or out.kwargs:
        return None
    for weight, normed in ((out.args[0], out.args[1]), (out.args[1], out.args[0])):
        found = _match_norm(normed)
        if found is not None:
            found.update(out=out, weight=weight)
            return found if _checks(found, order) else None
    return None


def _match_norm(normed) -> Optional[Dict[str, torch.fx.Node]]:
    if not isinstance(normed, torch.fx.Node):
        return None
    m = _cast_source(normed, _val(normed).dtype if _val(normed) is not None else None)
    m = m if m is not None else normed
    if not _call(m, aten.mul.Tensor) or m.kwargs:
        return None
    for xf in m.args[:2]:
        r = _other_operand(m, xf)
        if not _call(r, aten.rsqrt.default) or not _call(r.args[0], aten.add.Tensor):
            continue
        eps_add = r.args[0]
        mean, eps = eps_add.args[:2]
        if (not isinstance(eps, float) or eps_add.kwargs or not _call(mean, aten.mean.dim)
                or not _call(mean.args[0], aten.pow.Tensor_Scalar)):
            continue
        p = mean.args[0]
        if p.args[0] is not xf or p.args[1] != 2:
            continue
        x = _cast_source(xf, torch.float32) or xf
        return {"normed": normed, "m": m, "r": r, "eps_add": eps_add, "mean": mean, "p": p,
                "xf": xf, "x": x, "eps": eps}
    return None


def _checks(f, order) -> bool:
    x, xv = f["x"], _val(f["x"])
    if not _call(x, aten.add.Tensor) or x.kwargs or len(x.args) != 2 or xv is None:
        return False
    mean = f["mean"]
    dims = mean.args[1] if len(mean.args) > 1 else None
    keep = mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False)
    if list(dims or []) not in ([-1], [xv.dim() - 1]) or keep is not True or mean.kwargs.get(
            "dtype") is not None:
        return False
    if (f["xf"] is x) != (xv.dtype == torch.float32):
        return False
    if (f["normed"] is f["m"]) != (xv.dtype == torch.float32):
        return False
    for operand in x.args:
        v = _val(operand)
        if v is None or v.shape != xv.shape or v.dtype != xv.dtype:
            return False
    wv = _val(f["weight"])
    if wv is None or tuple(wv.shape) != (xv.shape[-1],) or wv.dtype != xv.dtype:
        return False
    return _private(f, order)


def _one_stream(f, streams) -> bool:
    """Every node the fusion replaces runs on one stream: never fuse across streams."""
    return same_stream(*(f[k] for k in ("out", "normed", "m", "r", "eps_add", "mean", "p",
                                        "xf", "x")), streams=streams)


def _private(f, order) -> bool:
    """The norm's intermediates feed nothing outside the pattern; the weight precedes x."""
    chain = [f["out"], f["normed"], f["m"], f["r"], f["eps_add"], f["mean"], f["p"], f["xf"]]
    for node, users in ((f["normed"], [f["out"]]), (f["m"], [f["normed"], f["out"]]),
                        (f["r"], [f["m"]]), (f["eps_add"], [f["r"]]), (f["mean"], [f["eps_add"]]),
                        (f["p"], [f["mean"]])):
        if not _only_used_by(node, users):
            return False
    if f["xf"] is not f["x"] and not _only_used_by(f["xf"], chain):
        return False
    return order[f["weight"]] < order[f["x"]]


def _rewrite(gm: torch.fx.GraphModule, f, fused) -> None:
    graph, x = gm.graph, f["x"]
    with graph.inserting_before(x):
        node = graph.call_function(fused, (x.args[0], x.args[1], f["weight"], f["eps"]))
        y = graph.call_function(operator.getitem, (node, 0))
        total = graph.call_function(operator.getitem, (node, 2))
    vals = (_val(f["out"]), _val(f["r"]), _val(x))
    node.meta["val"] = vals
    y.meta["val"], total.meta["val"] = vals[0], vals[2]
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in f["out"].meta:
            node.meta[key] = f["out"].meta[key]
    f["out"].replace_all_uses_with(y)
    seen: List[torch.fx.Node] = []
    for key in ("out", "normed", "m", "r", "eps_add", "mean", "p", "xf"):
        if f[key] is not x and f[key] not in seen:
            graph.erase_node(f[key])
            seen.append(f[key])
    x.replace_all_uses_with(total)
    graph.erase_node(x)


def pattern_fusion(gm: torch.fx.GraphModule, example_inputs, config):
    """Fuse residual-add + RMSNorm into ``npu_add_rms_norm`` (see the module doc); a no-op off
    the NPU platform, where the fused op does not exist."""
    fused = fused_add_rms_norm()
    if fused is None:
        return gm
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    streams = streams_of(gm.graph)
    matches = [m for m in (_match(n, order) for n in gm.graph.nodes)
               if m is not None and _one_stream(m, streams)]
    for found in matches:  # matches share no node they erase (each has its own mul/add chain)
        _rewrite(gm, found, fused)
    done = len(matches)
    if done:
        gm.graph.lint()
        gm.recompile()
        log.debug("pattern_fusion: %d add + RMSNorm patterns fused into %s", done, fused)
    return gm
