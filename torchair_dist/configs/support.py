"""Which options take effect in which mode, and the warnings for those that do not.

The table says, per mode family, which option values are *ignored* (or may fail) there. A
``None`` allowed-set means "any value other than the default". ``check_config_support`` emits
ONE ``UserWarning`` listing every such option that is set, and a ``DeprecationWarning`` for
``reduce-overhead``. Unlike TorchAir, ``npugraph_ex`` is checked too: silently ignoring an
option is the failure this check exists to prevent.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

from .compiler_config import ACL_MODES, CompilerConfig

_ANY = None  # any non-default value

# (option path, values that do not take effect); per mode family.
UNSUPPORTED_IN_GE: Sequence[Tuple[str, Optional[tuple]]] = (
    ("debug.aclgraph.disable_reinplace_inplaceable_ops_pass", (True,)),
    ("debug.aclgraph.disable_reinplace_input_mutated_ops_pass", (True,)),
    ("debug.aclgraph.clone_input", (False,)),
    ("debug.aclgraph.enable_output_clone", (True,)),
    ("debug.aclgraph.static_capture_size_limit", _ANY),
    ("experimental_config.aclgraph._aclnn_static_shape_kernel", (True,)),
    ("experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir", _ANY),
    ("aclgraph_config.use_custom_pool", _ANY),
    ("npugraphex_config.capture_error_mode", _ANY),
    ("npugraphex_config.force_recapture", (True,)),
    ("distributed_config.overlap_collectives", (False,)),
    ("experimental_config.inductor_kernels", (True,)),
)

UNSUPPORTED_IN_ACL: Sequence[Tuple[str, Optional[tuple]]] = (
    ("inference_config.dynamic_gears_merge_policy", ("product",)),
    ("debug.fx_summary.type", ("csv",)),
    ("dump_config.enable_dump", (True,)),
    ("ge_config.export_compile_stat", ("0", "1")),
    ("export.experimental.auto_atc_config_generated", (True,)),
    ("export.experimental.enable_record_nn_module_stack", (True,)),
    ("export.export_mode", (True,)),
    ("ge_config.enable_single_stream", (True,)),
    ("ge_config.oo_level", ("O1",)),
    ("ge_config.oo_constant_folding", _ANY),
    ("ge_config.oo_dead_code_elimination", _ANY),
    ("experimental_config.topology_sorting_strategy", ("BFS", "RDFS", "StableRDFS")),
    ("experimental_config.cc_parallel_enable", (True,)),
    ("experimental_config.enable_ref_data", (True,)),
    ("experimental_config.tiling_schedule_optimize", (True,)),
    ("experimental_config.static_model_ops_lower_limit", _ANY),
    ("fusion_config.fusion_switch_file", _ANY),
    ("ge_config.aicore_num", _ANY),
    ("ge_config.optimization_switch", _ANY),
    ("aoe_config.aoe_mode", _ANY),
)

DEPRECATION_MESSAGE = ('The "reduce-overhead" mode configuration will be deprecated. '
                       'Please use the "npugraph_ex" backend (mode="npugraph_ex").')


def ineffective_options(config: CompilerConfig) -> Dict[str, object]:
    """{path: value} of the set options that do not take effect in ``config.mode``."""
    table = UNSUPPORTED_IN_ACL if config.mode.raw in ACL_MODES else UNSUPPORTED_IN_GE
    found = {}
    for path, bad_values in table:
        option = config.option(path)
        if bad_values is _ANY:
            hit = option.is_set()
        else:
            hit = any(option.raw == v and type(option.raw) is type(v) for v in bad_values)
        if hit:
            found[path] = option.raw
    return found


def check_config_support(config: CompilerConfig) -> List[str]:
    """Warn about options that do not take effect in the chosen mode; returns their paths."""
    mode = config.mode.raw
    found = ineffective_options(config)
    if found:
        listed = ", ".join(f"config.{k}:{v!r}" for k, v in found.items())
        warnings.warn(f"The following options may not take effect or report error in {mode} "
                      f"mode: {listed}", UserWarning, stacklevel=3)
    if mode == "reduce-overhead":
        warnings.warn(DEPRECATION_MESSAGE, DeprecationWarning, stacklevel=3)
    return list(found)
