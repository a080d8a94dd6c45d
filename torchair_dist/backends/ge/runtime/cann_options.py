"""The GE session (global) and graph (local) options a ``CompilerConfig`` hands to CANN.

The keys and value forms are the ones TorchAir passes to CANN (``docs/reference/config.md``
lists each option and where it takes effect): ``ge_config`` and ``fusion_config`` become global
options, ``experimental_config`` adds local graph options in GE mode, ``dump_config`` adds the
dump options when dumping is on, and ``aoe_config`` the AOE tuning options. Only the CANN
runtime reads them (the reference executor has no use for them), which is why the pipeline
declares these reads for the NPU alone.
"""
from __future__ import annotations

import os
from typing import Dict, Tuple

_TOPO_SORTING = {"BFS": "0", "DFS": "1", "RDFS": "2", "StableRDFS": "3"}


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _ge_config(cfg, glob: Dict[str, str], local: Dict[str, str]) -> None:
    glob["ge.enableSingleStream"] = _bool(cfg.get("ge_config.enable_single_stream"))
    glob["ge.oo.level"] = cfg.get("ge_config.oo_level")
    if cfg.get("ge_config.oo_constant_folding") is not None:
        glob["ge.oo.constantFolding"] = _bool(cfg.get("ge_config.oo_constant_folding"))
    if cfg.get("ge_config.oo_dead_code_elimination") is not None:
        glob["ge.oo.deadCodeElimination"] = _bool(cfg.get("ge_config.oo_dead_code_elimination"))
    glob["ge.exportCompileStat"] = cfg.get("ge_config.export_compile_stat")
    if cfg.get("ge_config.aicore_num") is not None:
        glob["ge.aicoreNum"] = str(cfg.get("ge_config.aicore_num"))
    if cfg.get("ge_config.optimization_switch") is not None:
        glob["ge.optimizationSwitch"] = str(cfg.get("ge_config.optimization_switch"))
    if cfg.get("ge_config.oo_level") == "O1":
        local["ge.topoSortingMode"] = _TOPO_SORTING["StableRDFS"]  # merged last: it wins


def _experimental(cfg, glob: Dict[str, str], local: Dict[str, str]) -> None:
    exp = "experimental_config."
    glob["ge.exec.enableEngineParallel"] = "1" if cfg.get(exp + "cc_parallel_enable") else "0"
    local["ge.tiling_schedule_optimize"] = \
        "1" if cfg.get(exp + "tiling_schedule_optimize") else "0"
    local["ge.topoSortingMode"] = _TOPO_SORTING[cfg.get(exp + "topology_sorting_strategy")]
    local["ge.jit_compile"] = "2"
    if cfg.get("experimental_config.static_model_ops_lower_limit") is not None:
        local["ge.exec.static_model_ops_lower_limit"] = \
            str(cfg.get("experimental_config.static_model_ops_lower_limit"))
    local["frozenInput"] = "1" if cfg.get("experimental_config.frozen_parameter") else "0"


def _dump_config_path(cfg, glob: Dict[str, str]) -> None:
    if cfg.get("dump_config.dump_config_path") is not None:
        glob["ge_dump_with_acl_config"] = cfg.get("dump_config.dump_config_path")


def dump_options(cfg, rank: int = 0, world: int = 1) -> Dict[str, str]:
    """GE's own data dump (the ``cann_dump`` stage: it runs when ``dump_config.enable_dump``)."""
    glob = {"ge.exec.enableDump": "1",
            "ge.exec.dumpPath": os.path.join(cfg.get("dump_config.dump_path"),
                                             f"worldsize{world}_global_rank{rank}"),
            "ge.exec.dumpMode": cfg.get("dump_config.dump_mode"),
            "ge.exec.dumpData": cfg.get("dump_config.dump_data")}
    if cfg.get("dump_config.dump_step") is not None:
        glob["ge.exec.dumpStep"] = cfg.get("dump_config.dump_step")
    if cfg.get("dump_config.dump_layer") is not None:
        glob["ge.exec.dumpLayer"] = cfg.get("dump_config.dump_layer")
    glob["ge.quant_dumpable"] = "1" if cfg.get("dump_config.quant_dumpable") else "0"
    return glob


def aoe_options(cfg) -> Dict[str, str]:
    """AOE tuning (the ``cann_aoe`` stage: it runs when ``aoe_config.aoe_mode`` is set)."""
    glob = {"ge.jobType": cfg.get("aoe_config.aoe_mode"),
            "ge.tuningPath": cfg.get("aoe_config.work_path")}
    if cfg.get("aoe_config.aoe_config_file") is not None:
        glob["ge.aoe_config_file"] = cfg.get("aoe_config.aoe_config_file")
    return glob


def session_and_graph_options(cfg) -> Tuple[Dict[str, str], Dict[str, str]]:
    """``(global session options, local graph options)`` without the dump and AOE parts (the
    ``cann_options`` stage)."""
    glob: Dict[str, str] = {"ge.exec.staticMemoryPolicy": "2",
                            "ge.opSelectImplmode": "high_precision"}
    local: Dict[str, str] = {}
    _experimental(cfg, glob, local)
    _ge_config(cfg, glob, local)  # after experimental_config, as TorchAir merges them
    if cfg.get("fusion_config.fusion_switch_file") is not None:
        glob["ge.fusionSwitchFile"] = cfg.get("fusion_config.fusion_switch_file")
    _dump_config_path(cfg, glob)
    return glob, local


def cann_options(cfg, rank: int = 0, world: int = 1) -> Tuple[Dict[str, str], Dict[str, str]]:
    """What the three stages ``cann_options``, ``cann_dump`` and ``cann_aoe`` give together
    when all run (for tests and tools; a compile gets them from the mode row's steps)."""
    glob, local = session_and_graph_options(cfg)
    if cfg.get("dump_config.enable_dump"):
        glob.update(dump_options(cfg, rank, world))
    if cfg.get("aoe_config.aoe_mode") is not None:
        glob.update(aoe_options(cfg))
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
)
CANN_DUMP_READS = ("dump_config.dump_path", "dump_config.dump_mode", "dump_config.dump_data",
                   "dump_config.dump_step", "dump_config.dump_layer", "dump_config.quant_dumpable")
CANN_AOE_READS = ("aoe_config.work_path", "aoe_config.aoe_config_file")
