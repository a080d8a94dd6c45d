"""Converters: scaled dot-product attention, decomposed into GE matmul/softmax ops.

``softmax(q @ k^T * scale + mask) @ v`` with ``BatchMatMulV2`` (``adj_x2`` for the transpose),
``Mul``, ``Add``/``SelectV2`` (bool masks keep where True), a ``Triu`` causal mask and
``SoftmaxV2``. The log-sum-exp output is only built when the graph uses it. Dropout is not
supported (inference graphs have ``dropout_p == 0``).

Every SDPA variant a trace can carry shares this lowering: the CPU flash kernel, the GPU/NPU
fused kernels (``_scaled_dot_product_flash_attention``, ``_efficient_attention``,
``_cudnn_attention``, ``_fused_attention_overrideable``) and the plain
``scaled_dot_product_attention`` (kept by graphs traced without decomposition). Additive float
masks (``attn_bias``) and boolean keep-masks are both accepted.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ....errors import UnsupportedOpError
from .aten_shape import _dim_of
from .registry import register

aten = torch.ops.aten


def _uses_output(node: torch.fx.Node, index: int) -> bool:
    """True when output ``index`` of ``node`` is read (a getitem of it that has users)."""
    return any(u.target.__name__ == "getitem" and u.args[1] == index and len(u.users) > 0
               for u in node.users if callable(u.target) and hasattr(u.target, "__name__"))


_EMITS = ["BatchMatMulV2", "Mul", "Add", "SelectV2", "SoftmaxV2", "Fill", "Triu", "ReduceMax", "Sub",
          "Exp", "ReduceSum", "Log", "Squeeze", "Unsqueeze", "BroadcastTo", "Reshape", "Shape",
          "GatherV2", "Pack", "Const", "Cast"]


@register([aten._scaled_dot_product_flash_attention_for_cpu.default], _EMITS)
def _sdpa_cpu(cx, q, k, v, dropout_p: float = 0.0, is_causal: bool = False, *,
              attn_mask=None, scale: Optional[float] = None):
    return _attention(cx, q, k, v, dropout_p, is_causal, attn_mask, scale, n_outputs=2)


# The fused kernels GPU/NPU traces carry (no CPU kernel; same math). Outputs past the
# log-sum-exp (sequence offsets, RNG state, debug mask) are training/debug state: a graph that
# reads them is refused.
@register([aten._scaled_dot_product_flash_attention.default], _EMITS)
def _sdpa_flash(cx, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                scale=None):
    return _attention(cx, q, k, v, dropout_p, is_causal, None, scale, n_outputs=9)


@register([aten._scaled_dot_product_efficient_attention.default], _EMITS)
def _sdpa_efficient(cx, q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                    is_causal=False, *, scale=None):
    return _attention(cx, q, k, v, dropout_p, is_causal, attn_bias, scale, n_outputs=4)


@register([aten._scaled_dot_product_cudnn_attention.default], _EMITS)
def _sdpa_cudnn(cx, q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                is_causal=False, return_debug_mask=False, *, scale=None):
    return _attention(cx, q, k, v, dropout_p, is_causal, attn_bias, scale, n_outputs=9)


@register([aten._scaled_dot_product_fused_attention_overrideable.default], _EMITS)
def _sdpa_overrideable(cx, q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False,
                       return_debug_mask=False, *, scale=None):
    return _attention(cx, q, k, v, dropout_p, is_causal, attn_bias, scale, n_outputs=9)


@register([aten.scaled_dot_product_attention.default], _EMITS)
def _sdpa(cx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
          enable_gqa=False):
    return _attention(cx, q, k, v, dropout_p, is_causal, attn_mask, scale, n_outputs=1)


def _attention(cx, q, k, v, dropout_p, is_causal, attn_mask, scale, n_outputs: int):
    """``n_outputs`` values: the output, then (if used) the log-sum-exp over keys, then None
    for every output the graph must not read."""
    for i in range(2, n_outputs):
        if _uses_output(cx.node, i):
            raise UnsupportedOpError(f"%{cx.node.name}: output {i} of {cx.node.target} "
                                     f"(training/debug state) has no GE lowering")
    if dropout_p:
        raise UnsupportedOpError(f"%{cx.node.name}: attention dropout has no GE lowering")
    if q.shape[-3] != k.shape[-3]:
        k, v = _repeat_kv(cx, k, q.shape[-3]), _repeat_kv(cx, v, q.shape[-3])
    dtype = q.dtype
    lq, lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s_shape = tuple(q.shape[:-1]) + (lk,)
    scores = cx.emit1("BatchMatMulV2", [("x1", q), ("x2", k)], {"adj_x1": False, "adj_x2": True},
                      (dtype, s_shape))
    scores = cx.emit1("Mul", [("x1", scores), ("x2", cx.const(scale, dtype))], None,
                      (dtype, s_shape))
    if is_causal:  # top-left aligned, like torch: query i sees keys 0..i
        if lq >= 0 and lk >= 0:
            causal = cx.const(torch.full((lq, lk), float("-inf"), dtype=dtype).triu(1))
        else:
            dims = cx.int_list([_dim_of(cx, q, len(q.shape) - 2), _dim_of(cx, k, len(k.shape) - 2)])
            full = cx.emit1("Fill", [("dims", dims), ("value", cx.const(float("-inf"), dtype))],
                            None, (dtype, (lq, lk)))
            causal = cx.emit1("Triu", [("x", full)], {"diagonal": 1}, (dtype, (lq, lk)))
        scores = cx.emit1("Add", [("x1", scores), ("x2", causal)], None, (dtype, s_shape))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = cx.emit1("SelectV2", [("condition", attn_mask), ("then", scores),
                                           ("else", cx.const(float("-inf"), dtype))], None,
                              (dtype, s_shape), port="result")
        else:
            scores = cx.emit1("Add", [("x1", scores), ("x2", cx.cast(attn_mask, dtype))], None,
                              (dtype, s_shape))
    probs = cx.emit1("SoftmaxV2", [("x", scores)], {"axes": [-1]}, (dtype, s_shape))
    out_desc = cx.out(0) if n_outputs > 1 else cx.out()
    out = cx.emit1("BatchMatMulV2", [("x1", probs), ("x2", v)], {"adj_x1": False, "adj_x2": False},
                   out_desc)
    if n_outputs == 1:
        return out
    rest = [None] * (n_outputs - 2)
    if not _uses_output(cx.node, 1):
        return [out, None] + rest
    return [out, _logsumexp(cx, scores, s_shape)] + rest


def _repeat_kv(cx, x, q_heads: int):
    """Grouped-query attention: kv head i serves query heads i*rep .. i*rep+rep-1."""
    if len(x.shape) != 4 or min(x.shape[1], q_heads) < 0 or q_heads % x.shape[1]:
        raise UnsupportedOpError(f"%{cx.node.name}: grouped-query attention needs static head "
                                 f"counts with query heads a multiple of kv heads")
    b, h, n, d = x.shape
    rep = q_heads // h
    batch, seq = _dim_of(cx, x, 0), _dim_of(cx, x, 2)
    grown = cx.emit1("Unsqueeze", [("x", x)], {"axes": [2]}, (x.dtype, (b, h, 1, n, d)))
    tiled = cx.emit1("BroadcastTo", [("x", grown), ("shape", cx.int_list([batch, h, rep, seq, d]))],
                     None, (x.dtype, (b, h, rep, n, d)))
    return cx.reshape(tiled, [-1, q_heads, seq, d], (b, q_heads, n, d))


def _logsumexp(cx, scores, s_shape):
    kept = tuple(s_shape[:-1]) + (1,)
    axes = cx.const([len(s_shape) - 1], torch.int64)
    mx = cx.emit1("ReduceMax", [("x", scores), ("axes", axes)], {"keep_dims": True},
                  (scores.dtype, kept))
    shifted = cx.emit1("Sub", [("x1", scores), ("x2", mx)], None, (scores.dtype, s_shape))
    ex = cx.emit1("Exp", [("x", shifted)], None, (scores.dtype, s_shape))
    total = cx.emit1("ReduceSum", [("x", ex), ("axes", axes)], {"keep_dims": True},
                     (scores.dtype, kept))
    lse = cx.emit1("Add", [("x1", cx.emit1("Log", [("x", total)], None, (scores.dtype, kept))),
                           ("x2", mx)], None, (scores.dtype, kept))
    dtype, shape = cx.out(1)
    if tuple(shape) != tuple(kept[:-1]):
        raise UnsupportedOpError(f"%{cx.node.name}: log-sum-exp of shape {list(shape)} (padded) "
                                 f"has no GE lowering; scores give {list(kept[:-1])}")
    return cx.cast(cx.emit1("Squeeze", [("x", lse)], {"axis": [len(kept) - 1]},
                            (scores.dtype, shape)), dtype)
