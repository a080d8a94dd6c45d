"""User streams and events in graph mode: tagged ops, user APIs, their kernels and the order
model. The graph passes over them live in :mod:`torchair_dist.passes` (``stream_rewrite``,
``stream_ordering``, ``happens_before``, ``scope_lowering``).

* :mod:`.api`: ``npu_stream_switch``, ``npu_wait_tensor``, tagged events, ``record_stream``.
* :mod:`.stream_ops`: the ``torchair_dist_streams`` op library those APIs (and the passes) emit.
* :mod:`.scope_ops`: TorchAir's ``air`` / ``npugraph_ex`` ``scope_enter`` / ``scope_exit`` ops.
* :mod:`.runtime`: the ops' kernels (ordering only on CPU; real streams with a device).
* :mod:`.order_model`: what a device orders over a graph's streams (happens-before), read by
  the stream passes, ``debug.deadlock_check`` and the CPU model of concurrency.
"""
from ..errors import StreamApiError
from .api import (TaggedEvent, npu_create_tagged_event, npu_record_tagged_stream,
                  npu_stream_switch, npu_stream_wait_stream, npu_tagged_event_record,
                  npu_tagged_event_wait, npu_wait_tensor)
from .stream_ops import NAMESPACE, ops

__all__ = ["NAMESPACE", "StreamApiError", "TaggedEvent", "npu_create_tagged_event",
           "npu_record_tagged_stream", "npu_stream_switch", "npu_stream_wait_stream",
           "npu_tagged_event_record", "npu_tagged_event_wait", "npu_wait_tensor", "ops"]
