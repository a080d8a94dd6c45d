"""``debug.fx_summary``: a csv of the ops of each graph, and whether max-autotune converts them.

TorchAir writes this summary so a user can see, before compiling, which ops a model lowers to
and which lack a GE converter. One file per graph and rank:
``fx_summary_{graph}_rank_{r}_pid_{pid}_ts_{time}.csv`` in the working directory, with columns
``target, kind, count, ge_converter, example_input, example_output``. With
``debug.fx_summary.skip_compile`` (the default, as in TorchAir) the graph then runs eagerly
instead of being compiled by the mode's backend (the route's ``summary_skips_compile`` stage).
"""
from __future__ import annotations

import collections
import csv
import logging
from typing import Any, Dict, List

import torch
import torch.fx

from ..base.dumps import dump_file_name

log = logging.getLogger("torchair_dist")

COLUMNS = ["target", "kind", "count", "ge_converter", "example_input", "example_output"]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.fx.Node):
        return _describe(value.meta.get("val"))
    return type(value).__name__ if value is not None else ""


def summarize(gm: torch.fx.GraphModule) -> List[Dict[str, str]]:
    """One row per distinct call target, in first-use order."""
    from ..backends.ge.converters import lookup

    rows: Dict[str, Dict[str, Any]] = collections.OrderedDict()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        key = str(node.target)
        row = rows.get(key)
        if row is None:
            kind = ("aten" if key.startswith("aten.") else
                    "collective" if "c10d" in key or key.startswith("torchair_dist.") else
                    "op" if isinstance(node.target, torch._ops.OpOverload) else "python")
            row = rows[key] = {
                "target": key, "kind": kind, "count": 0,
                "ge_converter": "yes" if lookup(node.target) is not None else "no",
                "example_input": _describe(list(node.args)),
                "example_output": _describe(node.meta.get("val"))}
        row["count"] += 1
    return list(rows.values())


def write_summary(gm: torch.fx.GraphModule, graph_name: str, rank: int) -> str:
    path = dump_file_name(None, f"fx_summary_{graph_name}", rank, "csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(summarize(gm))
    log.info("rank %d: op summary of %s written to %s", rank, graph_name, path)
    return path


def summary_stage(ctx):
    """The ``fx_summary`` stage of the route: write the summary; the route goes on (the
    ``summary_skips_compile`` stage runs the graph eagerly with ``skip_compile``)."""
    write_summary(ctx.gm, ctx.graph_name, ctx.rank)
    return ctx
