"""User streams and events in graph mode: tagged ops, user APIs and the rewrite pass.

* :mod:`.api`: ``npu_stream_switch``, ``npu_wait_tensor``, tagged events, ``record_stream``.
* :mod:`.stream_ops`: the ``torchair_dist_streams`` op library those APIs (and the rewrite) emit.
* :mod:`.rewrite`: ``rewrite_streams``, the ``streams`` stage: run on the Dynamo graph before
  AOT in every mode (the ACL modes run the ops, the GE mode turns them into stream attributes).
* :mod:`.runtime`: the ops' kernels (ordering only on CPU; real streams with a device).
"""
from ..errors import StreamApiError
from .api import (TaggedEvent, npu_create_tagged_event, npu_record_tagged_stream,
                  npu_stream_switch, npu_stream_wait_stream, npu_tagged_event_record,
                  npu_tagged_event_wait, npu_wait_tensor)
from .stream_ops import NAMESPACE, ops

__all__ = ["NAMESPACE", "StreamApiError", "TaggedEvent", "npu_create_tagged_event",
           "npu_record_tagged_stream", "npu_stream_switch", "npu_stream_wait_stream",
           "npu_tagged_event_record", "npu_tagged_event_wait", "npu_wait_tensor", "ops"]
