"""Programs of the suite whose sizes change between calls (issue 44): every size expression a
graph carries under dynamic shapes (``sym_size``, ``sym_stride``, arithmetic and Python
builtins on sizes, float arithmetic on sizes), the ops whose shapes or arguments come from
symbolic sizes (fills, reshapes with -1, ``slice_scatter``, convolution and pooling, forward
and backward), and reductions whose divisor is a symbolic size (``var``/``std``).

Registered into :data:`catalogue.PROGRAMS` (imported at the end of ``catalogue.py``). Sizes
stay at 2 or more so that Dynamo keeps them symbolic (it specializes 0 and 1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from catalogue import program, randint, randn  # noqa: E402  (partially initialized: defined)


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.requires_grad_(True)


# -- reductions whose divisor is a symbolic size -------------------------------------------
@program(lambda n: [randn(4 + n, 6 + 2 * n, n=n)], dynamic_sizes=True)
def var_std_on_dynamic_dims(x):
    return (x.var(1), x.std(0), torch.var(x, 1, correction=0), x.var(), x.std(correction=2),
            torch.var_mean(x, 0, keepdim=True)[0])


@program(lambda n: [randn(2, 3 + n, 5, n=n)], dynamic_sizes=True)
def std_then_reshape_minus_one(x):
    s = x.std(-1, keepdim=True)
    return ((x - x.mean(-1, keepdim=True)) / s).reshape(2, -1), s.view(-1)


# -- float and integer arithmetic on sizes -----------------------------------------------
@program(lambda n: [randn(3 + n, 4, n=n)], dynamic_sizes=True)
def slice_by_rounded_float_of_size(x):
    i = x.size(0)
    return x[:round(i / 2 + 1)] + 1


@program(lambda n: [randn(3 + 2 * n, 4, n=n)], dynamic_sizes=True)
def scale_by_float_of_size(x):
    n = x.size(0)
    return x * (n / 2 + 0.25), x * (n * 0.5), x / (n / 4)


@program(lambda n: [randn(3 + n, 2, n=n)], dynamic_sizes=True)
def float_neg_round_ndigits_of_size(x):
    n = x.size(0)
    return x * float(n), x * -n, x + round(n / 3, 2), x * (-n + 7)


@program(lambda n: [randn(4, 3 + n, n=n).t()], dynamic_sizes=True)
def sym_stride_in_arithmetic(x):
    return x * x.stride(1) + x.stride(0), x.contiguous().view(-1)[::x.stride(1)]


@program(lambda n: [randn(3 + n, 5, 2 + n, n=n)], dynamic_sizes=True)
def sym_stride_of_contiguous_3d(x):
    return x * x.stride(0) + x.stride(1), x.flatten()[:x.stride(0)]


@program(lambda n: [randn(5 + n, 3, n=n)], dynamic_sizes=True)
def min_max_floor_ceil_of_sizes(x):
    import math
    n = x.size(0)
    a = min(n, 6)
    b = max(n // 2, 3)
    return x[:a] * math.floor(n / 3), x[:b] * math.ceil(n / 3), x[:math.trunc(-n / 4) + n]


@program(lambda n: [randn(3 + n, 4, n=n)], dynamic_sizes=True)
def as_strided_with_symbolic_sizes(x):
    n = x.size(0)
    y = x * 2
    return (torch.as_strided(y, (n - 1, 2), (x.size(1), 1), 1) * 1,
            torch.as_strided_scatter(y, torch.ones(n - 1, 2), (n - 1, 2), (x.size(1), 1), 1))


# -- complex arithmetic with an alpha ------------------------------------------------------
@program(lambda n: [randn(3 + n, 4, n=n, dtype=torch.complex64),
                    randn(3 + n, 4, n=n + 1, dtype=torch.complex64)], dynamic_sizes=True)
def complex_add_with_alpha(a, b):
    return torch.add(a, b, alpha=2), torch.add(a, b, alpha=a.size(0)), torch.sub(a, b, alpha=3)


# -- fills, pointwise ops and scatter on symbolic shapes -----------------------------------
@program(lambda n: [randn(3 + n, 5, n=n), randn(3 + n, 5, n=n + 1, dtype=torch.complex64)],
         dynamic_sizes=True)
def angle_lgamma_on_dynamic_shape(x, c):
    return torch.angle(x), torch.angle(c), torch.lgamma(x), torch.digamma(x.abs() + 1)


@program(lambda n: [randn(3 + n, 6, n=n), randint(0, 6, (3 + n, 2), n=n)], dynamic_sizes=True)
def scatter_and_fills_on_dynamic_shape(x, idx):
    return (x.scatter(1, idx, 1.5), torch.zeros_like(x).scatter_(1, idx, x[:, :2]),
            torch.full_like(x, 2.0) * x, x.new_full((x.size(0), 3), 7.0),
            torch.ones(x.size(0), x.size(1) * 2))


@program(lambda n: [randn(3 + n, 4, n=n), torch.arange(3 + n)[:, None] % 2 == 0,
                    randn(40, n=n + 1)], dynamic_sizes=True)
def masked_scatter_reshape_on_dynamic_shape(x, mask, src):
    y = x.masked_scatter(mask, src)
    return y.reshape(-1, 2), y.view(2, -1)


@program(lambda n: [randn(3 + 2 * n, 5, n=n)], dynamic_sizes=True)
def median_kthvalue_put_on_dynamic_shape(x):
    return (x.median(0)[0], x.nanmedian(1)[0], x.kthvalue(2, 0, keepdim=True)[0],
            x.put(torch.tensor([-1, 2]), torch.tensor([9.0, 8.0])))


@program(lambda n: [randn(3, 4 + 2 * n, n=n)], dynamic_sizes=True)
def rfft_of_dynamic_length(x):
    return torch.fft.rfft(x).abs(), torch.fft.rfft(x, norm="ortho").abs()


# -- slice_scatter on a symbolic dim -------------------------------------------------------
@program(lambda n: [randn(6 + 2 * n, 3, n=n), randn(3 + n, 3, n=n + 1)], dynamic_sizes=True)
def slice_scatter_with_step_on_dynamic_dim(x, src):
    return torch.slice_scatter(x, src, 0, 0, None, 2)


@program(lambda n: [randn(6 + n, 3, n=n), randn(4 + n, 3, n=n + 1)], dynamic_sizes=True)
def slice_scatter_with_negative_end_on_dynamic_dim(x, src):
    return torch.slice_scatter(x, src, 0, 1, -1)


# -- convolution and pooling with symbolic sizes, forward and backward ----------------------
@program(lambda n: [randn(2 + n, 4, 6 + n, 6, n=n), randn(4, 1, 3, 3, n=n + 1)],
         dynamic_sizes=True)
def conv_with_symbolic_groups_and_padding(x, w):
    return F.conv2d(x, w, padding=x.size(0) // 2, groups=x.size(1))


@program(lambda n: [randn(2 + n, 2, 4, 5, 5 + n, n=n), randn(3, 2, 3, 3, 3, n=n + 1)],
         dynamic_sizes=True)
def conv3d_then_flatten_on_dynamic_batch(x, w):
    y = F.conv3d(x, w, padding=1)
    return y.reshape(y.size(0), -1) * 2, y.flatten(1).std(1)



@program(lambda n: [_leaf(randn(2 + n, 3, 6 + n, 7, n=n)), _leaf(randn(4, 3, 3, 3, n=n + 1))],
         dynamic_sizes=True)
def conv_backward_on_dynamic_sizes(x, w):
    y = F.conv2d(x, w, padding=1, stride=2)
    gx, gw = torch.autograd.grad((y * y).sum(), (x, w))
    return y.detach(), gx, gw


@program(lambda n: [_leaf(randn(2 + n, 3, 8 + 2 * n, 9, n=n))], dynamic_sizes=True)
def avg_pool_backward_on_dynamic_sizes(x):
    y = F.avg_pool2d(x, 3, stride=2, padding=1)
    z = F.avg_pool1d(x.flatten(2), 4, stride=3)
    (gx,) = torch.autograd.grad(y.pow(2).sum() + z.sum(), (x,))
    return y.detach(), gx


# -- issue 44's last refusals, lowered: pooling/conv gradients in 3-D, fractional pooling,
#    windows and resizes of symbolic sizes, masks among indices, byte-packed rows,
#    recurrence polynomials of a size-derived degree --------------------------------------
@program(lambda n: [_leaf(randn(2, 3, 6 + n, 5, 7, n=n)), _leaf(randn(4, 3, 3, 2, 3, n=n + 1))],
         dynamic_sizes=True)
def conv3d_and_avg_pool3d_backward_on_dynamic_sizes(x, w):
    y = F.conv3d(x, w, padding=1)  # its gradients do not read y: no forward rounding in them
    z = F.avg_pool3d(x, 2, stride=2)
    gx, gw = torch.autograd.grad((y * 0.5).sum() + (z * 3).sum(), (x, w))
    return gx, gw


@program(lambda n: [randn(2, 3, 12 + 2 * n, 11 + n, n=n),
                    torch.rand(2, 3, 2, generator=torch.Generator().manual_seed(n))],
         dynamic_sizes=True)
def fractional_max_pool_from_samples(x, samples):
    return torch.ops.aten.fractional_max_pool2d(x, (3, 2), (4, 5), samples)


@program(lambda n: [randn(3, 7 + n, 2, n=n)], dynamic_sizes=True)
def unfold_and_resize_of_dynamic_dims(x):
    w = x.unfold(1, 3, 2)
    return w * 2, torch.ops.aten.resize(x.transpose(0, 1) * 1, (x.size(1), 6))


@program(lambda n: [randn(4, 5 + n, 3, n=n), torch.tensor([0, 2]),
                    torch.tensor([True, False, True])], dynamic_sizes=True)
def index_put_mask_among_indices(x, i, mask):
    y = x.clone()
    y[i, :, mask] = -1.0
    return y


@program(lambda n: [torch.cat([randint(0, 255, (6 + n, 16), n=n).to(torch.uint8),
                               randn(6 + n, 2, n=n).view(torch.uint8)], dim=1)],
         dynamic_sizes=True)
def byte_packed_rows_unpacked(packed):
    return torch.ops.quantized.embedding_bag_byte_unpack(packed) * 2


@program(lambda n: [randn(3 + n, 4, n=n)], dynamic_sizes=True)
def hermite_of_size_degree(x):
    return (torch.special.hermite_polynomial_h(x, x.size(0)),
            torch.special.legendre_polynomial_p(x.tanh(), x.size(0) - 1))
