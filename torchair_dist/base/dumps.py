"""Debug outputs shared by the backends: per-rank dump file names, FX dumps, data dumps."""
from __future__ import annotations

import datetime
import logging
import os
from typing import Any, Callable, List, Optional

import torch
import torch.fx

from ..errors import ConfigError

log = logging.getLogger("torchair_dist")


def dump_file_name(directory: Optional[str], name: str, rank: int, suffix: str) -> str:
    """``{dir or .}/{name}_rank_{r}_pid_{pid}_ts_{UTC timestamp}.{suffix}`` (dir created)."""
    directory = directory or os.getcwd()
    os.makedirs(directory, exist_ok=True)
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%S%f")
    return os.path.join(directory, f"{name}_rank_{rank}_pid_{os.getpid()}_ts_{ts}.{suffix}")


def dump_fx_graph(gm: torch.fx.GraphModule, kind: str, directory: Optional[str], name: str,
                  rank: int, mode: str, extra_source: str = "") -> str:
    """Write ``gm`` as ``kind`` ``py`` (readable code, plus ``extra_source``) or ``txt`` (the
    graph IR) into ``directory``; returns the file written. The caller (a dump stage) passes
    its options' values."""
    if kind not in ("py", "txt"):
        raise ConfigError(f"debug.graph_dump.type={kind!r} is a GE format; in "
                          f"{mode} mode use 'py' or 'txt'")
    path = dump_file_name(directory, name, rank, kind)
    if kind == "py":
        text = gm.print_readable(print_output=False)
        if extra_source:
            text += "\n\n# ---- the forward the runner calls ----\n" + extra_source
    else:
        text = str(gm.graph)
    with open(path, "w") as f:
        f.write(text)
    log.info("graph dumped to %s", path)
    return path


class DataDumper(torch.fx.Interpreter):
    """Runs a graph node by node and saves each selected node's tensor outputs.

    Files: ``{path}/rank_{r}/{graph}/{index:04d}_{node}[_{k}].{npy|pt}``; ``filter(node)``
    chooses the nodes (default: every op). For precision hunts against eager.
    """

    def __init__(self, gm, directory: str, kind: str, node_filter: Optional[Callable] = None):
        super().__init__(gm, garbage_collect_values=True)
        self.directory, self.kind, self.node_filter = directory, kind, node_filter
        self.index = 0
        self.saved: List[str] = []

    def run_node(self, n):
        result = super().run_node(n)
        if n.op == "call_function" and (self.node_filter is None or self.node_filter(n)):
            self._save(n.name, result)
        self.index += 1
        return result

    def _save(self, name: str, value: Any) -> None:
        tensors = value if isinstance(value, (list, tuple)) else [value]
        for k, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                continue
            suffix = f"_{k}" if len(tensors) > 1 else ""
            path = os.path.join(self.directory, f"{self.index:04d}_{name}{suffix}.{self.kind}")
            data = t.detach().cpu()
            if self.kind == "npy":
                import numpy

                numpy.save(path, data.float().numpy() if data.dtype == torch.bfloat16
                           else data.numpy())
            else:
                torch.save(data, path)
            self.saved.append(path)


def data_dump_runner(gm: torch.fx.GraphModule, config, name: str, rank: int,
                     original: Optional[torch.fx.GraphModule] = None):
    """A boxed runner that executes a graph through :class:`DataDumper` on every call.

    ``dump_config.data_dump_stage`` chooses the graph: ``optimized`` (default) ``gm``, the
    graph after every pass; ``original`` the graph before the passes (``original``, which the
    caller kept when the stage table's ``keeps_original`` said so)."""
    stage = config.get("dump_config.data_dump_stage")
    if stage == "original":
        if original is None:
            raise ConfigError("data_dump_runner: dump_config.data_dump_stage='original' needs "
                             "the graph from before the passes (original=)")
        gm = original
    directory = os.path.join(config.get("debug.data_dump.path")
                             or os.path.join(os.getcwd(), "data_dump"),
                             f"rank_{rank}", name)
    os.makedirs(directory, exist_ok=True)
    kind, node_filter = config.get("debug.data_dump.type"), config.get("debug.data_dump.filter")

    def run(args):
        return DataDumper(gm, directory, kind, node_filter).run(*args)

    run._boxed_call = True
    run.dump_directory = directory
    run.dump_stage = stage
    log.info("%s: data dump of the %s graph to %s", name, stage, directory)
    return run


def data_dump_stage(ctx):
    """The ``data_dump`` stage of the route: a runner that dumps every node's outputs."""
    return data_dump_runner(ctx.gm, ctx.config, ctx.graph_name, ctx.rank, ctx.original_gm)
