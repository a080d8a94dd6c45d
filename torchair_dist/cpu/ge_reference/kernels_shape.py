"""Torch implementations of GE shape, indexing and factory ops (see :mod:`.kernels`)."""
from __future__ import annotations

import torch

from ...backends.ge.dtypes import torch_dtype
from .kernels import kernel, ints
from .opspec import GeRuntimeError, OpSpec


def sizes(spec: OpSpec, values, what: str, inferred: int = 0) -> list:
    """A size vector an op is given, checked as GE checks it: no negative entry except up to
    ``inferred`` -1s (Reshape's one dim inferred from the others). A -1 anywhere else is a
    symbolic size written as a constant (never a size: torch would read it as 'infer' or
    overflow)."""
    values = list(values)
    bad = [v for v in values if v < -1] or ([] if sum(v == -1 for v in values) <= inferred
                                            else [-1])
    if bad:
        raise GeRuntimeError(f"{spec.type} {spec.name!r}: {what} {values} holds {bad[0]} (at "
                             f"most {inferred} -1 allowed): a symbolic size written as a "
                             "constant; the converter must read it from the run-time shape")
    return values


@kernel("Reshape")
def _reshape(spec: OpSpec):
    shape = spec.const_ints("shape")
    if shape is not None:
        shape = sizes(spec, shape, "shape", 1)
        return lambda x, _s: x.reshape(shape)
    return lambda x, s: x.reshape(sizes(spec, ints(s), "shape", 1))


@kernel("Transpose")
def _transpose(spec: OpSpec):
    perm = spec.const_ints("perm")
    if perm is not None:
        return lambda x, _p: x.permute(perm)
    return lambda x, p: x.permute(ints(p))


@kernel("Unsqueeze")
def _unsqueeze(spec: OpSpec):
    axes = sorted(spec.attr("axes", []))

    def run(x):
        for a in axes:
            x = x.unsqueeze(a)
        return x
    return run


@kernel("Squeeze")
def _squeeze(spec: OpSpec):
    axis = tuple(spec.attr("axis", []))
    return (lambda x: x.squeeze(axis)) if axis else (lambda x: x.squeeze())


@kernel("BroadcastTo", "Expand")
def _broadcast_to(spec: OpSpec):
    shape = spec.const_ints("shape")
    if shape is not None:
        shape = sizes(spec, shape, "shape")
        return lambda x, _s: x.expand(shape)
    return lambda x, s: x.expand(sizes(spec, ints(s), "shape"))


@kernel("ConcatV2")
def _concat(spec: OpSpec):
    dim = spec.const_ints("concat_dim")

    def run(*args):
        d = dim[0] if dim is not None else ints(args[-1])[0]
        return torch.cat(args[:-1], d)
    return run


@kernel("Pack")
def _pack(spec: OpSpec):
    axis = spec.attr("axis", 0)
    return lambda *xs: torch.stack([torch.as_tensor(x) for x in xs], axis)


@kernel("StridedSlice")
def _strided_slice(spec: OpSpec):
    for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if spec.attr(mask, 0):
            raise GeRuntimeError(f"StridedSlice {spec.name!r}: {mask} is not supported")
    bm, em = spec.attr("begin_mask", 0), spec.attr("end_mask", 0)

    def slices(begin, end, strides):
        return tuple(slice(None if bm >> i & 1 else b, None if em >> i & 1 else e, s)
                     for i, (b, e, s) in enumerate(zip(begin, end, strides)))
    consts = [spec.const_ints(p) for p in ("begin", "end", "strides")]
    if all(c is not None for c in consts):
        index = slices(*consts)
        return lambda x, *_: x[index]
    return lambda x, b, e, s: x[slices(ints(b), ints(e), ints(s))]


@kernel("GatherV2")
def _gather_v2(spec: OpSpec):
    axis_c = spec.const_ints("axis")

    def run(x, indices, axis):
        a = axis_c[0] if axis_c is not None else ints(axis)[0]
        a = a % x.dim()
        if indices.dim() == 0:
            return x.select(a, int(indices))
        flat = torch.index_select(x, a, indices.reshape(-1))
        return flat.reshape(x.shape[:a] + indices.shape + x.shape[a + 1:])
    return run


@kernel("GatherElements")
def _gather_elements(spec: OpSpec):
    dim = spec.attr("dim", 0)
    return lambda x, index: torch.gather(x, dim, index)


@kernel("SplitV")
def _split_v(spec: OpSpec):
    sizes, dim = spec.const_ints("size_splits"), spec.const_ints("split_dim")

    def run(x, size_splits, split_dim):
        d = dim[0] if dim is not None else ints(split_dim)[0]
        s = list(sizes if sizes is not None else ints(size_splits))
        if -1 in s:
            s[s.index(-1)] = x.shape[d] - (sum(s) + 1)
        parts = torch.split(x, s, d)
        return parts[0] if len(parts) == 1 else tuple(parts)
    return run


@kernel("Unpack")
def _unpack(spec: OpSpec):
    axis = spec.attr("axis", 0)
    if len(spec.outputs) == 1:  # one output: the generated code expects a tensor, not a tuple
        return lambda x: x.select(axis, 0)
    return lambda x: tuple(torch.unbind(x, axis))


@kernel("Index")
def _index(spec: OpSpec):
    mask = spec.const_ints("indexed_sizes")
    if mask is None:
        raise GeRuntimeError(f"Index {spec.name!r}: indexed_sizes must be a Const")

    def run(x, _sizes, _strides, *indices):
        it = iter(indices)
        return x[tuple(next(it) if m else slice(None) for m in mask)]
    return run


@kernel("Fill")
def _fill(spec: OpSpec):
    dims = spec.const_ints("dims")
    if dims is not None:
        shape = sizes(spec, dims, "dims") if spec.outputs[0][1] != () else ()
        return lambda _d, value: value.reshape(()).expand(shape).clone()
    return lambda d, value: value.reshape(()).expand(sizes(spec, ints(d), "dims")).clone()


@kernel("Range")
def _range(spec: OpSpec):
    dtype, device = spec.outputs[0][0], spec.state.get("device")

    def scalar(v):
        return v.item() if isinstance(v, torch.Tensor) else v
    return lambda start, limit, delta: torch.arange(scalar(start), scalar(limit), scalar(delta),
                                                    dtype=dtype, device=device)


@kernel("Shape")
def _shape(spec: OpSpec):
    dtype = torch_dtype(spec.attr("dtype", 3))
    return lambda x: torch.tensor(tuple(x.shape), dtype=dtype)


@kernel("IndexPutV2")
def _index_put(spec: OpSpec):
    mask = spec.const_ints("indexed_sizes")
    accumulate = bool(spec.attr("accumulate", False))
    if mask is None:
        raise GeRuntimeError(f"IndexPutV2 {spec.name!r}: indexed_sizes must be a Const")

    def run(x, value, _sizes, _strides, *indices):
        it = iter(indices)
        index = [next(it) if m else None for m in mask]
        return torch.ops.aten.index_put.default(x, index, value, accumulate)
    return run


@kernel("InplaceIndexAdd")
def _inplace_index_add(spec: OpSpec):
    """Returns the updated copy (the executor is functional; the converter already copied var)."""
    axis = spec.attr("axis")
    if spec.port("alpha") is None:
        return lambda var, indices, updates: var.index_add(axis, indices, updates)
    return lambda var, indices, updates, alpha: var.index_add(axis, indices, updates * alpha)


@kernel("ScatterNdUpdate", writes_input=True)
def _scatter_nd_update(spec: OpSpec):
    """Writes ``var`` in place (GE's ref semantics): a RefData input is the caller's buffer;
    converters give every other ``var`` its own copy first."""
    def run(var, indices, updates):
        var.index_put_(tuple(indices.to(torch.int64).unbind(-1)), updates.to(var.dtype))
        return var
    return run


@kernel("Assign", writes_input=True)
def _assign(spec: OpSpec):
    """Writes ``value`` into ``ref`` in place (``ref`` is a RefData: the caller's buffer)."""
    def run(ref, value):
        ref.copy_(value)
        return ref
    return run


@kernel("NonZero")
def _nonzero(spec: OpSpec):
    transpose, dtype = bool(spec.attr("transpose", False)), torch_dtype(spec.attr("dtype", 9))

    def run(x):
        y = torch.nonzero(x)
        return (y.t() if transpose else y).contiguous().to(dtype)
    return run


@kernel("Tile")
def _tile(spec: OpSpec):
    multiples = spec.const_ints("multiples")
    if multiples is not None:
        return lambda x, _m: x.repeat(multiples)
    return lambda x, m: x.repeat(ints(m))


@kernel("PadV3")
def _pad_v3(spec: OpSpec):
    if spec.attr("mode", "constant") != "constant" or not spec.attr("paddings_contiguous", True):
        raise GeRuntimeError(f"PadV3 {spec.name!r}: only contiguous constant padding")
    flat = spec.const_ints("paddings")

    def run(x, paddings, value=None):
        pairs = list(flat if flat is not None else ints(paddings))
        torch_pad = []
        for i in range(len(pairs) // 2 - 1, -1, -1):
            torch_pad += [pairs[2 * i], pairs[2 * i + 1]]
        fill = 0 if value is None else value.item()
        if x.is_complex():  # torch's pad takes a real fill: pad the two parts
            fill = complex(fill)
            return torch.complex(torch.nn.functional.pad(x.real, torch_pad, value=fill.real),
                                 torch.nn.functional.pad(x.imag, torch_pad, value=fill.imag))
        return torch.nn.functional.pad(x, torch_pad, value=fill)
    return run


@kernel("Roll")
def _roll(spec: OpSpec):
    shifts, dims = list(spec.attr("shifts")), list(spec.attr("dims", []) or [])
    if dims:
        return lambda x: torch.roll(x, shifts, dims)
    return lambda x: torch.roll(x, shifts)


@kernel("ReverseV2")
def _reverse_v2(spec: OpSpec):
    axis = spec.const_ints("axis")
    if axis is not None:
        return lambda x, _a: torch.flip(x, axis)
    return lambda x, a: torch.flip(x, ints(a))
