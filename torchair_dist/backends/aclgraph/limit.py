"""The capture limit policy (``debug.aclgraph.static_capture_size_limit``).

A graph holds at most that many captures. A call with a new key past the limit runs eagerly,
that call only, counted in the capture report (``capture_limit``) and named in one warning per
graph; the keys captured keep replaying (TorchAir turns the whole graph eager here).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, List

from . import report


class CaptureLimit:
    def __init__(self, graph: str, limit: int):
        self.graph = graph
        self.limit = limit
        self._warned = False

    def allows(self, captured: int) -> bool:
        """Whether a graph holding ``captured`` captures may make one more."""
        return captured < self.limit

    def past(self, key_name: str, captured: int, eager: Callable[[List[Any]], Any], args):
        """A call of a new key past the limit: ``eager(args)``, counted, warned once."""
        report.capture_limit(self.graph, key_name, self.limit)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"The static_capture_size_limit reached: graph {self.graph} already holds "
                f"{captured} captures (config.debug.aclgraph.static_capture_size_limit="
                f"{self.limit}); calls with a new graph key run eagerly, the captured "
                f"keys keep replaying. Raise the limit, declare npugraphex_config.capture_sizes "
                f"with pad_to_capture_size, or mark fewer dimensions dynamic.", UserWarning,
                stacklevel=5)
        return eager(args)
