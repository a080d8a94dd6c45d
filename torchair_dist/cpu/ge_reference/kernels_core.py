"""Reference kernels of the GE ops the Core ATen converters (converters/aten_core.py) emit.

Each follows the GE op's documented semantics: inputs already share a dtype (GE does no type
promotion), broadcasting is numpy's, attributes take the IR's defaults when absent.
"""
from __future__ import annotations

import torch

from ...backends.ge.dtypes import torch_dtype
from .kernels import _fixed, kernel
from .opspec import GeRuntimeError, OpSpec

for _t, _fn in {"Acos": torch.acos, "Asin": torch.asin, "Atan": torch.atan,
                "Acosh": torch.acosh, "Asinh": torch.asinh, "Atanh": torch.atanh,
                "Cosh": torch.cosh, "Sinh": torch.sinh, "Tan": torch.tan, "Erfc": torch.erfc,
                "Erfinv": torch.erfinv, "Atan2": torch.atan2, "Mod": torch.fmod,
                "NextAfter": torch.nextafter, "BitwiseXor": torch.bitwise_xor,
                "LeftShift": torch.bitwise_left_shift, "RightShift": torch.bitwise_right_shift,
                "IsNan": torch.isnan, "IsInf": torch.isinf, "Square": torch.square}.items():
    kernel(_t)(_fixed(_fn))


@kernel("Bitcast")
def _bitcast(spec: OpSpec):
    """x's bytes read as ``type`` (TF semantics): a narrower type adds a trailing dimension of
    the size ratio, a wider one consumes a trailing dimension of that size."""
    dtype = torch_dtype(spec.attr("type"))

    def run(x):
        src, dst = x.element_size(), dtype.itemsize
        x = x.contiguous()
        if src == dst:
            return x.view(dtype).clone()
        if src > dst:
            return x.reshape(x.shape + (1,)).view(dtype).clone()
        if not x.dim() or x.shape[-1] != dst // src:
            raise GeRuntimeError(f"Bitcast {spec.name!r}: {x.dtype} -> {dtype} needs a last "
                                 f"dimension of {dst // src}, got shape {tuple(x.shape)}")
        return x.view(dtype).squeeze(-1).clone()
    return run


@kernel("Cumprod")
def _cumprod(spec: OpSpec):
    """Product along ``axis``; ``exclusive`` shifts in a 1, ``reverse`` runs from the end."""
    exclusive, reverse = bool(spec.attr("exclusive", False)), bool(spec.attr("reverse", False))

    def run(x, axis):
        a = int(axis.reshape(-1)[0]) if isinstance(axis, torch.Tensor) else int(axis)
        a = a % max(x.dim(), 1)
        y = x.flip(a) if reverse else x
        if exclusive:
            ones = torch.ones_like(y.narrow(a, 0, 1))
            y = torch.cat([ones, y.narrow(a, 0, y.shape[a] - 1)], a)
        y = torch.cumprod(y, a, dtype=y.dtype)  # GE: y has x's type (torch widens ints)
        return y.flip(a) if reverse else y
    return run


@kernel("Cummax", "Cummin")
def _cummax(spec: OpSpec):
    """(running max/min along the axis, the index where it was reached); the attribute is
    ``dim`` for Cummax and ``axis`` for Cummin (as the IR names them)."""
    is_max = spec.type == "Cummax"
    dim = int(spec.attr("dim" if is_max else "axis", 0))
    fn = torch.cummax if is_max else torch.cummin

    def run(x):
        values, indices = fn(x, dim)
        return values, indices
    return run


@kernel("ScatterElements")
def _scatter_elements(spec: OpSpec):
    """data with updates[i] written (or reduced: add/mul/max/min) at data[..., indices[i], ...]
    along ``axis`` (default 0, reduction default "none")."""
    axis = int(spec.attr("axis", 0))
    reduction = spec.attr("reduction", "none")
    reduce = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}.get(reduction)

    def run(data, indices, updates):
        a = axis % max(data.dim(), 1)
        if reduce is None:
            return torch.scatter(data, a, indices, updates)
        return torch.scatter_reduce(data, a, indices, updates, reduce, include_self=True)
    return run


for _t, _fn in {"Zeta": torch.special.zeta, "Igamma": torch.igamma, "Igammac": torch.igammac,
                "Gcd": torch.gcd, "Ndtri": torch.special.ndtri, "BesselI0e": torch.special.i0e,
                "BesselI1e": torch.special.i1e, "Cholesky": torch.linalg.cholesky,
                "MatrixDeterminant": torch.linalg.det}.items():
    kernel(_t)(_fixed(_fn))


# -- TF-style matrix ops: batched over the leading dims, the matrix in the last two --------
@kernel("MatrixInverse")
def _matrix_inverse(spec: OpSpec):
    adjoint = bool(spec.attr("adjoint", False))
    return lambda x: torch.linalg.inv(x.mH if adjoint else x)


@kernel("LogMatrixDeterminant")
def _log_det(spec: OpSpec):
    """(sign, log |det|)."""
    def run(x):
        sign, logabs = torch.linalg.slogdet(x)
        return sign, logabs
    return run


@kernel("Svd")
def _svd(spec: OpSpec):
    """(sigma, u, v) with x = u diag(sigma) v^H (v itself, not v^H); empty u/v when
    ``compute_uv`` is false (default true); ``full_matrices`` default false."""
    compute_uv = bool(spec.attr("compute_uv", True))
    full = bool(spec.attr("full_matrices", False))

    def run(x):
        if not compute_uv:
            return torch.linalg.svdvals(x), x.new_empty(0), x.new_empty(0)
        u, s, vh = torch.linalg.svd(x, full_matrices=full)
        return s, u, vh.mH
    return run


@kernel("Qr")
def _qr(spec: OpSpec):
    full = bool(spec.attr("full_matrices", False))

    def run(x):
        q, r = torch.linalg.qr(x, mode="complete" if full else "reduced")
        return q, r
    return run


@kernel("SelfAdjointEig")
def _self_adjoint_eig(spec: OpSpec):
    """(eigenvalues ascending, eigenvectors as columns) of the lower triangle."""
    compute_v = bool(spec.attr("compute_v", True))

    def run(x):
        if not compute_v:
            return torch.linalg.eigvalsh(x), x.new_empty(0)
        w, v = torch.linalg.eigh(x)
        return w, v
    return run


@kernel("MatrixSolve")
def _matrix_solve(spec: OpSpec):
    """X with matrix @ X = rhs (matrix^H when ``adjoint``), batched; rhs is [..., M, K]."""
    adjoint = bool(spec.attr("adjoint", False))
    return lambda m, rhs: torch.linalg.solve(m.mH if adjoint else m, rhs)


@kernel("Cdist")
def _cdist(spec: OpSpec):
    """p-norm distance of every row of x1 [..., P, M] to every row of x2 [..., R, M]."""
    p = float(spec.attr("p", 2.0))
    return lambda x1, x2: torch.cdist(x1, x2, p=p)


@kernel("AvgPoolV2")
def _avg_pool_v2(spec: OpSpec):
    """NCHW average pooling: ksize/strides [1, 1, kh, kw], pads [top, bottom, left, right]
    (CALCULATED mode), ``exclusive`` leaves padding out of the count, ``divisor_override``
    (0: none) replaces the count, ``ceil_mode`` rounds the output size up."""
    if spec.attr("data_format", "NCHW") != "NCHW" or spec.attr("padding_mode",
                                                               "CALCULATED") != "CALCULATED":
        raise GeRuntimeError(f"AvgPoolV2 {spec.name!r}: only NCHW with CALCULATED padding")
    k, s = spec.attr("ksize"), spec.attr("strides")
    top, bottom, left, right = spec.attr("pads", [0, 0, 0, 0])
    if top != bottom or left != right:
        raise GeRuntimeError(f"AvgPoolV2 {spec.name!r}: asymmetric pads")
    exclusive = bool(spec.attr("exclusive", True))
    divisor = int(spec.attr("divisor_override", 0)) or None
    ceil = bool(spec.attr("ceil_mode", False))
    glob = bool(spec.attr("global_pooling", False))

    def run(x):
        if glob:
            return x.mean(dim=(2, 3), keepdim=True)
        return torch.nn.functional.avg_pool2d(x, k[2:], s[2:], (top, left), ceil,
                                              not exclusive, divisor)
    return run


@kernel("SearchSorted")
def _search_sorted(spec: OpSpec):
    """Insertion points of ``values`` in the last dim of ``sorted_sequence`` (its leading dims
    match ``values``' or it is 1-D); ``right``: after equal elements; ``sorter``: the
    permutation that sorts the sequence; ``dtype``: int32 or int64 output."""
    right = bool(spec.attr("right", False))
    out_int32 = spec.outputs[0][0] == torch.int32

    def run(sorted_sequence, values, sorter=None):
        return torch.searchsorted(sorted_sequence, values, right=right, sorter=sorter,
                                  out_int32=out_int32)
    return run


@kernel("UniqueWithCountsAndSorting")
def _unique_sorted(spec: OpSpec):
    """(sorted unique values, each element's index into them, each value's count)."""
    return lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True)


@kernel("UniqueConsecutive")
def _unique_consecutive(spec: OpSpec):
    """Runs of equal neighbours collapsed: (values, run index of each element, run lengths);
    ``axis`` 1000 flattens first."""
    axis = int(spec.attr("axis", 1000))

    def run(x):
        if axis == 1000:
            x = x.reshape(-1)
            return torch.unique_consecutive(x, return_inverse=True, return_counts=True)
        return torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=axis)
    return run


@kernel("Bincount")
def _bincount(spec: OpSpec):
    """``bins[i]`` = the sum of ``weights`` where ``array == i``, for i < ``size``."""
    def run(array, size, weights):
        n = int(size.reshape(-1)[0]) if isinstance(size, torch.Tensor) else int(size)
        return torch.zeros(n, dtype=weights.dtype).index_add_(0, array.long(), weights)
    return run


@kernel("Lu")
def _lu(spec: OpSpec):
    """TensorFlow's LU: (packed unit-lower L and U, permutation p with input[p] = L U), by
    partial pivoting; ``output_idx_type`` is p's int type."""
    idx = spec.outputs[1][0]

    def run(x):
        lu, pivots, _ = torch.linalg.lu_factor_ex(x)  # a singular matrix factors too
        perm, _, _ = torch.lu_unpack(lu, pivots, unpack_data=False)
        return lu, perm.argmax(-2).to(idx)  # perm[p[i], i] = 1
    return run


@kernel("OneHot")
def _one_hot(spec: OpSpec):
    """``depth``-long vectors with ``on_value`` at each index of ``x`` and ``off_value``
    elsewhere, the new dim at ``axis`` (default -1, the last)."""
    axis = int(spec.attr("axis", -1))

    def run(x, depth, on_value, off_value):
        n = int(depth.reshape(-1)[0]) if isinstance(depth, torch.Tensor) else int(depth)
        hot = torch.nn.functional.one_hot(x.long(), n).bool()
        y = torch.where(hot, on_value.reshape(()), off_value.reshape(()))
        return y if axis == -1 else y.movedim(-1, axis)
    return run
