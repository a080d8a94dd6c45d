"""Ground-floor helpers used across packages (imports nothing of torchair_dist).

- :func:`source_line`: the user's source line of an FX node, for error messages;
- :func:`op_name`: ``ns::name`` of an op target; :func:`namespace_and_name`: the two parts;
- :func:`current_rank_and_world`: rank and world size of the default process group;
- :func:`input_device`: the device of a graph's tensor inputs;
- :func:`on_dynamo_reset`: state that ``torch._dynamo.reset()`` clears.
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(__file__)) + os.sep,
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


def current_rank_and_world() -> Tuple[int, int]:
    """(rank, world_size) of the default process group, (0, 1) when none is initialised."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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
