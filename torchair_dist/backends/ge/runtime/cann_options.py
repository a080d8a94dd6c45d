"""The GE session (global) and graph (local) options a ``CompilerConfig`` hands to CANN.

The keys and value forms are the ones TorchAir passes (``shared/reference/torchair_behaviour.md``
§1.2): ``ge_config`` and ``fusion_config`` become global options, ``experimental_config`` adds
local graph options in GE mode, ``dump_config`` adds the dump options when dumping is on, and
``aoe_config`` the AOE tuning options. Only the CANN runtime reads them (the reference executor
has no use for them), which is why the pipeline declares these reads for the NPU alone.
"""
from __future__ import annotations

import os
from typing import Dict, Tuple

_TOPO_SORTING = {"BFS": "0", "DFS": "1", "RDFS": "2", "StableRDFS": "3"}


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _ge_config(cfg, glob: Dict[str, str], local: Dict[str, str]) -> None:
    ge = cfg.ge_config
    glob["ge.enableSingleStream"] = _bool(ge.enable_single_stream.raw)
    glob["ge.oo.level"] = ge.oo_level.raw
    if ge.oo_constant_folding.raw is not None:
        glob["ge.oo.constantFolding"] = _bool(ge.oo_constant_folding.raw)
    if ge.oo_dead_code_elimination.raw is not None:
        glob["ge.oo.deadCodeElimination"] = _bool(ge.oo_dead_code_elimination.raw)
    glob["ge.exportCompileStat"] = ge.export_compile_stat.raw
    if ge.aicore_num.raw is not None:
        glob["ge.aicoreNum"] = str(ge.aicore_num.raw)
    if ge.optimization_switch.raw is not None:
        glob["ge.optimizationSwitch"] = str(ge.optimization_switch.raw)
    if ge.oo_level.raw == "O1":
        local["ge.topoSortingMode"] = _TOPO_SORTING["StableRDFS"]  # merged last: it wins


def _experimental(cfg, glob: Dict[str, str], local: Dict[str, str]) -> None:
    exp = cfg.experimental_config
    glob["ge.exec.enableEngineParallel"] = "1" if exp.cc_parallel_enable.raw else "0"
    local["ge.tiling_schedule_optimize"] = "1" if exp.tiling_schedule_optimize.raw else "0"
    local["ge.topoSortingMode"] = _TOPO_SORTING[exp.topology_sorting_strategy.raw]
    local["ge.jit_compile"] = "2"
    if exp.static_model_ops_lower_limit.raw is not None:
        local["ge.exec.static_model_ops_lower_limit"] = str(exp.static_model_ops_lower_limit.raw)
    local["frozenInput"] = "1" if exp.frozen_parameter.raw else "0"


def _dump(cfg, glob: Dict[str, str], rank: int, world: int) -> None:
    dump = cfg.dump_config
    if dump.dump_config_path.raw is not None:
        glob["ge_dump_with_acl_config"] = dump.dump_config_path.raw
    if not dump.enable_dump.raw:
        return
    glob["ge.exec.enableDump"] = "1"
    glob["ge.exec.dumpPath"] = os.path.join(dump.dump_path.raw,
                                            f"worldsize{world}_global_rank{rank}")
    glob["ge.exec.dumpMode"] = dump.dump_mode.raw
    glob["ge.exec.dumpData"] = dump.dump_data.raw
    if dump.dump_step.raw is not None:
        glob["ge.exec.dumpStep"] = dump.dump_step.raw
    if dump.dump_layer.raw is not None:
        glob["ge.exec.dumpLayer"] = dump.dump_layer.raw
    glob["ge.quant_dumpable"] = "1" if dump.quant_dumpable.raw else "0"


def _aoe(cfg, glob: Dict[str, str]) -> None:
    aoe = cfg.aoe_config
    if aoe.aoe_mode.raw is None:
        return
    glob["ge.jobType"] = aoe.aoe_mode.raw
    glob["ge.tuningPath"] = aoe.work_path.raw
    if aoe.aoe_config_file.raw is not None:
        glob["ge.aoe_config_file"] = aoe.aoe_config_file.raw


def cann_options(cfg, rank: int = 0, world: int = 1) -> Tuple[Dict[str, str], Dict[str, str]]:
    """``(global session options, local graph options)`` for the CANN runtime."""
    glob: Dict[str, str] = {"ge.exec.staticMemoryPolicy": "2",
                            "ge.opSelectImplmode": "high_precision"}
    local: Dict[str, str] = {}
    _experimental(cfg, glob, local)
    _ge_config(cfg, glob, local)  # after experimental_config, as TorchAir merges them
    if cfg.fusion_config.fusion_switch_file.raw is not None:
        glob["ge.fusionSwitchFile"] = cfg.fusion_config.fusion_switch_file.raw
    _dump(cfg, glob, rank, world)
    _aoe(cfg, glob)
    return glob, local


# The options cann_options reads (the pipeline's "cann_options" stage declares them).
CANN_OPTION_READS = (
    "ge_config.enable_single_stream", "ge_config.oo_level", "ge_config.oo_constant_folding",
    "ge_config.oo_dead_code_elimination", "ge_config.export_compile_stat",
    "ge_config.aicore_num", "ge_config.optimization_switch",
    "experimental_config.cc_parallel_enable", "experimental_config.tiling_schedule_optimize",
    "experimental_config.topology_sorting_strategy",
    "experimental_config.static_model_ops_lower_limit", "experimental_config.frozen_parameter",
    "fusion_config.fusion_switch_file", "dump_config.dump_config_path",
    "dump_config.enable_dump", "aoe_config.aoe_mode",
)
CANN_DUMP_READS = ("dump_config.dump_path", "dump_config.dump_mode", "dump_config.dump_data",
                   "dump_config.dump_step", "dump_config.dump_layer", "dump_config.quant_dumpable")
CANN_AOE_READS = ("aoe_config.work_path", "aoe_config.aoe_config_file")
