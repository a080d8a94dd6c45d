"""Calling a compiled inference graph without AOT autograd's runtime wrapper, where that
wrapper has nothing to do.

``aot_module_simplified`` returns ``forward(*args)``, which prepends the module's lifted
parameters and runs a generated wrapper around our runner: it turns grad mode off, calls the
runner, then applies input mutations the graph left out, regenerates outputs that alias
inputs or intermediates, marks dynamic output dims and restores a grad-mode change. It costs
about 2 us per call on a trivial graph, as much as our whole runner.

For an inference graph where AOT's metadata says none of that applies, :func:`wrap` returns a
``forward(*args)`` that turns grad mode off, calls the runner itself and marks dynamic output
dims as AOT does. The first call still goes through AOT's forward (its first call checks
custom ops' aliasing). Anything the checks below do not prove trivial keeps AOT's forward:
training graphs, any mutated input, aliased outputs, effect tokens, tensor subclasses (inputs
or outputs), functionalized RNG, autocast at compile time, deduplicated or lifted inputs.
"""
from __future__ import annotations

import logging
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

log = logging.getLogger("torchair_dist")


def trivial_inference(gm: torch.fx.GraphModule, n_runtime_args: int) -> Optional[str]:
    """Why AOT's runtime wrapper is needed for this inference graph (read while AOT compiles
    it), or None when it is an identity around the runner."""
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd.schemas import MutationType, OutputType

    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return "no AOT metadata"
    checks = (
        (any(i.mutation_type != MutationType.NOT_MUTATED for i in meta.input_info),
         "an input is mutated"),
        (meta.num_outputs_aliased or meta.num_intermediate_bases
         or any(o.output_type != OutputType.non_alias for o in meta.output_info),
         "an output aliases an input or intermediate"),
        (meta.grad_enabled_mutation is not None, "the graph changes grad mode"),
        (bool(meta.tokens) or meta.num_graphsafe_rng_states, "effect tokens or RNG states"),
        (meta.is_rng_op_functionalized, "functionalized RNG"),
        (functorch_config.debug_assert, "functorch debug_assert"),
        (len(gm.graph.find_nodes(op="placeholder")) != n_runtime_args,
         "AOT changed the inputs (deduplicated, lifted or synthetic-base)"),
    )
    for failed, why in checks:
        if failed:
            return why
    return None


def dynamic_marks() -> List[Tuple[int, set]]:
    """(output index, dims) AOT marks on each call as dynamic for Dynamo's next graph (read
    while AOT compiles)."""
    meta = torch._guards.TracingContext.get().fw_metadata
    return [(i, set(o.dynamic_dims)) for i, o in enumerate(meta.output_info) if o.dynamic_dims]


def wrap(aot_forward: Callable, runner: Callable, name: str,
         marks: Sequence[Tuple[int, set]] = ()) -> Callable:
    """``forward(*args)`` calling ``runner`` (AOT's boxed compiled graph) directly after
    ``aot_forward``'s first call; ``marks``: :func:`dynamic_marks`, applied as AOT does."""
    boxed = getattr(runner, "_boxed_call", False)
    # A runner's class may make the forward itself (one generated frame per replay); looked
    # up on the class, so a wrapper that forwards attributes to a runner is not taken for it.
    if not marks and getattr(type(runner), "direct_call", None) is not None:
        return _dressed(runner.direct_call(aot_forward), aot_forward, name)
    first: List[bool] = [True]
    is_grad = torch.is_grad_enabled
    set_grad = torch._C._set_grad_enabled
    from ..base.torch_support import aot_dynamic_output_marker

    mark = aot_dynamic_output_marker()

    def forward(*args: Any):
        if first:
            first.clear()
            return aot_forward(*args)
        grad = is_grad()
        if grad:
            set_grad(False)
        try:
            outs = runner(list(args)) if boxed else runner(*args)
        finally:
            if grad:
                set_grad(True)
        outs = outs if type(outs) is list else _as_list(outs)
        for i, dims in marks:
            mark(outs[i], dims)
        return outs

    return _dressed(forward, aot_forward, name)


def _dressed(forward: Callable, aot_forward: Callable, name: str) -> Callable:
    forward.__dict__.update(aot_forward.__dict__)  # zero_grad, named_parameters, serialize ...
    forward.__wrapped__ = aot_forward
    forward.skips_aot_wrapper = True  # what tests and tools check
    log.debug("%s: called without AOT's runtime wrapper (nothing for it to do)", name)
    return forward


def _as_list(outs) -> list:
    if isinstance(outs, tuple):
        return list(outs)
    return [outs]


def ineligible(gm, example_inputs: Sequence[Any]) -> Optional[str]:
    """Why AOT's forward is kept whatever the graph (read before AOT runs), or None.

    Tensor subclasses are checked here, on Dynamo's graph: the metadata AOT hands the
    compiler is the unwrapped graph's, where every tensor is plain."""
    if _has_subclass(example_inputs) or _has_subclass(_output_values(gm)):
        return "tensor subclasses"  # AOT wraps and unwraps them around every call
    if isinstance(gm, torch._dynamo.utils.GmWrapper):
        return "boxed inputs"  # AOT returns a boxed forward(args) for it
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        return "lifted parameters"  # AOT prepends them to every call's inputs
    if torch._C._is_any_autocast_enabled():
        return "autocast is on"  # AOT disables it around every call
    return None


def _has_subclass(values) -> bool:
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return any(is_traceable_wrapper_subclass(v) for v in values)


def _output_values(gm) -> List[Any]:
    """The example values Dynamo recorded for the graph's outputs (None where it has none)."""
    graph = getattr(gm, "graph", None)
    if graph is None:
        return []
    found: List[Any] = []
    for node in graph.find_nodes(op="output"):
        torch.fx.node.map_arg(node.args, lambda n: found.append(
            n.meta.get("example_value", n.meta.get("val"))))
    return found


class KeepInputVersions:
    """A runner after which each input the graph mutates has eager's version counter.

    Eager bumps a tensor's version once per in-place op on it or on a view of it. AOT's
    runtime wrapper bumps each mutated input it tracks
    (``mutated_graph_handled_indices_seen_by_autograd``) once per call, expecting kernels that
    write memory without telling autograd (inductor's, a device graph's replay); our runners on
    CPU, and a capture's first run, apply aten's in-place ops, which bump by themselves. So the
    counter is set here to what eager would leave, less the bump AOT adds after us: autograd's
    saved-tensor checks and user code that watch ``_version`` see eager's program."""

    _boxed_call = True

    def __init__(self, runner: Callable, bumps: Dict[int, int], aot_bumps: Sequence[int]):
        self.runner = runner
        self.bumps = tuple((i, n - (1 if i in set(aot_bumps) else 0))
                           for i, n in sorted(bumps.items()))
        self.boxed = getattr(runner, "_boxed_call", False)

    def __call__(self, args):
        watched = [(args[i], n) for i, n in self.bumps
                   if isinstance(args[i], torch.Tensor) and not args[i].is_inference()]
        targets = [t._version + n for t, n in watched]
        outs = self.runner(args) if self.boxed else self.runner(*args)
        if watched:
            torch._C._autograd._unsafe_set_version_counter(tuple(t for t, _ in watched),
                                                          tuple(targets))
        return outs

    def __getattr__(self, name: str):  # name, capture_count, captures ... of the runner
        return getattr(self.__dict__["runner"], name)


_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_", "record_stream_"})


def eager_version_bumps(gm: torch.fx.GraphModule) -> Optional[Dict[int, int]]:
    """Per placeholder of Dynamo's graph: how many in-place ops the program applies to it or
    to a view of it (eager bumps its version once each), read from the example values'
    storages. None where the graph has no example values to read."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node):
        value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return None
        try:
            return StorageWeakRef(value.untyped_storage())
        except Exception:  # noqa: BLE001 - a tensor subclass without one storage
            return None

    if not isinstance(getattr(gm, "graph", None), torch.fx.Graph):
        return None  # a boxed wrapper (compiled autograd): AOT's count stands
    owners: Dict[Any, int] = {}
    placeholders = gm.graph.find_nodes(op="placeholder")
    for i, node in enumerate(placeholders):
        ref = storage(node)
        if ref is not None:
            owners.setdefault(ref, i)
    if not owners:
        return None
    bumps: Dict[int, int] = {}
    for node in gm.graph.nodes:
        written = None
        if node.op == "call_method" and node.target.endswith("_") \
                and not node.target.endswith("__") and node.target not in _NOT_WRITES:
            written = node.args[0]
        elif node.op == "call_function" and node.target is operator.setitem:
            written = node.args[0]
        elif node.op == "call_function" and isinstance(node.kwargs.get("out"), torch.fx.Node):
            written = node.kwargs["out"]
        elif node.op == "call_function" and getattr(node.target, "__name__", "").endswith("_") \
                and not getattr(node.target, "__name__", "").endswith("__") and node.args:
            written = node.args[0]
        index = owners.get(storage(written)) if written is not None else None
        if index is not None:
            bumps[index] = bumps.get(index, 0) + 1
    return bumps


def keep_input_versions(runner: Callable, keep_mutations: bool,
                        bumps: Optional[Dict[int, int]] = None) -> Callable:
    """``runner``, wrapped in :class:`KeepInputVersions` where it mutates inputs (read while
    AOT compiles the graph). ``bumps``: :func:`eager_version_bumps` of Dynamo's graph (None:
    one bump per mutated input, AOT's count)."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None or not keep_mutations:
        return runner
    mutated = [i for i, info in enumerate(meta.input_info) if info.mutates_data]
    if not mutated:
        return runner
    aot = list(meta.mutated_graph_handled_indices_seen_by_autograd or ())
    counts = {i: max((bumps or {}).get(i, 1), 1) for i in mutated}
    return KeepInputVersions(runner, counts, aot)


def compile_with_aot(gm, example_inputs, compiler, decompositions: Dict):
    """AOT autograd with our compilers; inference graphs keep input mutations in-graph. An
    inference graph whose AOT runtime wrapper has nothing to do is called without it after
    its first call (:func:`wrap`).

    Inputs given as lists (compiled autograd's graph takes its tensors as one list) are
    flattened first, as Dynamo's own ``aot_autograd`` backend does: AOT takes only flat
    tensors, SymInts and opaque objects."""
    from torch._functorch.aot_autograd import aot_module_simplified

    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        from torch._dynamo.utils import flatten_graph_inputs

        return flatten_graph_inputs(
            gm, example_inputs,
            lambda flat_gm, flat_inputs: compile_with_aot(flat_gm, flat_inputs, compiler,
                                                          decompositions))

    keep = compiler.config.get("experimental_config.keep_inference_input_mutations")
    kept = ineligible(gm, example_inputs)
    compiler.version_bumps = eager_version_bumps(gm)
    seen: Dict[str, Any] = {}

    def inference(g, ex):
        runner = compiler.inference(g, ex)
        seen["why"] = kept or trivial_inference(g, len(example_inputs))
        seen["name"] = getattr(runner, "name", "graph")
        if seen["why"] is None:
            seen["marks"] = dynamic_marks()
            seen["runner"] = runner
        return runner

    aot_forward = aot_module_simplified(
        gm, example_inputs,
        fw_compiler=compiler.forward,
        bw_compiler=compiler.backward,
        inference_compiler=inference,
        decompositions=decompositions,
        keep_inference_input_mutations=keep,
    )
    if "runner" not in seen:
        if "why" in seen:
            log.debug("%s: called through AOT's runtime wrapper: %s", seen["name"], seen["why"])
        return aot_forward
    return wrap(aot_forward, seen["runner"], seen["name"], seen["marks"])
