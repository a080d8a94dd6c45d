"""``torch.compile(..., options={...})`` keys mapped onto a CompilerConfig.

torch forwards ``options=`` to custom backends; the backend entry applies them to a private
copy of the backend's config (never to the shared object, unlike TorchAir whose handler also
writes a process-wide class attribute). Unknown keys raise ``ConfigError`` listing the keys.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError
from .compiler_config import CompilerConfig


def _invert(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if value in (0, 1) and isinstance(value, int):
        return 1 - value
    raise ConfigError(f"expected a bool, got {value!r}")


_ACLX = "experimental_config.aclgraph."

# option key -> (config path, transform or None)
COMPILE_OPTIONS: Dict[str, Tuple[str, Optional[Callable[[Any], Any]]]] = {
    "force_eager": ("debug.run_eagerly", None),
    "deadlock_check": ("debug.deadlock_check", None),
    "use_graph_pool": ("aclgraph_config.use_custom_pool", None),
    "reuse_graph_pool_in_same_fx": ("debug.aclgraph.disable_mempool_reuse_in_same_fx", _invert),
    "capture_limit": ("debug.aclgraph.static_capture_size_limit", None),
    "clone_input": ("debug.aclgraph.clone_input", None),
    "clone_output": ("debug.aclgraph.enable_output_clone", None),
    "static_kernel_compile": (_ACLX + "_aclnn_static_shape_kernel", None),
    "_vllm_aclnn_static_kernel_sym_index": (_ACLX + "_aclnn_static_shape_kernel_sym_index", None),
    "_vllm_aclnn_static_kernel_sym_range": (
        _ACLX + "_aclnn_static_shape_kernel_sym_value_range", None),
    "super_kernel_optimize": (_ACLX + "_super_kernel_optimize", None),
    "super_kernel_optimize_options": (_ACLX + "_super_kernel_optimize_options", None),
    "super_kernel_debug_options": (_ACLX + "_super_kernel_debug_options", None),
    "inplace_pass": ("debug.aclgraph.disable_reinplace_inplaceable_ops_pass", _invert),
    "input_inplace_pass": ("debug.aclgraph.disable_reinplace_input_mutated_ops_pass", _invert),
    "remove_noop_ops": ("experimental_config.remove_noop_ops", None),
    "pattern_fusion_pass": ("experimental_config.pattern_fusion_pass", None),
    "frozen_parameter": ("experimental_config.frozen_parameter", None),
    "remove_cat_ops": ("debug.aclgraph.remove_cat_ops", None),
    "post_grad_custom_pre_pass": ("post_grad_custom_pre_pass", None),
    "post_grad_custom_post_pass": ("post_grad_custom_post_pass", None),
    "dump_tensor_data": ("dump_config.enable_dump", None),
    "data_dump_stage": ("dump_config.data_dump_stage", None),
    "data_dump_dir": ("dump_config.dump_path", None),
    "capture_error_mode": ("npugraphex_config.capture_error_mode", None),
    "force_recapture": ("npugraphex_config.force_recapture", None),
    "consistency_check": ("distributed_config.consistency_check", None),
    "overlap_collectives": ("distributed_config.overlap_collectives", None),
}


def apply_compile_options(config: CompilerConfig, options: Optional[Mapping[str, Any]]
                          ) -> CompilerConfig:
    """Return a copy of ``config`` with ``options`` applied (``config`` itself is untouched)."""
    if not options:
        return config
    if not isinstance(options, Mapping):
        raise ConfigError(f"torch.compile options must be a dict, got {type(options).__name__}")
    unknown = [k for k in options if k not in COMPILE_OPTIONS]
    if unknown:
        raise ConfigError(f"Invalid option {unknown[0]!r}, allowed options: "
                          f"{sorted(COMPILE_OPTIONS)}")
    result = config.copy()
    for key, value in options.items():
        path, transform = COMPILE_OPTIONS[key]
        if transform is not None:
            try:
                value = transform(value)
            except ConfigError:
                raise ConfigError(f"Invalid value {value!r} for torch.compile option {key!r}: "
                                  f"expected a bool") from None
        result.option(path).set(value)
    return result
