"""A replay's outputs: handed out without copies, and loud once a later replay overwrote them.

A captured graph writes its outputs into memory of its pool: the next replay of the graph (of any
of its captures, which share the pool) overwrites them. The runner hands out fresh tensor
objects over that memory on each replay (no copy), and when the graph replays again it turns
the objects it handed out before into :class:`StaleOutput`: any torch operation on one (reading
its values, printing it, passing it on) raises :class:`StaleOutputError` naming the graph,
instead of reading values of another step. This is what torch's CUDA graph trees do with a
storage access error; a CPU build has no such hook, so the tensor's class is switched instead,
which costs nothing until it happens. Views the caller made of an output before the next replay
are not tracked (they share the overwritten memory). ``clone_output=True`` hands out copies the
caller may keep.
"""
from __future__ import annotations

import weakref
from typing import Any, List, Sequence

import torch

from ...errors import TorchairDistError


class StaleOutputError(TorchairDistError, RuntimeError):
    """An output of a captured graph was used after a later replay overwrote it."""


class StaleOutput(torch.Tensor):
    """The class an overwritten output is switched to: every torch operation on it raises."""

    graph_name = "?"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        graph = next((getattr(a, "_stale_graph", "?") for a in args
                      if isinstance(a, StaleOutput)), "?")
        raise StaleOutputError(
            f"an output of captured graph {graph} was used after a later replay of that graph "
            f"overwrote it (outputs live in the graph's memory pool until its next replay). "
            f"Use it before the next call, clone() it, or set "
            f"config.debug.aclgraph.enable_output_clone=True")


class HandedOut:
    """The output objects a runner handed out at its last replay (weakly held)."""

    __slots__ = ("graph_name", "refs")

    def __init__(self, graph_name: str):
        self.graph_name = graph_name
        self.refs: List[weakref.ref] = []

    def replace(self, outputs: Sequence[Any], pool_positions: Sequence[int]) -> List[Any]:
        """Mark what was handed out before as stale; fresh objects over ``outputs`` at
        ``pool_positions`` (the others are handed out as they are)."""
        for ref in self.refs:
            old = ref()
            if old is not None and type(old) is torch.Tensor:
                old.__class__ = StaleOutput
                old._stale_graph = self.graph_name
        result = list(outputs)
        refs = []
        for i in pool_positions:
            fresh = result[i].detach()
            result[i] = fresh
            refs.append(weakref.ref(fresh))
        self.refs = refs
        return result
