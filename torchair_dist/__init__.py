"""torchair_dist: graph mode for multi-card PyTorch inference.

Public API: ``get_npu_backend``, ``get_compiler``, ``CompilerConfig``, ``cache_compile``, and
the stream/event helpers (``npu_stream_switch``, ``npu_wait_tensor``, tagged events), and
``capture_report`` (ACL-graph captures/replays/recaptures per graph key).
"""
from .backend import get_npu_backend
from .backends.aclgraph.report import capture_report, reset_capture_report
from .cache import cache_compile
from .collectives import remap as _remap
from .compiler import get_compiler
from .configs import CompilerConfig
from .export import dynamo_export
from .streams import (npu_create_tagged_event, npu_record_tagged_stream, npu_stream_switch,
                      npu_stream_wait_stream, npu_tagged_event_record, npu_tagged_event_wait,
                      npu_wait_tensor)

from ._version import __version__  # noqa: E402

_remap.install()

__all__ = ["get_npu_backend", "get_compiler", "CompilerConfig", "cache_compile", "dynamo_export",
           "npu_stream_switch", "npu_wait_tensor", "npu_create_tagged_event",
           "npu_tagged_event_record", "npu_tagged_event_wait", "npu_stream_wait_stream",
           "npu_record_tagged_stream", "capture_report", "reset_capture_report", "__version__"]
