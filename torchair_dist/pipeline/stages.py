"""The declared pipeline: every stage of a compile, and one row per mode.

Reading this module is reading the pipeline. A :class:`Stage` names one step, the function that
runs it, the graph it works on, the option that gates it, the options it reads, where it takes
effect and whether its result can be dumped. A :class:`ModeRow` lists, for one
``CompilerConfig.mode``, its backend, its stages in order (a tuple of names written once: the
order they run, which the README's table numbers per mode) and the format its cache entries use.

The table runs the pipeline: every stage of every level is called by one runner
(:func:`run_stages`), in the row's order, when its platforms and gate say so (:func:`applies`);
no stage re-checks its own gate. One calling convention per level:

* ``dynamo-pass``: ``fn(gm, config) -> gm`` on the graph Dynamo traced (the backend entry);
* ``aot``: ``fn(gm, example_inputs, compiler, decompositions)``, the AOT autograd wrapper itself
  (the backend entry; the compiler it is handed runs the ``aot-pass`` stages);
* ``aot-pass``: ``fn(gm, example_inputs, config) -> gm`` on AOT's functional graph (compiler);
* ``route``: ``fn(ctx) -> ctx | runner | build``: what turns the passed graph into a runner,
  in order; a stage returns the context the next one works on, or what ends the route: a
  runner (debug runners) or the backend's build (``compile``: the mode's backend starts it);
* ``backend``: ``fn(build) -> build``, a step of the mode's backend on the build ``compile``
  started; the route then has the backend finish it (``route.build_runner``);
* ``runtime``: ``fn(runner, ctx) -> runner`` around the runner (the cross-rank check).

Option support is *derived* from these declarations (:mod:`.option_support`'s
``effective_options``): an option takes
effect when a stage that runs for this mode, platform and config reads it; any other option the
user set is named in ONE warning per compile with the reason (``check_config_support``).
``tests/unit/test_option_honesty.py`` compiles with every option set and checks the declared
reads against the reads the code really makes, so the table cannot drift from the code.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

from ..backends import aclgraph, ge, interface
from ..backends.aclgraph import compile as acl
from ..backends.ge.runtime import cann_options as _cann
from ..base import dumps, graph_context
from ..collectives import collective_ops, consistency, remap
from ..configs import CompilerConfig
from ..cpu import stand_ins
from ..errors import UnsupportedModeError
from ..passes import (common, deadlock_check, ge_graph_opts, happens_before, overlap,
                      pattern_fusion, reinplace, reinplace_inputs, remove_cat, scope_attrs,
                      scope_lowering, send_recv, stream_ordering, stream_rewrite, topo_sort,
                      user_patterns, validate)
from ..tools import fx_summary
from . import aot, decomposition_table

ALL_PLATFORMS: FrozenSet[str] = frozenset({"npu", "cuda", "cpu"})

# Options every compile reads whatever else is set (which mode, which passes to call).
ALWAYS_READ: FrozenSet[str] = frozenset({"mode"})

# Where every observer reads a compiled graph, in every mode: ``GraphContext.gm`` as this stage,
# the last AOT pass of every row, left it. ``record_graphs()``, the compile cache's recorder,
# the cross-rank check and the route's dumps read it; nothing after it writes it (a backend
# step that lowers rewrites its own copy: ``base.graph_context.own_copy``).
OBSERVATION_POINT = "validate"

# The levels whose stages shape the graph a compile-cache entry stores (the graph at the
# observation point); the cache's key hashes the source of each such stage's module and of the
# library modules it imports, transitively (``cache.keys.library_digest``). Two more roots of
# that closure are not stage modules: what Dynamo traces is shaped before any stage by the
# remaps installed at import (TRACE_SOURCES), and the aot stage is handed its decompositions
# by the backend entry (HANDED_SOURCES: the table they are merged from).
SHAPING_LEVELS: Tuple[str, ...] = ("dynamo-pass", "aot", "aot-pass")
TRACE_SOURCES: Tuple[str, ...] = (remap.__name__, collective_ops.__name__)
HANDED_SOURCES: Tuple[str, ...] = (decomposition_table.__name__,)


def _is_set(value) -> bool:
    return value is not None and value is not False


def _is_unset(value) -> bool:
    return not value


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of the pipeline.

    ``gate``/``runs_when``: the option that switches the stage on or off and the predicate on its
    value that says the stage runs (``None``: the stage always runs). ``reads``: the options the
    stage uses when it runs (the gate is read whenever the stage is part of the mode and on
    its platform). ``needs``: the platform capability the stage needs (``platform.CAPABILITIES``;
    None: every platform); where it runs and its reads take effect. ``requires``: another
    stage that must run for this one to (its gate is read first); ``yields_to``: another stage
    that, where it runs, replaces this one. ``keeps_original``: given the config, whether the
    stage (when it runs) needs the AOT graph as it was before the AOT passes (a copy is kept:
    :func:`keeps_original`). The runner alone reads gates and capabilities: a stage body reads
    neither.
    """

    name: str
    fn: Callable                              # the function the runner calls (its level's convention)
    level: str                                # dynamo-pass | aot | aot-pass | route | backend | runtime
    doc: str
    gate: Optional[str] = None
    runs_when: Callable[[object], bool] = bool
    reads: Tuple[str, ...] = ()
    needs: Optional[str] = None
    dumped: bool = False
    requires: Optional[str] = None
    yields_to: Optional[str] = None
    keeps_original: Optional[Callable[[CompilerConfig], bool]] = None

    def platform_set(self) -> FrozenSet[str]:
        if self.needs is None:
            return ALL_PLATFORMS
        return stand_ins.platforms_with(self.needs)

    def runs(self, config: CompilerConfig, tracked: bool = False) -> bool:
        """Whether the gate lets the stage run; ``tracked``: read the gate as the code's own
        read (when the stage really runs), not as bookkeeping."""
        if self.requires is not None and not STAGES[self.requires].runs(config, tracked):
            return False
        if self.gate is None:
            return True
        value = config.get(self.gate) if tracked else config.peek(self.gate)
        return self.runs_when(value)

    def all_options(self) -> Tuple[str, ...]:
        return ((self.gate,) if self.gate else ()) + self.reads


_CAPTURE_READS = ("debug.aclgraph.clone_input", "debug.aclgraph.enable_output_clone",
                  "debug.aclgraph.static_capture_size_limit",
                  "debug.aclgraph.disable_mempool_reuse_in_same_fx",
                  "aclgraph_config.use_custom_pool", "aclgraph_config.pool_scope",
                  "npugraphex_config.force_recapture",
                  "npugraphex_config.capture_sizes", "npugraphex_config.pad_to_capture_size",
                  "npugraphex_config.pad_unchecked_ops", "experimental_config.frozen_parameter")

_EXPORT_READS = ("export.export_path_dir", "export.export_name", "export.weight_name",
                 "export.experimental.auto_atc_config_generated", "export.inputs_name",
                 "export.experimental.enable_record_nn_module_stack")

def start_backend(ctx) -> interface.Build:
    """The ``compile`` stage: the backend of the mode's row starts the build of ``ctx``'s graph
    (or loads it from the handle it was stored with: ``backends.interface.start_build``)."""
    return interface.start_build(ctx, mode_row(ctx.config.get("mode")).backend)


STAGES: Dict[str, Stage] = {s.name: s for s in (
    Stage("send_recv", send_recv.preprocess_send_recv, "dynamo-pass",
          "tag matching send/recv pairs and make receive buffers real dependencies"),
    Stage("p2p_order", send_recv.keep_p2p_program_order, "dynamo-pass",
          "with more than one send/recv, GE orders the graph StableRDFS (program order) and a "
          "warning says so", gate="experimental_config.topology_sorting_strategy",
          runs_when=lambda v: v != "StableRDFS"),
    Stage("streams", stream_rewrite.rewrite_streams, "dynamo-pass",
          "torch.Stream/Event calls become tagged stream ops that survive tracing"),
    Stage("aot", aot.compile_with_aot, "aot",
          "AOT autograd: functional graph, decompositions (default -> user -> patches); "
          "an inference graph its runtime wrapper has nothing to do for is called without "
          "that wrapper after the first call",
          reads=("experimental_config.keep_inference_input_mutations",)),
    Stage("stream_labels", stream_ordering.label_streams, "aot-pass",
          "node.meta['stream_label'] = the stream tag of every node inside a stream scope "
          "(before the user's passes and patterns: an extra_check can refuse to fuse across "
          "streams; the built-in passes never do)"),
    Stage("custom_pre_pass", common.custom_pre_pass, "aot-pass",
          "the user's post_grad_custom_pre_pass(gm, example_inputs, config)", gate="post_grad_custom_pre_pass",
          runs_when=_is_set),
    Stage("remove_noop_ops", common.remove_noop_ops, "aot-pass",
          "ops that return their input unchanged are dropped",
          gate="experimental_config.remove_noop_ops"),
    Stage("remove_copy_into_empty", common.remove_copy_into_empty,
          "aot-pass", "copy(empty_like(x), fresh result) -> the result (a collective's output "
          "copied into a buffer nobody wrote)"),
    Stage("user_patterns", user_patterns.apply_user_patterns, "aot-pass",
          "patterns registered with register_replacement (TorchAir's API) are replaced",
          gate="experimental_config.pattern_fusion_pass"),
    Stage("pattern_fusion", pattern_fusion.pattern_fusion, "aot-pass",
          "residual add + RMSNorm (LlamaRMSNorm's AOT ops) -> torch_npu.npu_add_rms_norm",
          gate="experimental_config.pattern_fusion_pass", needs="vendor_kernels"),
    Stage("view_to_reshape", common.view_to_reshape, "aot-pass",
          "aten.view becomes aten.reshape"),
    Stage("collapse_view_chains", common.collapse_view_chains, "aot-pass",
          "reshape(reshape(x)) -> reshape(x)", gate="experimental_config.npu_fx_pass"),
    Stage("custom_post_pass", common.custom_post_pass, "aot-pass",
          "the user's post_grad_custom_post_pass(gm, example_inputs, config)", gate="post_grad_custom_post_pass",
          runs_when=_is_set),
    Stage("scope_ops", scope_lowering.lower_scope_ops, "aot-pass",
          "TorchAir's scope_enter/scope_exit ops (a user pass's) -> stream switches "
          "(_user_stream_label) or node.meta['custom'] attributes"),
    Stage("scope_attrs", scope_attrs.report_scope_attrs, "aot-pass",
          "TorchAir's Ascend-only scopes (super_kernel, limit_core_num, op_never_timeout, "
          "data_dump) stay in node.meta['custom']; a warning names each found"),
    Stage("overlap", overlap.schedule_overlap, "aot-pass",
          "issue collectives early, wait late (never reorders two collectives)",
          gate="distributed_config.overlap_collectives"),
    Stage("reinplace", reinplace.reinplace_collectives, "aot-pass",
          "a dead-input functional all_reduce becomes in-place (no clone, no copy-back); "
          "index_add/scatter/index_put on a fresh buffer nothing else reads becomes in-place",
          gate="debug.aclgraph.disable_reinplace_inplaceable_ops_pass", runs_when=_is_unset),
    Stage("reinplace_inputs", reinplace_inputs.reinplace_input_mutations,
          "aot-pass", "copy_(input, op(input)) becomes op_(input): a KV cache is written in place",
          gate="debug.aclgraph.disable_reinplace_input_mutated_ops_pass", runs_when=_is_unset),
    Stage("remove_cat_ops", remove_cat.remove_cat_ops, "aot-pass",
          "cat(mm(..), add(..)) -> each producer writes its slice of one buffer through its "
          "out= overload (no concatenation copy); runs last among the rewriting passes; not "
          "where inductor generates the kernels (its cat lowering writes in place itself)",
          gate="debug.aclgraph.remove_cat_ops", yields_to="inductor_kernels"),
    Stage("constant_folding", ge_graph_opts.fold_constants, "aot-pass",
          "compute constant subgraphs once at compile time (GE Const)",
          gate="ge_config.oo_constant_folding", runs_when=lambda v: v is True),
    Stage("dead_code_elimination", ge_graph_opts.eliminate_dead_code,
          "aot-pass", "drop unused side-effect-free ops",
          gate="ge_config.oo_dead_code_elimination", runs_when=lambda v: v is True),
    Stage("deadlock_check", deadlock_check.deadlock_check, "aot-pass",
          "warn about collectives that may run concurrently on different streams",
          gate="debug.deadlock_check"),
    Stage("topology_sort", topo_sort.topology_sort, "aot-pass",
          "order the graph GE receives by BFS/RDFS (DFS/StableRDFS: program order); side "
          "effects never move", gate="experimental_config.topology_sorting_strategy",
          runs_when=lambda v: v in topo_sort.REORDERING),
    Stage("stream_order", stream_ordering.order_streams, "aot-pass",
          "every value read on a stream other than its producer's is ordered: an event "
          "(record after the producer, wait before the reader) only where the one order model "
          "finds nothing in the program ordering the read; each such value protected by "
          "record_stream; the user's unordered torch.Stream reads are named by a warning"),
    Stage("stream_order_check", happens_before.check_stream_order,
          "aot-pass", "refuse a graph with a cross-stream data edge that no event, wait, fork, "
          "join or synchronize orders (the one order model: happens-before as vector clocks)",
          gate="debug.check_stream_order", runs_when=happens_before.check_enabled),
    Stage("validate", validate.validate_pass, "aot-pass",
          "the graph holds only ops the backends accept"),
    Stage("fx_summary", fx_summary.summary_stage, "route",
          "write a csv of the graph's ops and their GE support",
          gate="debug.fx_summary.type", runs_when=_is_set),
    Stage("data_dump", dumps.data_dump_stage, "route",
          "instead of the backend: run node by node and save every node's outputs; of the "
          "graph before the passes with data_dump_stage='original'",
          gate="debug.data_dump.type", runs_when=_is_set,
          reads=("debug.data_dump.filter", "debug.data_dump.path",
                 "dump_config.data_dump_stage"),
          keeps_original=lambda config: config.get("dump_config.data_dump_stage") == "original"),
    Stage("summary_skips_compile", graph_context.eager_stage, "route",
          "after an fx_summary (and unless a data dump made its runner): run the FX graph "
          "eagerly instead of the backend", gate="debug.fx_summary.skip_compile",
          requires="fx_summary"),
    Stage("run_eagerly", graph_context.eager_stage, "route",
          "instead of the backend: run the FX graph eagerly", gate="debug.run_eagerly"),
    Stage("shm_collectives", stand_ins.transport_stage, "route",
          "the runner's all_reduce / equal-piece all_to_all exchange through shared memory "
          "between the ranks of one host instead of gloo (the compiled graph and its cache "
          "entry keep the original collectives; ACL: the runner's copy of the graph is "
          "rewritten, GE: the reference executor's Hcom kernels)",
          gate="distributed_config.cpu_shm_collectives", needs="host_shared_memory"),
    Stage("compile", start_backend, "route",
          "the mode's backend starts the graph's build (its steps follow, then it finishes "
          "into a runner and a handle), or starts it from a stored handle (load)"),
    Stage("ge_convert", ge.convert_step, "backend",
          "FX -> GE IR graph, validated against the operator registry; with enable_ref_data "
          "written-back inputs are RefData updated by Assign; with enable_view_optimize a "
          "last-two-dims Transpose feeding a matmul becomes its transpose attribute", dumped=True,
          reads=("experimental_config.enable_ref_data",
                 "experimental_config.enable_view_optimize")),
    Stage("ge_dump", ge.dump_step, "backend",
          "write the GE graph as txt/pbtxt/py", gate="debug.graph_dump.type", runs_when=_is_set,
          reads=("debug.graph_dump.path",)),
    Stage("cann_options", ge.cann_options_step,
          "backend", "GE session/graph options handed to the CANN runtime",
          reads=_cann.CANN_OPTION_READS, needs="cann"),
    Stage("cann_dump", ge.cann_dump_step,
          "backend", "GE's own data dump (ge.exec.enableDump and friends)",
          gate="dump_config.enable_dump", reads=_cann.CANN_DUMP_READS, needs="cann"),
    Stage("cann_aoe", ge.cann_aoe_step,
          "backend", "AOE operator tuning options", gate="aoe_config.aoe_mode",
          runs_when=_is_set, reads=_cann.CANN_AOE_READS, needs="cann"),
    Stage("ge_run", ge.run_step, "backend",
          "run the GE graph: CANN on NPU, the reference executor elsewhere (its collectives "
          "finish at their first reader with overlap_collectives, else right away)",
          reads=("distributed_config.overlap_collectives",)),
    Stage("ge_export", ge.export_step, "backend",
          "write the GE graph (.air) and its weights on the first call; inputs named by "
          "inputs_name, ops annotated with their nn.Module stack on request",
          gate="export.export_mode", reads=_EXPORT_READS),
    Stage("acl_codegen", acl.codegen_step, "backend",
          "the FX graph's own forward as the runner, called with the input list (no "
          "module-call machinery per call)", dumped=True),
    Stage("acl_dump", acl.dump_step, "backend",
          "write the FX graph and its code as py/txt",
          gate="debug.graph_dump.type", runs_when=_is_set, reads=("debug.graph_dump.path",)),
    Stage("inductor_kernels", acl.inductor_step,
          "backend", "inductor generates the compute kernels of the post-pass graph; our "
          "collectives, schedule, check, capture and cache stay",
          gate="experimental_config.inductor_kernels", needs="inductor_kernels",
          reads=("distributed_config.overlap_collectives",)),
    Stage("value_ints", acl.value_ints_step, "backend",
          "integer inputs that only reach tensor ops as values are fed as 0-d tensors and "
          "their host arithmetic runs per call, so one capture serves every value",
          needs="capture"),
    Stage("piecewise", acl.piecewise_step, "backend",
          "the graph is split at its splitting ops: the pieces between them are captured, "
          "the splitting ops (attention) run eagerly between replays",
          gate="npugraphex_config.piecewise", reads=("npugraphex_config.splitting_ops",),
          needs="capture"),
    Stage("device_capture", acl.device_capture_step,
          "backend",
          "NPU/CUDA graph capture itself", reads=("npugraphex_config.capture_error_mode",),
          needs="device_graphs"),
    Stage("capture", acl.capture_step, "backend",
          "capture per graph key, replay on later calls", reads=_CAPTURE_READS,
          needs="capture"),
    Stage("consistency", consistency.guard_first_run, "runtime",
          "before the first run all ranks compare their collectives through the c10d store "
          "(with consistency_check); a peer's fault at run time is reported with the graph's "
          "collectives (always)",
          reads=("distributed_config.consistency_check", "distributed_config.consistency_timeout")),
)}

# Each mode's order, written once: the stages run in exactly this order (levels nest: the
# aot stage calls the aot-pass stages, the compile stage the backend stages), and the
# README's table numbers them per mode from these tuples.
_ACL = (
    "send_recv", "streams", "aot", "stream_labels", "custom_pre_pass", "remove_noop_ops",
    "remove_copy_into_empty", "user_patterns", "pattern_fusion", "view_to_reshape",
    "collapse_view_chains", "custom_post_pass", "scope_ops", "scope_attrs", "overlap",
    "reinplace", "reinplace_inputs", "remove_cat_ops", "deadlock_check", "stream_order",
    "stream_order_check", "validate",
    "fx_summary", "data_dump", "summary_skips_compile", "run_eagerly", "shm_collectives",
    "compile", "acl_codegen",
    "acl_dump", "inductor_kernels", "value_ints", "piecewise", "device_capture", "capture",
    "consistency",
)
_GE = (
    "send_recv", "p2p_order", "streams", "aot", "stream_labels", "custom_pre_pass", "remove_noop_ops",
    "remove_copy_into_empty", "user_patterns", "view_to_reshape", "collapse_view_chains",
    "custom_post_pass", "scope_ops", "scope_attrs", "overlap", "constant_folding",
    "dead_code_elimination", "deadlock_check", "topology_sort", "stream_order",
    "stream_order_check", "validate", "fx_summary",
    "data_dump", "summary_skips_compile", "run_eagerly", "shm_collectives", "compile",
    "ge_convert", "ge_dump",
    "cann_options", "cann_dump", "cann_aoe", "ge_run", "ge_export", "consistency",
)


@dataclasses.dataclass(frozen=True)
class ModeRow:
    mode: str
    backend: interface.Backend   # the mode's backend object (start / load / finish)
    stages: Tuple[str, ...]
    cache_format: str     # what a compile-cache entry holds for this mode
    doc: str


MODE_TABLE: Dict[str, ModeRow] = {r.mode: r for r in (
    ModeRow("max-autotune", ge.BACKEND, _GE,
            "fx-graph (GE IR rebuilt on load)",
            "GE IR graph (CANN on Ascend, the reference executor elsewhere)"),
    ModeRow("npugraph_ex", aclgraph.BACKEND, _ACL,
            "fx-graph (captured again on load)",
            "ACL-graph capture and replay (NPU/CUDA graphs; a runner on CPU)"),
    ModeRow("reduce-overhead", aclgraph.BACKEND, _ACL,
            "fx-graph (captured again on load)",
            "deprecated alias of npugraph_ex"),
)}


def mode_row(mode: str) -> ModeRow:
    if mode not in MODE_TABLE:
        raise UnsupportedModeError(f"Unsupported npu backend mode: {mode}; expected one of "
                                   f"{sorted(MODE_TABLE)}")
    return MODE_TABLE[mode]


def stages_of(mode: str) -> List[Stage]:
    return [STAGES[name] for name in mode_row(mode).stages]


def shaping_modules(mode: str) -> Tuple[str, ...]:
    """Where the code that shaped a graph compiled in ``mode`` (up to the observation point)
    starts: :data:`TRACE_SOURCES`, :data:`HANDED_SOURCES`, then the module of each shaping
    stage's function, in row order. The compile cache keys the sources of these modules and of
    everything they import (``cache.keys.library_sources``)."""
    found = list(TRACE_SOURCES + HANDED_SOURCES)
    for stage in stages_of(mode):
        if stage.level in SHAPING_LEVELS and stage.fn.__module__ not in found:
            found.append(stage.fn.__module__)
    return tuple(found)


def current_platform() -> str:
    from .. import platform as _platform
    return _platform.current().name


# -- step numbers (the README's stage table, tools/docs.py, numbers each mode's column) ------
def step_numbers(mode: str) -> Dict[str, int]:
    """``{stage name: its step number in mode's row}`` (1-based, the order the stages run)."""
    return {name: i for i, name in enumerate(mode_row(mode).stages, 1)}


def applies(stage: Stage, config: CompilerConfig, platform: Optional[str] = None) -> bool:
    """The one execution rule, for every level: ``stage`` runs when it is on this platform, its
    gate (and the gate of the stage it ``requires``) lets it (the gate read as the code's own
    read), and the stage it ``yields_to`` does not run."""
    platform = platform or current_platform()
    if stage.yields_to is not None and applies(STAGES[stage.yields_to], config, platform):
        return False
    return platform in stage.platform_set() and stage.runs(config, tracked=True)


def keeps_original(config: CompilerConfig) -> bool:
    """Whether a stage that runs for ``config`` needs the graph before the AOT passes (the data
    dump of ``data_dump_stage='original'``): the caller keeps a copy only then."""
    platform = current_platform()
    return any(s.keeps_original is not None and applies(s, config, platform)
               and s.keeps_original(config) for s in stages_of(config.peek("mode")))


def stages_at(config: CompilerConfig, level: str) -> List[Stage]:
    """The stages of ``config``'s mode at ``level`` that run now: in the row's order, by
    :func:`applies`."""
    platform = current_platform()
    return [s for s in stages_of(config.get("mode")) if s.level == level
            and applies(s, config, platform)]


def run_stages(config: CompilerConfig, level: str, value, *args,
               stop: Optional[Callable[[object], bool]] = None,
               after: Optional[Callable[[Stage, object], None]] = None):
    """Run the stages of ``config``'s mode at ``level`` that apply (:func:`stages_at`), in the
    row's order: ``value = fn(value, *args)`` for each (the level's calling convention, see the
    module doc). ``stop(value)`` true ends the run early (the route: a runner was made);
    ``after(stage, value)`` sees each stage's result (``record_graphs``). The only place any
    stage of the table is called: pass, aot, route, backend and runtime stages alike."""
    for stage in stages_at(config, level):
        value = stage.fn(value, *args)
        if after is not None:
            after(stage, value)
        if stop is not None and stop(value):
            break
    return value
