"""Device-graph capture rules: what a CUDA/NPU graph cannot capture, found before capturing.

A device graph records kernels on a stream; anything that needs the host in the middle of the
graph cannot be captured: a host sync (``.item()``, ``.tolist()``, an op whose output size
depends on the data such as ``nonzero``), a copy between the host and the device, a stream
``synchronize``, or a host-side call inside an op's kernel (``dist.barrier``). A graph that
breaks a rule is not captured: it runs uncaptured, with one warning naming the op and the
user's source line (:func:`skip_message`).

:func:`find_uncapturable` checks the FX graph statically; a CPU stand-in that really runs the
capture also catches the host-side calls made inside opaque kernels (``cpu/record.py``).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.fx

from ...platform.interfaces import CaptureSkipped, Uncapturable  # noqa: F401  (the runner's)
from ...streams.stream_ops import NAMESPACE as STREAMS_NS
from ...passes.stream_rewrite import where

_COPY_OPS = ("aten._to_copy.default", "aten.copy_.default", "aten.copy.default",
             "prims.device_put.default", "aten._to_copy.out")


def skip_message(graph_name: str, found: Uncapturable) -> str:
    return (f"torchair_dist: graph {graph_name} is not captured and runs uncaptured (no "
            f"device-graph replay): {found.op} {found.why}, at {found.where}. Move it out of "
            f"the compiled region (or compute it on the device) to get the graph captured.")


def _device_of(value) -> Optional[torch.device]:
    return value.device if isinstance(value, torch.Tensor) else None


def _crosses_devices(node: torch.fx.Node) -> bool:
    out = _device_of(node.meta.get("val"))
    for arg in node.all_input_nodes:
        src = _device_of(arg.meta.get("val"))
        if src is not None and out is not None and src.type != out.type:
            return True
    return False


def _data_dependent(node: torch.fx.Node) -> bool:
    """The op needs its input data on the host: always for ``data_dependent_output`` ops
    (``.item()``) and ``dynamic_output_shape`` ops (``nonzero``, ``unique``); for the
    ``index`` family only where this call's output size is unknown until run time (a
    boolean mask: unbacked symbols), not with integer indices (a known shape)."""
    tags = node.target.tags
    if torch.Tag.data_dependent_output in tags:
        return True
    if torch.Tag.dynamic_output_shape not in tags:
        return False
    if not target_name(node.target).startswith("index"):
        # nonzero, masked_select, unique ...: the size always comes from the data, even where
        # a torch._check made the graph's example value concrete (a capture would freeze it
        # and skip the check on every replay)
        return True
    val = node.meta.get("val")
    if val is None:
        return True  # no shape information: assume the worst
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(val))


def target_name(target) -> str:
    return target._schema.name.split("::")[-1]


def node_rule(node: torch.fx.Node) -> Optional[Uncapturable]:
    """The rule ``node`` breaks, or None."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    target = node.target
    name = f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    if _data_dependent(node):
        return Uncapturable(name, "needs the tensor data on the host (a host sync: its "
                                  "result or output size depends on the data)", where(node))
    if target.namespace == STREAMS_NS and target._schema.name.endswith("synchronize"):
        return Uncapturable(name, "makes the host wait for a stream (a host sync)", where(node))
    if name in _COPY_OPS and _crosses_devices(node):
        return Uncapturable(name, "copies between the host and the device", where(node))
    return None


def find_uncapturable(gm: torch.fx.GraphModule) -> Optional[Uncapturable]:
    """The first node of ``gm`` a device graph cannot capture, or None."""
    for node in gm.graph.nodes:
        found = node_rule(node)
        if found is not None:
            return found
    return None
