"""Inductor kernels under our pipeline (``experimental_config.inductor_kernels``, ACL modes).

The graph our passes produced (collectives as ``_c10d_functional`` / ``torchair_dist`` ops,
overlap schedule, re-inplaced collectives) is handed to inductor's per-graph compiler
(``compile_fx_inner``) instead of being run op by op. Inductor fuses and generates the compute
kernels (C++ on CPU, Triton on CUDA); the collectives stay the same ops in the same program
order: inductor lowers ``_c10d_functional`` ops itself and runs ``torchair_dist::`` ops as
extern (fallback) kernels. The cross-rank check, capture (the ACL runner replays the compiled
forward on a device with graph capture) and our compile cache (it stores the post-pass graph;
a warm start recompiles it with inductor) stay ours.

Before inductor sees the graph it is re-traced with inductor's decomposition table (our AOT
trace used only our own decompositions); the re-trace runs the nodes in graph order, so the
schedule is kept. The pipeline's ``inductor_kernels`` stage (:func:`.compile.inductor_step`)
runs it on CPU and CUDA; on NPU the option is named in the pipeline's warning (GE fuses there).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, List

import torch
import torch.fx

from ...errors import TorchairDistError
from ..context import GraphContext, own_copy

log = logging.getLogger("torchair_dist")


class InductorKernelsError(TorchairDistError):
    """Inductor could not compile the post-pass graph of a torchair_dist compile."""


def _needs_decomposition(gm: torch.fx.GraphModule, table) -> bool:
    return any(n.op == "call_function" and n.target in table for n in gm.graph.nodes)


def _inductor_graph(gm: torch.fx.GraphModule, example_inputs) -> torch.fx.GraphModule:
    """``gm`` with the ops inductor wants decomposed decomposed (node order kept)."""
    from torch._guards import detect_fake_mode
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    table = select_decomp_table()
    if not _needs_decomposition(gm, table):
        return gm
    fake_mode = detect_fake_mode(example_inputs)
    with fake_mode if fake_mode is not None else torch._subclasses.FakeTensorMode():
        return make_fx(gm, decomposition_table=table, tracing_mode="real")(*example_inputs)


_WAIT = torch.ops._c10d_functional.wait_tensor.default


def waited_ops(gm: torch.fx.GraphModule) -> List[torch._ops.OpOverload]:
    """The ops whose results ``gm`` waits on (``wait_tensor(op(...))``), in graph order."""
    found: List[torch._ops.OpOverload] = []
    for node in gm.graph.find_nodes(op="call_function", target=_WAIT):
        src = node.args[0]
        if isinstance(src, torch.fx.Node) and isinstance(src.target, torch._ops.OpOverload) \
                and src.target not in found:
            found.append(src.target)
    return found


def check_waits(graph: torch.fx.Graph, graph_name: str) -> None:
    """Raise :class:`InductorKernelsError` when a node reads a waited collective's result
    before that result's ``wait_tensor`` (it would read a buffer the transport is still
    writing)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for wait in graph.find_nodes(op="call_function", target=_WAIT):
        src = wait.args[0]
        if not isinstance(src, torch.fx.Node):
            continue
        early = [u for u in src.users if u is not wait and order[u] < order[wait]
                 and u.target is not _WAIT]
        if early:
            raise InductorKernelsError(
                f"graph {graph_name}: {early[0].format_node()} reads the result of "
                f"{src.format_node()} before its wait ({wait.name}): it would read a buffer "
                f"the collective is still writing")


_async_lowered: List[torch._ops.OpOverload] = []  # ops this module gave an inductor lowering


def register_async_collectives(ops) -> List[torch._ops.OpOverload]:
    """Give each op of ``ops`` that returns one tensor and that inductor has no lowering for
    (or only the plain fallback it makes for an unknown op) an inductor lowering as a collective
    kernel (``ir._CollectiveKernel``), so that its
    ``wait_tensor`` keeps its input from being written or reused until the wait and its
    output from being read before it. Returns the ops newly registered."""
    from torch._inductor import ir
    from torch._inductor.lowering import fallbacks, lowerings, register_lowering

    added = []
    for op in ops:
        returns = op._schema.returns
        if op in _async_lowered or len(returns) != 1 or str(returns[0].type) != "Tensor":
            continue
        if op in lowerings and op not in fallbacks:
            continue  # inductor's own lowering (its _c10d_functional collectives)
        # (a fallback inductor made when an earlier compile met the op is replaced)

        def lower(*args, _op=op):
            return ir.TensorBox.create(ir._CollectiveKernel.create_out_of_place(_op, *args))

        register_lowering(op, type_promotion_kind=None)(lower)
        _async_lowered.append(op)
        added.append(op)
        log.debug("inductor lowers %s as an asynchronous collective", op)
    return added


def _wait_check_pass(graph_name: str):
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class WaitCheckPass(CustomGraphPass):
        """Inductor post-grad pass: :func:`check_waits` on inductor's graph; its uuid keys
        inductor's graph cache to this module's source."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            check_waits(graph, graph_name)

        def uuid(self):
            return get_hash_for_files((__file__,))

    return WaitCheckPass()


def compile_forward(ctx: GraphContext, keep_schedule: bool) -> Callable[[List[Any]], Any]:
    """Inductor-compiled boxed forward of ``ctx.gm`` (same inputs/outputs as the graph);
    inductor's passes rewrite a copy of the graph, never ``ctx.gm`` itself. ``keep_schedule``
    (the stage passes ``overlap_collectives``): inductor keeps the graph's placement of waits."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx_inner

    try:
        gm = _inductor_graph(own_copy(ctx.gm), ctx.example_inputs)
        check_waits(gm.graph, ctx.graph_name)
        register_async_collectives(waited_ops(gm))
        patch = {} if inductor_config.post_grad_custom_pre_pass is not None else \
            {"post_grad_custom_pre_pass": _wait_check_pass(ctx.graph_name)}
        if keep_schedule:
            # inductor's peak-memory reordering would move each wait up to its collective
            # (the input a collective keeps alive until its wait counts as memory): keep the
            # overlap pass's schedule, compute between a collective and its wait
            patch["reorder_for_peak_memory"] = False
        with inductor_config.patch(patch):
            compiled = compile_fx_inner(gm, list(ctx.example_inputs),
                                        static_input_idxs=list(ctx.static_input_indices),
                                        is_inference=ctx.is_inference)
    except TorchairDistError:
        raise
    except Exception as exc:
        raise InductorKernelsError(
            f"inductor could not compile graph {ctx.graph_name} "
            f"(experimental_config.inductor_kernels=True): {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}; set the option "
            f"to False to run the graph's ops one by one") from exc

    # Boxed: it clears the list it is given, as AOT's callers allow; the capture graphs and
    # the runner always hand it a list of their own.
    compiled._boxed_call = True
    log.debug("%s: compute kernels generated by inductor", ctx.graph_name)
    return compiled
