"""``torchair_dist.ops``: TorchAir's ``torchair.ops`` names.

* tagged events and ``npu_record_tagged_stream``: :mod:`.streams` (TorchAir's signatures).
* ``record()`` / ``wait(tensors)``: ``record`` returns a marker tensor made at this point of
  the current stream; ``wait`` makes the current stream wait until each tensor is computed
  (``npu_wait_tensor`` on each). On CPU both only keep program order.
* ``npu_print(*args, summarize_size=3, tensor_detail=False)``: prints its arguments when the
  graph runs (every replay of a captured graph too), through the side-effect op
  ``torchair_dist_debug::print``; eagerly it prints at once. The GE mode has no converter
  for it (the graph is refused naming the op).
* ``npu_fused_infer_attention_score[_v2]``: torch_npu kernels; on NPU they call torch_npu,
  elsewhere they raise an error naming the op.
"""
from __future__ import annotations

from typing import List

import torch
from torch.fx import has_side_effect

from .errors import StreamApiError, UnsupportedOpError
from .streams import api as _streams

TaggedEvent = _streams.TaggedEvent

_LIB = "torchair_dist_debug"
_lib = torch.library.Library(_LIB, "FRAGMENT")
_TENSOR = "\0"  # marks where a tensor goes among the text parts


def _format(t: torch.Tensor, summarize_size: int, tensor_detail: bool) -> str:
    flat = t.detach().reshape(-1)
    if summarize_size >= 0 and flat.numel() > 2 * summarize_size:
        body = (", ".join(str(v) for v in flat[:summarize_size].tolist()) + ", ..., " +
                ", ".join(str(v) for v in flat[-summarize_size:].tolist()))
    else:
        body = ", ".join(str(v) for v in flat.tolist())
    text = f"[{body}]"
    if tensor_detail:
        text += f" (shape={list(t.shape)}, dtype={t.dtype}, device={t.device})"
    return text


def _print_kernel(parts: List[str], tensors: List[torch.Tensor], summarize_size: int,
                  tensor_detail: bool) -> None:
    it = iter(tensors)
    out = [_format(next(it), summarize_size, tensor_detail) if p == _TENSOR else p
           for p in parts]
    print(" ".join(out), flush=True)


def _nothing(*args, **kwargs) -> None:
    return None


if not hasattr(getattr(torch.ops, _LIB), "print"):
    _lib.define("print(str[] parts, Tensor[] tensors, int summarize_size, bool tensor_detail) "
                "-> ()")
    _lib.impl("print", _print_kernel, "CompositeExplicitAutograd")
    _lib.impl("print", _nothing, "Meta")
has_side_effect(getattr(torch.ops, _LIB).print.default)


def npu_print(*args, summarize_size: int = 3, tensor_detail: bool = False) -> None:
    """Print ``args`` (tensors and str/int/float/bool) when the graph runs."""
    if not args:
        raise StreamApiError("npu_print needs at least one argument")
    parts, tensors = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(_TENSOR)
            tensors.append(a)
        elif isinstance(a, (str, int, float, bool)):
            parts.append(str(a))
        else:
            raise StreamApiError(f"npu_print: arguments must be tensors or str/int/float/bool, "
                                 f"got {type(a).__name__}")
    getattr(torch.ops, _LIB).print(parts, tensors, summarize_size, tensor_detail)


def npu_create_tagged_event(tag: str) -> TaggedEvent:
    """The event named ``tag`` (once per process)."""
    return _streams.npu_create_tagged_event(tag)


def npu_tagged_event_record(event) -> None:
    """Record ``event`` on the current stream."""
    _streams.npu_tagged_event_record(event)


def npu_tagged_event_wait(event) -> None:
    """The current stream waits for ``event``'s last record."""
    _streams.npu_tagged_event_wait(event)


def npu_record_tagged_stream(input: torch.Tensor, tagged_stream: str) -> None:  # noqa: A002
    """``input`` is used on stream ``tagged_stream`` (its memory waits for that stream)."""
    _streams.npu_record_tagged_stream(input, tagged_stream)


def record() -> torch.Tensor:
    """A marker tensor made at this point of the current stream (pass it to :func:`wait`)."""
    return torch.zeros(())


def wait(tensors: list) -> None:
    """The current stream waits until every tensor of ``tensors`` is computed."""
    if not tensors:
        raise StreamApiError("torchair_dist.ops.wait() needs at least one tensor")
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise StreamApiError(f"torchair_dist.ops.wait(): every argument must be a tensor, "
                                 f"got {type(t).__name__}")
        _streams.npu_wait_tensor(t, t)


def _npu_only(name: str):
    def op(*args, **kwargs):
        from . import platform

        kernel = platform.current().vendor_function(name)
        if kernel is not None:
            return kernel(*args, **kwargs)
        raise UnsupportedOpError(f"torchair_dist.ops.{name} is a torch_npu kernel; it runs only "
                                 f"on Ascend (platform here: {platform.current().name}); use "
                                 f"torch.nn.functional.scaled_dot_product_attention elsewhere")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"torch_npu.{name} on Ascend; elsewhere an UnsupportedOpError."
    return op


npu_fused_infer_attention_score = _npu_only("npu_fused_infer_attention_score")
npu_fused_infer_attention_score_v2 = _npu_only("npu_fused_infer_attention_score_v2")

__all__ = ["npu_print", "npu_create_tagged_event", "npu_tagged_event_record",
           "npu_tagged_event_wait", "npu_record_tagged_stream", "record", "wait",
           "npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2"]
