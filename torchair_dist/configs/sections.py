"""The sub-configs of CompilerConfig, one class per section, with every option documented.

Names, defaults and accepted values follow TorchAir's ``CompilerConfig`` (the options and
where each takes effect: ``docs/reference/config.md``) so code written for TorchAir configures
this library the same way; ``DistributedConfig`` is ours.
"""
from __future__ import annotations

from .base import ConfigBase
from .option import (INT64_MAX, BoolOption, CallableOption, ChoiceOption, DictOption,
                     IntListOption, IntRangeOption, OpNameListOption, PathOption, PoolHandleOption, RegexOption,
                     StrOption)


class GraphDumpConfig(ConfigBase):
    def __init__(self):
        self.type = ChoiceOption(None, [None, "txt", "pbtxt", "py"],
                                 "dump each rank's graph in this format (py/txt in ACL modes)")
        self.path = PathOption(None, doc="directory of graph dumps (default: current directory)")
        self._freeze()


class DataDumpConfig(ConfigBase):
    def __init__(self):
        self.type = ChoiceOption(None, [None, "npy", "pt"],
                                 "run the FX graph node by node and save every node's outputs")
        self.filter = CallableOption(None, "filter(node) -> bool choosing which nodes to save")
        self.path = PathOption(None, doc="directory of data dumps (default: ./data_dump)")
        self._freeze()


class FxSummaryConfig(ConfigBase):
    def __init__(self):
        self.type = ChoiceOption(None, [None, "csv"], "write a csv summary of the FX graph's ops")
        self.skip_compile = BoolOption(True, "with fx_summary: run eagerly instead of compiling")
        self._freeze()


class AclGraphDebugConfig(ConfigBase):
    def __init__(self):
        self.disable_reinplace_inplaceable_ops_pass = BoolOption(
            False, "keep functional copies of in-place-able ops instead of re-inplacing them")
        self.disable_reinplace_input_mutated_ops_pass = BoolOption(
            False, "keep functional copies for mutated graph inputs")
        self.disable_mempool_reuse_in_same_fx = BoolOption(
            False, "give every capture of one graph its own memory (outputs are never shared)")
        self.enable_output_clone = BoolOption(
            False, "hand out a copy of every output on every call (off: held outputs are copied "
            "only when a replay would overwrite them)")
        self.static_capture_size_limit = IntRangeOption(
            64, 1, INT64_MAX, "most captures per graph; past it the graph runs eagerly")
        self.clone_input = BoolOption(
            True, "copy every user input into the captured buffers (off: only moved inputs)")
        self.remove_cat_ops = BoolOption(True, "let cat write straight into its output buffer")
        self._freeze()


class DebugConfig(ConfigBase):
    def __init__(self):
        self.graph_dump = GraphDumpConfig()
        self.data_dump = DataDumpConfig()
        self.fx_summary = FxSummaryConfig()
        self.aclgraph = AclGraphDebugConfig()
        self.run_eagerly = BoolOption(False, "run the FX graph eagerly instead of the backend")
        self.deadlock_check = BoolOption(False, "warn about collectives that may run concurrently "
                                          "on different streams (every platform)")
        self.check_stream_order = BoolOption(
            False, "refuse a graph with a cross-stream data edge no event orders (a "
            "happens-before check; also TORCHAIR_DIST_CHECK_STREAM_ORDER=1)")
        self._freeze()


class AoeConfig(ConfigBase):
    def __init__(self):
        self.aoe_mode = ChoiceOption(None, [None, "2"], "AOE operator tuning mode (NPU, GE)")
        self.work_path = PathOption("./", must_exist="dir", doc="AOE working directory")
        self.aoe_config_file = PathOption(None, must_exist="file", doc="AOE config file")
        self._freeze()


class ExportExperimentalConfig(ConfigBase):
    def __init__(self):
        self.enable_record_nn_module_stack = BoolOption(False, "record nn.Module paths on ops")
        self.auto_atc_config_generated = BoolOption(
            False, "rank 0 writes model-relation and NUMA configs next to the export")
        self.enable_lite_export = BoolOption(False, "export a lite graph (NPU)")
        self._freeze()


class ExportConfig(ConfigBase):
    def __init__(self):
        self.export_mode = BoolOption(False, "export per-rank offline graphs instead of running")
        self.export_path_dir = PathOption("./", doc="directory the export is written to")
        self.export_name = StrOption(None, "file name prefix of the exported graphs")
        self.weight_name = DictOption(None, "{id(param): name} used to name exported weights")
        self.inputs_name = DictOption(None, "{input index: name} used to name exported inputs")
        self.experimental = ExportExperimentalConfig()
        self._freeze()


class DumpConfig(ConfigBase):
    def __init__(self):
        self.enable_dump = BoolOption(False, "dump operator data on the device (NPU)")
        self.dump_path = PathOption("./", doc="where device data dumps go")
        self.dump_mode = ChoiceOption("all", ["input", "output", "all"], "which tensors to dump")
        self.quant_dumpable = BoolOption(False, "dump quantized ops' data (GE)")
        self.dump_step = RegexOption(None, r"^(((\d+)|(\d+-{0,1}\d+))\|{0,1})*$", "0|5|10-20",
                                     "steps to dump")
        self.dump_layer = RegexOption(None, r'^[0-9a-zA-Z_" "/\\.]*$', "Add_1 Conv2D",
                                      "space-separated op names to dump")
        self.dump_data = ChoiceOption("tensor", ["tensor", "stats"], "dump tensors or statistics")
        self.dump_config_path = PathOption(None, must_exist="file", suffix=".json",
                                           doc="acl dump config json (overrides the above)")
        self.data_dump_stage = ChoiceOption("optimized", ["original", "optimized"],
                                            "dump the graph before or after optimisation")
        self._freeze()


class FusionConfig(ConfigBase):
    def __init__(self):
        self.fusion_switch_file = PathOption(None, must_exist="file",
                                             doc="GE fusion switch file (GE)")
        self._freeze()


class AclGraphExperimentalConfig(ConfigBase):
    def __init__(self):
        self._aclnn_static_shape_kernel = BoolOption(False, "compile static-shape kernels (NPU)")
        self._aclnn_static_shape_kernel_build_dir = StrOption(None, "static kernel build dir")
        self._aclnn_static_shape_kernel_sym_value_range = IntListOption(
            None, "symbol values to build static kernels for")
        self._aclnn_static_shape_kernel_sym_index = IntRangeOption(
            0, 0, INT64_MAX, "index of the symbol that selects a static kernel")
        self._super_kernel_optimize = BoolOption(False, "fuse captured kernels (NPU)")
        self._super_kernel_optimize_options = DictOption(None, "super-kernel options")
        self._super_kernel_debug_options = DictOption(None, "super-kernel debug options")
        self._freeze()


class ExperimentalConfig(ConfigBase):
    def __init__(self):
        self.cc_parallel_enable = BoolOption(False, "run GE engines in parallel (GE)")
        self.keep_inference_input_mutations = BoolOption(
            True, "keep input mutations inside the inference graph (AOT autograd)")
        self.memory_efficiency = BoolOption(False, "prefer memory over speed (GE)")
        self.frozen_parameter = BoolOption(
            False, "treat parameters as constants: captures never re-key on their addresses")
        self.static_model_ops_lower_limit = IntRangeOption(
            None, -1, INT64_MAX, "GE static sub-graph size threshold (GE)")
        self.jit_compile = ChoiceOption("auto", ["auto"], "GE jit compile mode")
        self.npu_fx_pass = BoolOption(False, "run the extra FX patterns passes on the graph")
        self.aot_config_enable_joint_graph = BoolOption(False, "trace a joint fw/bw graph")
        self.aot_config_output_loss_index = IntRangeOption(0, 0, INT64_MAX,
                                                           "output index of the loss")
        self.topology_sorting_strategy = ChoiceOption(
            "DFS", ["BFS", "DFS", "RDFS", "StableRDFS"], "GE topological ordering strategy")
        self.enable_ref_data = BoolOption(False, "use RefData for mutated inputs (GE)")
        self.enable_view_optimize = BoolOption(
            True, "max-autotune: a view the consumer can read is not copied (a Transpose of "
                  "the last two dims feeding a matmul becomes its transpose_x1/x2 attribute)")
        self.remove_noop_ops = BoolOption(True, "remove ops that return their input unchanged")
        self.tiling_schedule_optimize = BoolOption(False, "GE tiling schedule optimisation")
        self.pattern_fusion_pass = BoolOption(True, "run pattern fusion passes")
        self.inductor_kernels = BoolOption(
            False, "ACL modes on CPU/CUDA: inductor generates the compute kernels of the "
                   "post-pass graph; collectives, overlap schedule, cross-rank check, capture "
                   "and cache stay torchair_dist's (ignored on NPU: GE fuses)")
        self.aclgraph = AclGraphExperimentalConfig()
        self._freeze()


class InferenceConfig(ConfigBase):
    def __init__(self):
        self.dynamic_gears_merge_policy = ChoiceOption("zip", ["zip", "product"],
                                                       "how dim gears combine (GE)")
        self._freeze()


class GeConfig(ConfigBase):
    def __init__(self):
        self.enable_single_stream = BoolOption(False, "run the GE graph on one stream")
        self.oo_level = ChoiceOption("O3", ["O1", "O3"], "GE optimisation level")
        self.oo_constant_folding = BoolOption(None, "GE constant folding", allow_none=True)
        self.oo_dead_code_elimination = BoolOption(None, "GE dead code elimination",
                                                   allow_none=True)
        self.export_compile_stat = ChoiceOption("2", ["0", "1", "2"], "GE compile statistics")
        self.aicore_num = RegexOption(
            None, r"^\d+\|\d+$", "24|48", "AI cores and vector cores GE may use ('aic|aiv')")
        self.optimization_switch = RegexOption(
            None, r"^[A-Za-z0-9_]+:(on|off)(;[A-Za-z0-9_]+:(on|off))*$", "ConstantFoldingPass:off",
            "GE optimisation passes switched on/off ('Pass:on|off;...')")
        self._freeze()


class AclGraphConfig(ConfigBase):
    def __init__(self):
        self.use_custom_pool = PoolHandleOption(
            None, "a device graph memory pool handle shared by captures (ACL modes)")
        self.pool_scope = ChoiceOption(
            "device", ["device", "graph"],
            "which captures share one memory pool (ACL modes): 'device' one pool per device "
            "(and rank) for every graph of the process, 'graph' one pool per compiled graph; "
            "ignored with use_custom_pool or debug.aclgraph.disable_mempool_reuse_in_same_fx")
        self._freeze()


DEFAULT_SPLITTING_OPS = (
    "aten.scaled_dot_product_attention", "aten._scaled_dot_product_attention_math",
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_fused_attention_overrideable", "aten._flash_attention_forward",
    "aten._efficient_attention_forward", "npu.npu_fused_infer_attention_score",
    "npu.npu_incre_flash_attention", "npu.npu_prompt_flash_attention")


class NpuGraphExConfig(ConfigBase):
    """Options of the ``npugraph_ex`` mode itself (TorchAir's split package adds these)."""

    def __init__(self):
        self.capture_error_mode = ChoiceOption(
            "global", ["global", "thread_local", "relaxed"], "device graph capture error mode")
        self.force_recapture = BoolOption(False, "recapture on every call (debugging)")
        self.capture_sizes = IntListOption(
            None, "sizes of the batch dimension captured up front at the first call, "
            "largest first, into one pool (vLLM's cudagraph_capture_sizes, token counts); "
            "the batch dimension is dim 0 of the first input whose dim 0 is dynamic, else "
            "dim 1 of the first input shaped [1, tokens, ...] with a dynamic token count (a "
            "flattened token batch); a call of another size is padded up (pad_to_capture_size) "
            "or runs eagerly, that call only")
        self.pad_to_capture_size = BoolOption(
            False, "rows along the batch dimension are independent: a call whose batch size "
            "is not among capture_sizes is padded up to the next one and its outputs sliced "
            "back (off: that call runs eagerly); before a graph pads, its rows are proven "
            "independent (a reduction, softmax, scan or sort along the batch dim, a view "
            "merging it, indexing across its rows or an unknown op refuses it with an error "
            "naming the op and source line)")
        self.pad_unchecked_ops = OpNameListOption(
            [], "ops the padding check accepts where it cannot prove the batch rows stay "
            "independent (the user vouches for them; each one relied on is named in a warning "
            "and in capture_summary()['pad_unchecked'])")
        self.piecewise = BoolOption(
            False, "split each graph at its splitting_ops: the pieces between them are "
            "captured (per their own shapes, in the graph's one pool) and the splitting ops "
            "run eagerly between replays, so an attention length that changes every step "
            "does not make a capture per length (vLLM's piecewise graphs)")
        self.splitting_ops = OpNameListOption(
            list(DEFAULT_SPLITTING_OPS), "the ops piecewise splits at, by name "
            "('namespace.op' matches every overload, 'namespace.op.overload' one); default: "
            "the SDPA/flash/efficient/cudnn attention aten ops and TorchAir's fused attention "
            "ops (npu.npu_fused_infer_attention_score, npu.npu_incre_flash_attention, "
            "npu.npu_prompt_flash_attention)")
        self._freeze()


class DistributedConfig(ConfigBase):
    """torchair_dist's own options for multi-card graphs."""

    def __init__(self):
        self.consistency_check = BoolOption(
            True, "before a graph's first run, check every rank compiled the same collectives")
        self.consistency_timeout = IntRangeOption(
            60, 1, 3600, "seconds the cross-rank check waits for the other ranks")
        self.overlap_collectives = BoolOption(
            True, "schedule collectives early and their waits late")
        self.cpu_shm_collectives = BoolOption(
            True, "on CPU, run the graph's all_reduce and equal-piece all_to_all over shared "
            "memory when every rank of the group is on this host (else gloo, with a warning); "
            "False: gloo")
        self._freeze()
