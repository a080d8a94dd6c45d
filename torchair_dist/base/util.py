"""Ground-floor helpers used across packages (imports nothing of torchair_dist).

- :func:`source_line`: the user's source line of an FX node, for error messages;
- :func:`op_name`: ``ns::name`` of an op target; :func:`namespace_and_name`: the two parts;
- :func:`current_rank_and_world`: rank and world size of the default process group;
  :func:`calling_rank`: the rank per-rank state is keyed by (a thread's, with thread ranks);
  :func:`ranks_are_threads`: the default group is torch's threaded one;
- :func:`input_device`: the device of a graph's tensor inputs;
- :func:`on_dynamo_reset`: state that ``torch._dynamo.reset()`` clears; :data:`PROCESS_STATE`:
  every piece of module-level state, and whether ``torch._dynamo.reset()`` clears it or why it
  lives as long as the process (``tests/unit/test_process_state.py`` keeps it complete).
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

_LIBRARY_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                 os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def source_line(node: torch.fx.Node) -> str:
    """``File "...", line N, in f: code`` of the innermost frame of ``node``'s stack trace that
    lies outside torch and torchair_dist (the user's line), else the innermost frame, else the
    node's name."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    frames = [i for i, line in enumerate(trace) if line.strip().startswith("File ")]
    outside = [i for i in frames if not any(d in trace[i] for d in _LIBRARY_DIRS)]
    for i in reversed(outside or frames):
        line = trace[i].strip()
        code = trace[i + 1].strip() if i + 1 < len(trace) else ""
        return f"{line}: {code}" if code else line
    return f"node {node.name}"


def op_name(target: Any) -> str:
    """``ns::name`` of an OpOverload or OpOverloadPacket target, else ''."""
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name
    return ""


def namespace_and_name(target: Any) -> Tuple[Optional[str], Optional[str]]:
    """(namespace, op name) of an OpOverload or OpOverloadPacket target, else (None, None)."""
    name = op_name(target)
    if not name:
        return None, None
    namespace, _, short = name.partition("::")
    return namespace, short


def calling_rank() -> Optional[int]:
    """The global rank of the calling thread's default process group; None when it has none.

    Per-rank state (the cross-rank check's sequence, the failure board, shared-memory channels)
    is keyed by it, never by the process: with torch's threaded process group (ranks as threads
    of one process, what PyTorch's own distributed tests use) each thread is a rank of its own,
    and ``torch.distributed`` answers each thread with its group's rank."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


def ranks_are_threads() -> bool:
    """Whether the calling thread's default group is torch's threaded process group (the
    ``threaded`` backend of ``torch.testing._internal.distributed.multi_threaded_pg``: the ranks
    are threads of this process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        return str(dist.get_backend()) == "threaded"
    except Exception:  # noqa: BLE001 - a group without a backend name
        return False


def current_rank_and_world() -> Tuple[int, int]:
    """(rank, world_size) of the default process group, (0, 1) when none is initialised."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def resolve_dotted(name: str) -> Any:
    """The object a dotted name such as ``torch.nn.functional.gelu`` or ``torch._dynamo`` names
    (the longest importable module, then attributes); None when it does not exist."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def input_device(example_inputs: Sequence[Any]) -> torch.device:
    """The device of the first real tensor input (CPU when there is none)."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            return x.device
    return torch.device("cpu")


# -- process state that torch._dynamo.reset() clears ------------------------------------------
_resetters: List[Callable[[], None]] = []


def on_dynamo_reset(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run when ``torch._dynamo.reset()`` resets the backends it used."""
    _resetters.append(fn)
    return fn


# "module:name" -> "reset" (cleared by torch._dynamo.reset(), through the backend's ``reset``
# hook) or why it is process-wide. Uppercase tables filled once at import are not listed.
RESET = "reset"
PROCESS_STATE = {
    "torchair_dist.backends.ge.converters.registry:_unchecked":
        "converters registered since their GE types were last checked against the registry "
        "(registration is process-wide, like the converter table itself)",
    "torchair_dist.backends.aclgraph.report:_counts": RESET,
    "torchair_dist.backends.aclgraph.report:_reasons": RESET,
    "torchair_dist.backends.aclgraph.report:_cells": RESET,
    "torchair_dist.backends.aclgraph.report:_values": RESET,
    "torchair_dist.backends.aclgraph.report:_summary": RESET,
    "torchair_dist.backends.aclgraph.report:_events_added": RESET,
    "torchair_dist.backends.aclgraph.compile:_SHARED_POOLS": RESET,
    "torchair_dist.pipeline.route:_graph_ids": RESET,
    "torchair_dist.pipeline.route:_warned_old_torch":
        "the once-per-process warning that thread ranks are tested from torch 2.13 (the torch "
        "version cannot change within the process)",
    "torchair_dist.backends.aclgraph.inductor_kernels:_async_lowered":
        "the ops given an inductor lowering: inductor's lowering table lives as long as the "
        "process",
    "torchair_dist.backends.aclgraph.capture:_CAPTURE_STREAMS":
        "one capture stream per device, as torch's own graph capture keeps one",
    "torchair_dist.collectives.consistency:_check_counts":
        "the cross-rank check's sequence numbers, per rank (thread ranks share the process), "
        "must stay in step on every rank; a rank's torch._dynamo.reset() alone would put it "
        "out of step (reset_check_sequence() on every rank starts a new sequence)",
    "torchair_dist.collectives.failures:_epochs":
        "the failure board's epoch per rank, in step on every rank (reset_check_sequence)",
    "torchair_dist.collectives.failures:_acknowledged":
        "peer failures each rank of this process already reported (failure board, per rank)",
    "torchair_dist.collectives.failures:_published":
        "the ranks of this process that published a failure record",
    "torchair_dist.collectives.failures:_hook_installed": "an exit hook, installed once",
    "torchair_dist.collectives.failures:_run_fault_listeners":
        "transports told of a run-time collective fault (registered once, at their import)",
    "torchair_dist.collectives.failures:_probed":
        "the last c10d store probed and whether it carries keys (one probe, one log line)",
    "torchair_dist.collectives.groups:_hccl_warned": "warn once per process",
    "torchair_dist.collectives.remap:_warned_outside": "warn once per process",
    "torchair_dist.collectives.remap:_installed":
        "the torch.distributed functions replaced at import (remap.install())",
    "torchair_dist.pipeline.route:_observers": "the open record_graphs() blocks (context-managed)",
    "torchair_dist.cpu.shm:_channels":
        "shared-memory channels belong to process groups and ranks, not to compiled graphs "
        "(shm.reset() after destroying the groups)",
    "torchair_dist.cpu.shm:_by_group": "as cpu.shm:_channels",
    "torchair_dist.pipeline.torch_patches:_applied": "platform patches applied once per process",
    "torchair_dist.streams.api:_tagged_events":
        "tagged events the user created by tag: they live as long as the process, as "
        "TorchAir's do",
    "torchair_dist.streams.runtime:_streams": "the user's tagged streams (as streams.api)",
    "torchair_dist.streams.runtime:_events": "the user's tagged events (as streams.api)",
    "torchair_dist.streams.runtime:_bound": "tags bound to user stream objects",
    "torchair_dist.streams.runtime:_bound_tags": "as streams.runtime:_bound",
    "torchair_dist.base.util:_resetters": "the functions torch._dynamo.reset() calls",
    "torchair_dist.passes.common:_warned_graph_only": "warn once per process",
    "torchair_dist.passes.scope_attrs:_warned": "warn once per process",
    "torchair_dist.streams.scope_ops:_libs": "the torch.library fragments defining TorchAir's "
                                             "scope ops, kept alive for the process",
}


def reset_process_state() -> None:
    """Reset every registered counter/cache (called through the backend's ``reset``)."""
    for fn in _resetters:
        fn()


def without_function_modes(fn: Callable, *args):
    """``fn(*args)`` with no ``TorchFunctionMode`` on the stack.

    The CPU stand-ins for a device graph (the record replay, the GE reference executor) call
    torch's Python bindings, which run the user's torch-function modes; a device replays its
    graph without them, and Dynamo already traced what a mode did into the graph. Dynamo
    leaves the modes active while compiled code runs, so a stand-in under one takes this path
    (``torch._C._is_torch_function_mode_enabled()`` tells it)."""
    modes = []
    while torch._C._len_torch_function_stack() > 0:
        modes.append(torch._C._pop_torch_function_stack())
    try:
        return fn(*args)
    finally:
        for mode in reversed(modes):
            torch._C._push_on_torch_function_stack(mode)
