"""Helpers shared by the indexing converters (no converter is registered here)."""
from __future__ import annotations

from typing import Any, List, Sequence

import torch


def int_indices(cx, indices: Sequence[Any]) -> List[Any]:
    """Advanced indices with every boolean mask (k dims) replaced by the k int64 coordinate
    vectors of its True elements (``NonZero`` transposed + ``Unpack``), as torch defines it;
    GE's Index/IndexPutV2 take int64 indices only."""
    out: List[Any] = []
    for t in indices:
        if t is None or t.dtype != torch.bool:
            out.append(t)
            continue
        k = len(t.shape)
        coords = cx.emit1("NonZero", [("x", t)], {"transpose": True, "dtype": torch.int64},
                          (torch.int64, (k, -1)))
        out.extend(cx.emit("Unpack", [("x", coords)], {"num": k, "axis": 0},
                           [("y", [(torch.int64, (-1,))] * k)]))
    return out
