"""TorchAir's top-level names that are not the compiler itself, and ``compile_fx``.

* ``logger``: the ``torchair_dist`` logger.
* ``patch_for_hcom()``: a no-op with a warning (TorchAir's is one too on torch >= 2.3.1: the
  c10d patches it used to install are what :mod:`.collectives.remap` does at import).
* ``use_internal_format_weight(model)`` / ``npu_format_cast_via_cpu(...)``: NPU-private
  weight formats; they exist only on Ascend, so here they change nothing and warn.
* ``compile_fx(gm, example_inputs=None, options=None)``: npugraph_ex's compiler for an AOT
  graph (a custom backend's ``fw_compiler``): our npugraph_ex compiler with ``options=``.
* ``register_replacement``: :mod:`.patterns`.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

import torch

from ..base.log import LOGGER_NAME
from ..pipeline.route import get_compiler
from ..configs import CompilerConfig, apply_compile_options
from ..passes.user_patterns import register_replacement

logger = logging.getLogger(LOGGER_NAME)


def patch_for_hcom() -> None:
    """Nothing to patch: collectives are traced through their functional forms already."""
    logger.warning("patch_for_hcom() does nothing: torchair_dist maps torch.distributed "
                   "collectives to their traceable forms at import")


def use_internal_format_weight(model: torch.nn.Module) -> None:
    """Ascend: convert weights to NPU-internal formats. Here: no effect (a warning)."""
    logger.warning("use_internal_format_weight: NPU-internal weight formats exist only on "
                   "Ascend; %s is unchanged", type(model).__name__)


def npu_format_cast_via_cpu(self: torch.Tensor, acl_format: int,
                            customize_dtype: Optional[int] = None,
                            input_dtype: Optional[int] = None) -> torch.Tensor:
    """Ascend: a copy of ``self`` in ACL format ``acl_format``. Here: ``self`` unchanged
    (there is one format; a warning says so)."""
    logger.warning("npu_format_cast_via_cpu(acl_format=%s): NPU formats exist only on Ascend; "
                   "the tensor is returned unchanged", acl_format)
    return self


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Optional[Sequence[Any]] = None,
               options: Optional[Mapping[str, Any]] = None):
    """Compile an AOT graph (``gm``, e.g. a ``fw_compiler``'s argument) in npugraph_ex mode,
    with ``options`` (the ``torch.compile(..., options=)`` keys). Returns what an AOT
    compiler returns: a callable taking the graph's inputs as a list (``_boxed_call``)."""
    config = CompilerConfig()
    config.mode = "npugraph_ex"
    config = apply_compile_options(config, options)
    if example_inputs is None:
        example_inputs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    return get_compiler(config)(gm, list(example_inputs))


__all__ = ["logger", "patch_for_hcom", "use_internal_format_weight", "npu_format_cast_via_cpu",
           "compile_fx", "register_replacement"]
