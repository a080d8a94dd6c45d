"""``torchair_dist.scope``: TorchAir's scopes, same names and signatures.

* ``npu_stream_switch`` / ``npu_wait_tensor``: the multi-stream APIs of :mod:`.streams` (real
  streams with a device; program order on CPU).
* ``super_kernel``, ``limit_core_num``, ``op_never_timeout``, ``data_dump``: Ascend-only
  per-op attributes. Each is a ``torch.fx.traceback.annotate`` scope with TorchAir's
  attribute keys, so every op traced inside it carries them in ``node.meta["custom"]`` of the
  AOT graph (Dynamo and AOT autograd propagate annotations; scopes nest). The GE mode writes
  them as string attributes on the node's GE ops (where CANN reads them on Ascend); nothing
  else consumes them, so the ``scope_attrs`` pipeline stage
  (:func:`torchair_dist.passes.scope_attrs.report_scope_attrs`) warns once per scope, naming
  it, unless the graph goes to GE on Ascend. Eagerly they do nothing.
"""
from __future__ import annotations

from typing import Dict

import torch
from torch.fx.traceback import annotate

from .errors import StreamApiError
from .streams import api as _streams

# TorchAir's attribute keys (what its scopes write on GE ops) -> the scope that sets them
# (the scope_attrs stage, passes/scope_attrs.py, and the GE conversion read them).
SCOPE_KEYS: Dict[str, str] = {
    "_super_kernel_scope": "super_kernel", "_super_kernel_options": "super_kernel",
    "_op_aicore_num": "limit_core_num", "_op_vectorcore_num": "limit_core_num",
    "_op_exec_never_timeout": "op_never_timeout",
    "torchair_enable_data_dump": "data_dump",
}


def npu_stream_switch(stream_tag: str, stream_priority: int = 0,
                      enable_inner_parallel: bool = True):
    """Ops inside run on the stream tagged ``stream_tag`` (see
    :class:`torchair_dist.streams.api.npu_stream_switch`; ``enable_inner_parallel`` is kept
    and only meaningful to GE on Ascend)."""
    return _streams.npu_stream_switch(stream_tag, stream_priority, enable_inner_parallel)


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    """What follows on the current stream waits until ``dependency`` is computed."""
    return _streams.npu_wait_tensor(self, dependency)


def super_kernel(scope: str, options: str = ""):
    """Ascend super-kernel fusion of the ops inside (recorded; no effect off Ascend)."""
    if scope is None:
        scope = ""
    if not isinstance(scope, str) or not isinstance(options, str):
        raise StreamApiError(f"super_kernel(scope={scope!r}, options={options!r}): both must "
                             f"be str")
    return annotate({"_super_kernel_scope": scope, "_super_kernel_options": options})


def limit_core_num(op_aicore_num: int, op_vectorcore_num: int):
    """Ascend AI-core / vector-core limits for the ops inside (recorded; no effect off
    Ascend)."""
    for name, v in (("op_aicore_num", op_aicore_num), ("op_vectorcore_num", op_vectorcore_num)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise StreamApiError(f"limit_core_num: {name} must be an int >= 0, got {v!r}")
    return annotate({"_op_aicore_num": str(op_aicore_num),
                     "_op_vectorcore_num": str(op_vectorcore_num)})


def op_never_timeout(enable: bool = True):
    """Ascend: the ops inside never time out (recorded; no effect off Ascend). ``enable`` must
    be a bool (TypeError otherwise, as in TorchAir)."""
    if not isinstance(enable, bool):
        raise TypeError(f"op_never_timeout() argument 'enable' must be bool, got "
                        f"{type(enable).__name__}")
    return annotate({"_op_exec_never_timeout": str(enable)})


def data_dump():
    """Ascend GE data dump of the ops inside (recorded; the whole-graph dump here is
    ``debug.data_dump``)."""
    return annotate({"torchair_enable_data_dump": "True"})


__all__ = ["npu_stream_switch", "npu_wait_tensor", "super_kernel", "limit_core_num",
           "op_never_timeout", "data_dump"]
