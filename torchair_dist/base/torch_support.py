"""Which torch this library runs on, and every private torch API it leans on.

torchair_dist reaches into torch internals that change between releases (AOT autograd's runtime
wrappers and schemas, the torch-function mode stack, Dynamo's ``convert_frame._compile``,
inductor's compile entry, fake tensors). This module is the one place that says:

* :data:`SUPPORTED`: the tested range of torch versions; :func:`check_torch_version` refuses
  anything else at ``import torchair_dist`` with a message that names the range (set
  ``TORCHAIR_DIST_ALLOW_UNTESTED_TORCH=1`` to get a warning instead);
* :data:`VERIFIED`: the versions the whole test suite ran on (CI runs both ends of the range);
* :data:`PRIVATE_APIS`: every private torch name the package uses and what for
  (``tests/unit/test_torch_compat.py`` scans the package source: a private name used but not
  listed, or listed but no longer resolvable on the running torch, fails);
* :data:`PATCHES`: every change this library makes to torch's own state at import or at a
  backend's first use, what it changes, why, and where.

Where a private API differs between supported versions, the difference lives HERE, behind one
helper each (the callers ask the helper, never the version): :func:`p2p_compilation_switch`
(Dynamo's ``enable_p2p_compilation``, absent on 2.11), :func:`aot_dynamic_output_marker` (how
AOT marks an output's dynamic dims for Dynamo's next graph: renamed after 2.11),
:func:`functional_p2p_ops` (torch's functional isend/irecv ops: new in 2.13),
:func:`stream_methods_traced_as_ops` (Dynamo's graph of ``stream.wait_event`` & co.),
:func:`symbolic_size_hint` (a public name, renamed after 2.11).
:data:`VERSIONED_APIS` says on which versions a listed private name exists.
"""
from __future__ import annotations

import re
import warnings
from typing import Dict, Optional, Tuple

SUPPORTED = (">=2.11", "<2.15")
_LOW, _HIGH = (2, 11), (2, 15)     # the range as (major, minor): LOW <= version < HIGH
VERIFIED = ("2.11.0", "2.13.0", "2.14.1")  # CI runs the suite on each (.ci/run)
# torch minor -> the torch_npu releases for it on PyPI (`pip index versions torch_npu`,
# 2026-12-04); torch_npu X.Y.* is built against torch X.Y.
TORCH_NPU_PAIRING = {"2.11": "torch_npu 2.11.0 (.post2, .post3)",
                     "2.12": "torch_npu 2.12.0 (.post2, .post3)",
                     "2.13": "torch_npu 2.13.0", "2.14": "torch_npu 2.14.0"}
ALLOW_ENV = "TORCHAIR_DIST_ALLOW_UNTESTED_TORCH"


class UnsupportedTorchError(ImportError):
    """The installed torch is outside the tested range (an ``ImportError``: raised at import)."""


def parse_version(version: str) -> Tuple[int, int]:
    """``"2.14.1+cu128"`` -> ``(2, 14)``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found:
        raise UnsupportedTorchError(f"cannot read the torch version {version!r}")
    return int(found.group(1)), int(found.group(2))


def torch_at_least(major: int, minor: int) -> bool:
    import torch

    return parse_version(torch.__version__) >= (major, minor)


def p2p_compilation_switch() -> bool:
    """Whether this torch's Dynamo has ``config.enable_p2p_compilation`` (2.13 and later: p2p
    calls graph-break unless it is on). torch 2.11 has no such switch; our remaps (which Dynamo
    inlines before its own p2p handling) capture isend/irecv there without it."""
    import torch._dynamo

    return hasattr(torch._dynamo.config, "enable_p2p_compilation")


def functional_p2p_ops() -> bool:
    """Whether torch has the functional p2p collectives ``_c10d_functional::isend``,
    ``irecv`` and ``batch_p2p_ops`` (2.13+; torch 2.11 has none: our p2p remaps issue
    ``torchair_dist::send``/``recv`` on every version)."""
    import torch
    import torch.distributed._functional_collectives  # noqa: F401  (registers the ops)

    return hasattr(torch.ops._c10d_functional, "isend")


def stream_methods_traced_as_ops() -> bool:
    """Whether Dynamo traces ``Stream.wait_event`` / ``wait_stream`` / ``synchronize`` as
    ``torch.ops.streams`` ops (2.13+, which has ``streams::synchronize_stream``); torch 2.11
    leaves them as method calls on the stream objects (passes/stream_rewrite.py handles both)."""
    import torch
    import torch._dynamo  # noqa: F401  (defines the streams ops)

    return hasattr(torch.ops.streams, "synchronize_stream")


def aot_dynamic_output_marker():
    """AOT's ``f(tensor, dims)`` that marks an output's dims dynamic for Dynamo's next graph,
    the one AOT's own runtime wrapper calls on this torch: ``mark_dynamo_propagated_dynamic_
    indices`` on 2.13+ (sets ``_dynamo_propagated_dynamic_indices``), ``maybe_mark_dynamic_
    helper`` on 2.11 (``_dynamo_weak_dynamic_indices``). Chosen by what the module holds, so a
    torch between the two (2.12) gets whichever it has."""
    from torch._functorch._aot_autograd import runtime_wrappers

    marker = getattr(runtime_wrappers, "mark_dynamo_propagated_dynamic_indices", None)
    return marker if marker is not None else runtime_wrappers.maybe_mark_dynamic_helper


def symbolic_size_hint():
    """``f(symint_or_int) -> int``: the concrete size this compile saw for a possibly symbolic
    size (raises where there is none): ``symbolic_shapes.optimization_hint`` on 2.13+,
    ``size_hint`` on 2.11."""
    from torch.fx.experimental import symbolic_shapes

    hint = getattr(symbolic_shapes, "optimization_hint", None)
    return hint if hint is not None else symbolic_shapes.size_hint


def _allow_untested(environ) -> bool:
    value = environ.get(ALLOW_ENV, "0")
    if value not in ("0", "1"):
        raise UnsupportedTorchError(f"{ALLOW_ENV}={value!r}: expected 0 or 1")
    return value == "1"


def check_torch_version(version: str = None, environ=None) -> None:
    """Raise :class:`UnsupportedTorchError` when ``version`` (default: the installed torch) is
    outside :data:`SUPPORTED`; with ``TORCHAIR_DIST_ALLOW_UNTESTED_TORCH=1`` warn instead."""
    import os

    if version is None:
        import torch

        version = torch.__version__
    environ = os.environ if environ is None else environ
    if _LOW <= parse_version(version) < _HIGH:
        return
    message = (f"torchair_dist supports torch {','.join(SUPPORTED)} (tested on "
               f"{', '.join(VERIFIED)}); this is torch {version}. Install a torch in that range "
               f"(with its matching torch_npu on Ascend), or set {ALLOW_ENV}=1 to try it "
               f"anyway.")
    if _allow_untested(environ):
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        return
    raise UnsupportedTorchError(message)


# private name -> what the library uses it for. Keys are dotted paths cut one component after
# the first private one (``torch._dynamo.config``, ``torch.utils._pytree.tree_flatten`` ->
# ``torch.utils._pytree.tree_flatten``); the modules that use each are found by the test.
PRIVATE_APIS: Dict[str, str] = {
    # the C extension: grad mode, torch-function modes, autocast, tensor types, c10d works
    "torch._C": "the C extension module itself (the entries below; the record replay also "
                "looks up aten bindings by name in _VariableFunctions, _nn, _linalg, _special, "
                "_fft)",
    "torch._C.TensorBase": "the record replay's probe of Python bindings (tensor methods)",
    "torch._C.TensorType": "the record replay's probe of Python bindings (schema types)",
    "torch._C._dispatch_has_kernel_for_dispatch_key": "the record replay places an "
                                                      "intermediate only through an out= "
                                                      "form with a CPU kernel of its own",
    "torch._C._distributed_c10d": "_register_work: a p2p op's Work waited by wait_tensor",
    "torch._C._is_any_autocast_enabled": "AOT's direct call only where autocast is off",
    "torch._C._is_torch_function_mode_enabled": "CPU stand-ins replay without the user's modes",
    "torch._C._len_torch_function_stack": "util.without_function_modes",
    "torch._C._pop_torch_function_stack": "util.without_function_modes",
    "torch._C._push_on_torch_function_stack": "util.without_function_modes",
    "torch._C._set_grad_enabled": "generated replay/entry code switches grad mode cheaply",
    "torch._C._storage_Use_Count": "a replay reads whether the caller still holds an output's "
                                   "storage (with UntypedStorage._cdata / _swap_data_ptr_: "
                                   "one still held is moved onto a copy; aclgraph.outputs)",
    "torch._C._autograd": "_unsafe_set_version_counter: a runner undoes its own version "
                          "bumps of mutated inputs, which AOT's wrapper bumps (pipeline.aot)",
    "torch._debug_has_internal_overlap": "a capture's input buffer keeps the caller's "
                                         "layout unless it overlaps itself (base.layout)",
    "torch._C._cuda_clearCublasWorkspaces": "a CUDA capture's cuBLAS workspace is allocated "
                                            "in its own pool (platform._own_cuda_capture)",
    # op overload types
    "torch._ops": "the op overload classes (below)",
    "torch._ops.OpOverload": "every pass and converter matches FX targets by overload",
    "torch._ops.OpOverloadPacket": "targets given as packets (user converters, validation)",
    "torch._ops.HigherOrderOperator": "graphs holding HOPs (auto_functionalized, ...)",
    "torch.ops._c10d_functional": "the functional collectives every graph holds",
    "torch.ops._c10d_functional.all_gather_into_tensor": "collective decompositions",
    "torch.ops._c10d_functional.all_reduce": "the barrier op's eager kernel",
    "torch.ops._c10d_functional.all_to_all_single": "collective decompositions",
    "torch.ops._c10d_functional.broadcast": "collective decompositions",
    "torch.ops._c10d_functional.wait_tensor": "collectives finish at their wait",
    "torch.distributed._functional_collectives": "the functional API the remaps call",
    "torch.distributed._functional_collectives.REDUCE_OP_TO_STR": "ReduceOp -> the name the "
                                                                  "functional ops take",
    "torch.distributed.distributed_c10d._get_group_tag": "stable group names (tag, ranks)",
    "torch.distributed.distributed_c10d._resolve_process_group": "a group from its name",
    "torch.distributed.distributed_c10d._world": "c10d's world state (pg_map below)",
    "torch.distributed.distributed_c10d._world.pg_map": "the process groups of this process",
    "torch.distributed.distributed_c10d._get_default_store": "the c10d store the cross-rank "
                                                            "check and failure board use",
    "torch.distributed.distributed_c10d._all_gather_base": "remapped (deprecated c10d API)",
    "torch.distributed.distributed_c10d._reduce_scatter_base": "remapped (deprecated c10d API)",
    # Dynamo
    "torch._dynamo": "the compiler front end (entries below)",
    "torch._dynamo.assume_constant_result": "remapped c10d queries fold to constants",
    "torch._dynamo.config": "enable_p2p_compilation, capture_scalar_outputs, suppress_errors",
    "torch._dynamo.convert_frame": "_compile wrapped: a rank's trace failure reaches its peers",
    "torch._dynamo.decorators": "substitute_in_graph: in-place c10d APIs become traceable",
    "torch._dynamo.disallow_in_graph": "forced graph breaks (TORCHAIR_DIST_BREAK_GRAPH_OPS)",
    "torch._dynamo.exc": "Unsupported: a trace failure told apart from a user error",
    "torch._dynamo.graph_bytecode_inputs": "user stream objects passed into the graph",
    "torch._dynamo.reset": "export and cache compile from a clean Dynamo state",
    "torch._dynamo.source": "cache entries store where a graph input is read from (Dynamo's "
                            "source chain of an input read through a global or an object)",
    "torch._dynamo.list_backends": "named backends: is npugraph_ex known (entry point)?",
    "torch._dynamo.register_backend": "named backends registered when run from a source tree",
    "torch._dynamo.mark_dynamic": "inference.set_dim_gears marks the geared dims dynamic",
    "torch._dynamo.trace_rules": "is_polyfilled_callable: remaps installed once",
    "torch._dynamo.utils": "GmWrapper: AOT's forward wrapper recognised for the direct call; "
                           "flatten_graph_inputs: list inputs (compiled autograd) flattened "
                           "for AOT as Dynamo's aot_autograd does",
    # AOT autograd
    "torch._functorch._aot_autograd": "runtime wrappers and schemas (MutationType, "
                                      "OutputType): when AOT's wrapper can be skipped",
    "torch._functorch.aot_autograd": "aot_module_simplified: the aot stage",
    "torch._functorch.config": "AOT's debug switches that need its wrapper",
    "torch._guards": "the tracing context (entries below)",
    "torch._guards.TracingContext": "AOT's metadata: static inputs, forward metadata",
    "torch._guards.detect_fake_mode": "the fake mode of a graph's example inputs",
    # inductor, fake tensors, decompositions, the op registry of script objects
    "torch._inductor.compile_fx": "compile_fx_inner: inductor kernels under our pipeline",
    "torch._inductor.decomposition": "select_decomp_table: inductor's decompositions",
    "torch._inductor.config": "post_grad_custom_pre_pass: inductor kernels' wait check (its "
                              "uuid keys inductor's graph cache)",
    "torch._inductor.custom_graph_pass": "CustomGraphPass / get_hash_for_files: that check",
    "torch._inductor.ir": "_CollectiveKernel / TensorBox: our waited collectives lowered as "
                          "inductor's collectives (input kept, output unread until the wait)",
    "torch._inductor.lowering": "lowerings / fallbacks / register_lowering: those lowerings",
    "torch._inductor.pattern_matcher": "register_replacement (TorchAir's API): the user's "
                                       "patterns are matched by inductor's pattern matcher",
    "torch._higher_order_ops.auto_functionalize": "the record stand-in runs auto_functionalized"
                                                  "[_v2]'s dense form (custom ops that mutate)",
    "torch._subclasses": "fake tensors (entries below)",
    "torch._subclasses.FakeTensorMode": "shape propagation of rewritten graphs",
    "torch._subclasses.fake_tensor": "unset_fake_temporarily / FakeTensorMode: real data "
                                     "built while AOT traces under fake tensors",
    "torch._library.fake_class_registry": "FakeScriptObject: process groups as graph inputs",
    "torch._decomp.get_decompositions": "the platform's decomposition patches",
    "torch._decomp.core_aten_decompositions": "GE lowering: ops without a converter decompose",
    "torch._decomp.decomposition_table": "GE lowering: the rest of torch's decompositions",
    "torch._higher_order_ops.effects": "with_effects: GE drops wrapped error checks; the record "
                                       "capture records the wrapped op (new_token_tensor)",
    "torch.utils._pytree": "cache_compile flattens arguments and outputs (entries below)",
    "torch.utils._pytree.tree_flatten": "cache keys and records",
    "torch.utils._pytree.SUPPORTED_NODES": "cache keys look into dataclasses pytree does not "
                                           "know",
    "torch.utils._pytree.tree_leaves": "GE lowering: a node's FX inputs",
    "torch.utils._pytree.tree_map": "GE lowering: outputs of a widened decomposition cast back",
    "torch.utils._pytree.tree_unflatten": "a loaded entry rebuilds the outputs",
    "torch.utils._pytree.treespec_dumps": "an entry stores its output structure",
    "torch.utils._pytree.treespec_loads": "a loaded entry reads its output structure",
    "torch.utils._python_dispatch.TorchDispatchMode": "the record stand-in's op recorder",
    "torch.utils._python_dispatch.is_traceable_wrapper_subclass": "subclass inputs keep "
                                                                  "AOT's wrapper",
}

# Full private names that exist on part of the supported range only (each used behind a helper
# above): name -> (first version holding it, first version without it), None = open end.
# tests/unit/test_torch_compat.py checks each resolves exactly where this says (observed on
# 2.11.0 and 2.13.0).
# Names whose presence on 2.14.1 depends on which torch modules were imported first (a config
# entry registered on import): used behind a hasattr helper, not checked against the table.
IMPORT_DEPENDENT = frozenset({"torch._dynamo.config.enable_p2p_compilation"})
VERSIONED_APIS: Dict[str, Tuple[Optional[Tuple[int, int]], Optional[Tuple[int, int]]]] = {
    "torch._dynamo.config.enable_p2p_compilation": ((2, 13), None),
    "torch._functorch._aot_autograd.runtime_wrappers.mark_dynamo_propagated_dynamic_indices":
        ((2, 13), None),
    "torch._functorch._aot_autograd.runtime_wrappers.maybe_mark_dynamic_helper":
        (None, (2, 13)),
    "torch.ops._c10d_functional.isend": ((2, 13), None),          # functional_p2p_ops()
    "torch.ops._c10d_functional.irecv": ((2, 13), None),
    "torch.ops._c10d_functional.batch_p2p_ops": ((2, 13), None),
    "torch.ops.streams.synchronize_stream": ((2, 13), None),  # stream_methods_traced_as_ops()
    # public, but renamed: symbolic_size_hint()
    "torch.fx.experimental.symbolic_shapes.optimization_hint": ((2, 13), None),
}


# Private names that exist only in a build of torch for a device (name -> torch.backends
# module whose is_built() says so); used only on that device.
BUILD_ONLY_APIS: Dict[str, str] = {
    "torch._C._cuda_clearCublasWorkspaces": "cuda",
}


def built_here(name: str) -> bool:
    """False for a :data:`BUILD_ONLY_APIS` name this torch was built without."""
    backend = BUILD_ONLY_APIS.get(name)
    if backend is None:
        return True
    import torch.backends

    return getattr(torch.backends, backend).is_built()


def expected_on(name: str, version: Tuple[int, int]) -> bool:
    """Whether :data:`VERSIONED_APIS` says ``name`` exists on torch ``version`` (major, minor);
    True for a name not in it."""
    since, until = VERSIONED_APIS.get(name, (None, None))
    return (since is None or version >= since) and (until is None or version < until)


# What this library changes in torch's own state: (what, why, where).
PATCHES: Tuple[Tuple[str, str, str], ...] = (
    ("inductor lowerings registered for the torchair_dist:: ops a graph waits on "
     "(all_to_all_v, send, recv) as ir._CollectiveKernel",
     "as plain fallback kernels inductor reused their input buffer while the collective was "
     "still reading it (gloo's thread); a collective kernel's wait keeps it",
     "backends/aclgraph/inductor_kernels.py: register_async_collectives(), at the first "
     "inductor_kernels compile of a graph that waits on one"),
    ("torch.distributed in-place collectives (all_reduce, all_gather, broadcast, send/recv, "
     "... 19 APIs) get Dynamo polyfills (substitute_in_graph)",
     "Dynamo cannot trace in-place c10d calls; the polyfills call the functional "
     "collectives so every collective lands in ONE graph", "collectives/remap.py: install() at "
     "import torchair_dist"),
    ("torch._dynamo.convert_frame._compile wrapped",
     "a rank whose trace fails publishes the failure so its peers raise within seconds "
     "instead of hanging in their first collective", "collectives/failures.py: "
     "install_trace_hook(), at import"),
    ("torch._dynamo.config.enable_p2p_compilation = True",
     "lets Dynamo trace isend/irecv/batch_isend_irecv (off by default)",
     "pipeline/torch_patches.py, at a backend's first compile (torch 2.13+: 2.11 has no "
     "such switch)"),
    ("torch._dynamo.disallow_in_graph(op) for each op in TORCHAIR_DIST_BREAK_GRAPH_OPS",
     "a debugging aid: forced graph breaks", "pipeline/torch_patches.py, at a backend's first compile"),
    ("torch.distributed.barrier / monitored_barrier replaced while the CPU record stand-in "
     "captures, restored after", "a host-side call a device graph cannot capture is refused "
     "during capture", "cpu/record.py: HostCallGuard"),
    ("torch's cuBLAS workspaces cleared (torch._C._cuda_clearCublasWorkspaces) before each "
     "CUDA capture; torch.cuda.graph's empty_cache skipped",
     "the workspace a captured graph uses is allocated in that graph's own pool, so another "
     "capturer clearing workspaces (CUDA graph trees do) cannot free memory our graph "
     "replays on", "platform/__init__.py: _own_cuda_capture, at each capture on CUDA"),
    ("torch._dynamo.register_backend('npugraph_ex' / 'torchair_dist') when Dynamo does not "
     "know the name", "backend=\"npugraph_ex\" works when the project runs from a source "
     "tree (no installed entry points); an installed entry point is left alone",
     "pipeline/entry.py: register_named_backends, at import torchair_dist"),
    ("a backend's reset hook (torch._dynamo.reset() calls it)",
     "our per-process counters restart with Dynamo's", "pipeline/entry.py: get_npu_backend"),
    ("torch_npu's deterministic-level guard installed (on Ascend only)",
     "TorchAir installs it for compiled graphs", "pipeline/entry.py: install_determinism_guard"),
)
