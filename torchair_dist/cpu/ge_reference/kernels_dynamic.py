"""Torch implementations of GE's UnsortedSegment{Sum,Prod,Max,Min} for the reference executor
(see :mod:`.kernels`): the segment reductions behind ``segment_reduce`` and ``embedding_bag``."""
from __future__ import annotations

import torch

from .kernels import kernel
from .opspec import GeRuntimeError, OpSpec


_SEGMENT = {"UnsortedSegmentSum": "sum", "UnsortedSegmentProd": "prod",
            "UnsortedSegmentMax": "amax", "UnsortedSegmentMin": "amin"}


@kernel(*_SEGMENT)
def _unsorted_segment(spec: OpSpec):
    """y[k] = reduction of x[j] over the j with segment_ids[j] == k (segment_ids covers x's
    leading dims), k < num_segments; a negative id drops its value, an id >= num_segments is an
    error. An empty segment holds 0 (sum), 1 (prod), the dtype's lowest (max) or highest (min)
    value, as TensorFlow defines these ops."""
    how = _SEGMENT[spec.type]

    def run(x, segment_ids, num_segments):
        k = int(num_segments.reshape(()).item())
        ids = segment_ids.to(torch.int64).reshape(-1)
        if bool((ids >= k).any()):
            raise GeRuntimeError(f"{spec.type} {spec.name!r}: segment id >= num_segments {k}")
        rows = x.reshape((ids.numel(),) + tuple(x.shape[segment_ids.dim():]))
        keep = ids >= 0
        rows, ids = rows[keep], ids[keep]
        info = torch.finfo(x.dtype) if x.dtype.is_floating_point else torch.iinfo(x.dtype)
        init = {"sum": 0, "prod": 1, "amax": info.min, "amin": info.max}[how]
        out = torch.full((k,) + tuple(rows.shape[1:]), init, dtype=x.dtype)
        index = ids.reshape((-1,) + (1,) * (rows.dim() - 1)).expand(rows.shape)
        return out.scatter_reduce(0, index, rows, how, include_self=True)
    return run


def _stateless_generator(key: torch.Tensor, counter: torch.Tensor) -> torch.Generator:
    """A generator whose stream is a function of (key, counter) only, as GE's stateless
    random ops are (the reference's stream is torch's, not GE's Philox bits)."""
    words = [int(v) & (2**64 - 1) for v in torch.cat([key.reshape(-1), counter.reshape(-1)]).tolist()]
    seed = 0
    for w in words:
        seed = (seed * 6364136223846793005 + w + 1442695040888963407) % 2**63
    return torch.Generator().manual_seed(seed)


@kernel("StatelessRandomUniformV2", "StatelessRandomNormalV2")
def _stateless_random(spec: OpSpec):
    dtype = spec.outputs[0][0]
    draw = torch.rand if spec.type == "StatelessRandomUniformV2" else torch.randn

    def run(shape, key, counter, alg):
        return draw([int(v) for v in shape.reshape(-1).tolist()], dtype=dtype,
                    generator=_stateless_generator(key, counter))
    return run


@kernel("StatelessRandomUniformIntV2")
def _stateless_random_int(spec: OpSpec):
    dtype = spec.outputs[0][0]

    def run(shape, key, counter, alg, low, high):
        low, high = int(low), int(high)
        if high <= low:
            raise GeRuntimeError(f"StatelessRandomUniformIntV2 {spec.name!r}: empty range "
                                 f"[{low}, {high})")
        return torch.randint(low, high, [int(v) for v in shape.reshape(-1).tolist()],
                             dtype=dtype, generator=_stateless_generator(key, counter))
    return run
