"""torchair_dist: graph mode for multi-card PyTorch inference.

Public API: ``get_npu_backend``, ``get_compiler``, ``CompilerConfig``, ``cache_compile``, and
the stream/event helpers (``npu_stream_switch``, ``npu_wait_tensor``, tagged events), and
``capture_report`` (ACL-graph captures/replays/recaptures, capture time and bytes per graph
key) and ``capture_summary`` (per graph: pool memory, padded and eager calls). TorchAir's other
names: the submodules ``inference``, ``scope``, ``ops`` and :mod:`.compat` (``logger``,
``register_replacement``, ``patch_for_hcom``, ``use_internal_format_weight``, ``compile_fx``),
and the converter API for users' ops: ``register_fx_node_ge_converter`` and the ``ge``
namespace; ``import torchair_dist as torchair`` runs TorchAir scripts, and
``install_torchair_alias()`` runs code that imports ``torchair`` unchanged (README: "Coming from
TorchAir").
"""
from .base.torch_support import check_torch_version as _check_torch_version

_check_torch_version()  # before anything touches torch internals: a clear error, not a deep one

from .pipeline.entry import get_npu_backend  # noqa: E402
from .backends.aclgraph.report import capture_report, capture_summary, reset_capture_report  # noqa: E402
from .cache import cache_compile  # noqa: E402
from .collectives import remap as _remap  # noqa: E402
from .pipeline.route import get_compiler  # noqa: E402
from .configs import CompilerConfig  # noqa: E402
from .pipeline.dynamo_export import dynamo_export  # noqa: E402
from . import ge  # noqa: E402
from .ge import register_fx_node_ge_converter  # noqa: E402
from .streams import (npu_create_tagged_event, npu_record_tagged_stream,  # noqa: E402
                      npu_stream_switch,
                      npu_stream_wait_stream, npu_tagged_event_record, npu_tagged_event_wait,
                      npu_wait_tensor)

from . import inference, ops, scope  # noqa: E402 - TorchAir's submodules
from .compat.names import (compile_fx, logger, npu_format_cast_via_cpu, patch_for_hcom,  # noqa: E402
                     register_replacement, use_internal_format_weight)

from .compat.alias import install_torchair_alias  # noqa: E402
from ._version import __version__  # noqa: E402

_remap.install()
from .pipeline.entry import register_named_backends as _register_named_backends  # noqa: E402

_register_named_backends()  # backend="npugraph_ex" also when run from a source tree

__all__ = ["get_npu_backend", "get_compiler", "CompilerConfig", "cache_compile", "dynamo_export",
           "npu_stream_switch", "npu_wait_tensor", "npu_create_tagged_event",
           "npu_tagged_event_record", "npu_tagged_event_wait", "npu_stream_wait_stream",
           "npu_record_tagged_stream", "capture_report", "capture_summary",
           "reset_capture_report", "__version__",
           "inference", "ops", "scope", "compile_fx", "logger", "npu_format_cast_via_cpu",
           "patch_for_hcom", "register_replacement", "use_internal_format_weight",
           "register_fx_node_ge_converter", "ge", "install_torchair_alias"]
