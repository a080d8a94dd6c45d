"""The input policy of a capture: which inputs are copied into captured buffers, and the buffers.

As in TorchAir's ACL graph: parameters and buffers (static inputs) are used in place, never
copied; inputs the graph mutates are used in place too (the graph writes them, so they are
"written back" by construction; one that arrives at a new address is recaptured, see
:mod:`.keys`); every other tensor input is copied into the captured buffer before each replay
(``debug.aclgraph.clone_input``, the default). With ``clone_input=False`` the graph is
captured on the caller's tensors and only an input that arrives at another address is copied.

The buffers (:class:`InputBuffers`): one storage per input position, sized for the largest
capture and viewed by every smaller one, so captures of sizes met largest first (or declared
``capture_sizes``, captured largest first) share one buffer per input. A capture is bound to
its buffers' addresses, so sizes met smallest first each keep their own: past 1.25x of what
the largest capture's alone take, one warning says so.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Sequence

import torch

from ...base.layout import copy_into, written_part
from ...platform.interfaces import InputFeed

# input buffers held beyond this multiple of the largest capture's: one warning per graph
INPUT_BYTES_RATIO = 1.25


class InputBuffers:
    """The captured input buffers of one graph (module doc)."""

    def __init__(self, graph: str, user_indices: Sequence[int], clone_input: bool):
        self.graph = graph
        self.user_indices = tuple(user_indices)
        self.clone_input = clone_input
        self._storage: Dict[int, Any] = {}  # position -> its shared buffer storage
        self._dtypes: Dict[int, Any] = {}
        self._warned = False

    def for_capture(self, args: Sequence[Any]) -> InputFeed:
        """The buffers a capture on ``args`` is made on (every position: the copied ones in
        this policy's buffers, holding ``args``' values; the others ``args``' own tensors)
        and how a replay feeds them."""
        buffers: List[Any] = list(args)
        copied = [i for i in self.user_indices if isinstance(args[i], torch.Tensor)]
        if self.clone_input:
            for i in copied:
                buffers[i] = self._buffer(i, args[i])
        expanded = tuple(i for i in copied if written_part(buffers[i]) is not buffers[i])
        return InputFeed(buffers, tuple(i for i in copied if i not in expanded),
                         tuple((i, written_part) for i in expanded), self.clone_input,
                         self.clone_input)

    def _buffer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Position ``i``'s captured buffer for ``x``: a view, with ``x``'s layout, of one
        storage per position, grown only when a larger capture needs it."""
        extent = 0 if x.numel() == 0 else 1 + sum(
            (n - 1) * st for n, st in zip(x.size(), x.stride()))
        need = (x.storage_offset() + extent) * x.element_size()
        storage = self._storage.get(i)
        if (storage is None or storage.nbytes() < need or storage.device != x.device
                or self._dtypes.get(i) != x.dtype):
            storage = torch.empty(max(need // x.element_size(), 1), dtype=x.dtype,
                                  device=x.device).untyped_storage()
            self._storage[i] = storage
            self._dtypes[i] = x.dtype
        buf = torch.empty((0,), dtype=x.dtype, device=x.device).set_(
            storage, x.storage_offset(), x.size(), x.stride())
        if torch._debug_has_internal_overlap(written_part(buf)) == 1:
            buf = torch.empty_like(x, memory_format=torch.contiguous_format)
        copy_into(buf, x)
        return buf

    def held_bytes(self, feeds: Sequence[InputFeed]) -> int:
        """The bytes the buffers of the captures with ``feeds`` hold (shared storages once)."""
        if not self.clone_input:
            return 0
        held: Dict[int, int] = {}
        for feed in feeds:
            for i in feed.positions:
                buf = feed.buffers[i]
                if isinstance(buf, torch.Tensor):
                    storage = buf.untyped_storage()
                    held[storage.data_ptr()] = storage.nbytes()
        return sum(held.values())

    def check(self, held: int, captures: int) -> None:
        """Warn once when the captures' buffers hold more than 1.25x what the largest
        capture's alone take (sizes met smallest first, see the module doc)."""
        largest = sum(s.nbytes() for s in self._storage.values())
        if self._warned or not largest or held <= INPUT_BYTES_RATIO * largest:
            return
        self._warned = True
        warnings.warn(
            f"graph {self.graph}: the input buffers of its {captures} captures hold "
            f"{held} bytes, {held / largest:.2f}x the {largest} bytes the largest capture's "
            f"alone take: batch sizes met smallest first each keep the buffer they were "
            f"captured on. Declare npugraphex_config.capture_sizes (captured largest first at "
            f"the first call, every capture viewing one buffer per input), or call the largest "
            f"size first.", UserWarning, stacklevel=5)

    def release(self) -> None:
        self._storage.clear()
        self._dtypes.clear()
