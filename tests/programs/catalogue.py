"""Whole programs, compared with eager on everything a caller can observe.

OpInfo checks one op at a time; these are short programs whose answer depends on what happens
*between* ops: views of intermediates, strides and memory formats, aliasing between outputs and
inputs, input and buffer mutation, zero-size tensors and empty slices, runtime checks, dynamic
sizes. Each :class:`Program` is a function (or a module factory) and an input factory; the
harness (``test_programs.py``) calls it eagerly and compiled, several times, and compares values,
dtypes, sizes, strides, storage offsets, aliasing, version counters and raised errors.

``inputs(n)`` builds fresh inputs for call ``n`` (0, 1, 2); a program with ``dynamic_sizes``
changes its sizes with ``n`` (the dynamic runs use it).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, List, Optional

import torch
import torch.nn.functional as F

CL = torch.channels_last


@dataclasses.dataclass
class Program:
    name: str
    fn: Callable[..., Any]
    inputs: Callable[[int], List[Any]]
    module: Optional[Callable[[], torch.nn.Module]] = None  # fn is then unused
    dynamic_sizes: bool = False       # inputs(n) change sizes with n
    data_dependent: bool = False      # needs capture_dynamic_output_shape_ops
    refused: dict = dataclasses.field(default_factory=dict)  # mode -> why (clear refusal)
    # (mode, dynamic) -> why: a difference from eager still open (strict xfail: a fix fails
    # the run until the entry goes)
    known_wrong: dict = dataclasses.field(default_factory=dict)


PROGRAMS: List[Program] = []


def program(inputs, **kw):
    def deco(fn):
        PROGRAMS.append(Program(fn.__name__, fn, inputs, **kw))
        return fn
    return deco


def _g(n: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + n)


def randn(*size, n=0, **kw):
    return torch.randn(*size, generator=_g(n), **kw)


def randint(lo, hi, size, n=0):
    return torch.randint(lo, hi, size, generator=_g(n))


# -- views of intermediates, strides, memory formats -----------------------------------------
@program(lambda n: [randn(2, 3, 4, 4, n=n).to(memory_format=CL)])
def as_strided_of_channels_last_intermediate(x):
    y = x + 1
    return torch.as_strided(y, (2, 3, 4, 4), (48, 16, 4, 1))


@program(lambda n: [randn(4, 4, 4, 4, n=n).permute(0, 2, 3, 1),
                    randn(4, 4, 4, 4, n=n + 7).permute(0, 2, 3, 1)])
def add_of_permuted_inputs(x, y):
    return x + y


@program(lambda n: [randn(1, 3, 8, 8, n=n).to(memory_format=CL),
                    randn(4, 3, 3, 3, n=n + 1).to(memory_format=CL)])
def cat_of_conv_and_pool_channels_last(x, w):
    a = F.conv2d(x, w, padding=1)
    b = F.max_pool2d(x, 1)
    return torch.cat([a, b], 1)


@program(lambda n: [randn(3, 4, 5 + n, n=n)], dynamic_sizes=True)
def permute_then_contiguous_then_view(x):
    y = x.permute(2, 0, 1).contiguous()
    return y.view(y.size(0), -1)


@program(lambda n: [randn(8, 8, n=n)[:, :1]])
def empty_strided_like_input(x):
    out = torch.empty_strided(x.size(), x.stride())
    out.copy_(x * 2)
    return out


@program(lambda n: [randn(6, 8 + 2 * n, n=n)], dynamic_sizes=True)
def transpose_view_of_intermediate(x):
    y = torch.relu(x)
    return y.t(), y[1:, ::2]


@program(lambda n: [randn(5, 6, n=n)])
def diagonal_and_unfold_of_intermediate(x):
    y = x * 3
    return y.diagonal(), y.unfold(1, 2, 2)


_NO_GE_RESIZE = {"max-autotune": "aten.resize has no GE lowering (refused, named)"}


@program(lambda n: [randn(4, 6, n=n).t()], refused=_NO_GE_RESIZE)
def resize_of_non_contiguous_intermediate(x):
    y = x * 2
    return torch.ops.aten.resize(y, [24])


@program(lambda n: [randn(2, 3, 4, 4, n=n), randn(2, 3, 4, 4, n=n + 1).to(memory_format=CL)],
         refused=_NO_GE_RESIZE)
def resize_as_preserve_format(x, y):
    z = x + 0
    return torch.ops.aten.resize_as(z, y, memory_format=torch.preserve_format)


@program(lambda n: [randn(2, 3, 5, 5, n=n).to(memory_format=CL)])
def channels_last_elementwise_chain(x):
    return (torch.sigmoid(x) * x).sum(1, keepdim=True), x.mean((2, 3))


@program(lambda n: [randn(3, 1, 5, n=n).expand(3, 4, 5)])
def expanded_input_elementwise(x):
    return x * 2, x.sum(1)


@program(lambda n: [randn(2, 3, n=n)])
def view_as_dtype_bits(x):
    y = x * 1.0
    return y.view(torch.int32) & 0xFF, y.view(torch.uint8).shape


@program(lambda n: [randn(4, 6 + 2 * n, n=n)], dynamic_sizes=True)
def chunk_and_split_views(x):
    a, b = (x + 1).chunk(2, dim=1)
    return a * 2, b, torch.split(x, 2, dim=0)[1]


@program(lambda n: [randn(2, 3, 4, n=n)])
def unsqueeze_squeeze_expand_outputs(x):
    y = x.exp()
    return y.unsqueeze(1).expand(2, 5, 3, 4), y.squeeze(0)


# -- aliasing ------------------------------------------------------------------------------
@program(lambda n: [randn(4, 4, n=n)])
def return_input_and_its_views(x):
    return x, x.view(16), x[1:3], x.t()


@program(lambda n: [randn(4, 4, n=n)])
def two_outputs_same_intermediate(x):
    y = x.sin()
    return y, y.view(2, 8)


@program(lambda n: [randint(0, 5, (4,), n=n)])
def integer_ceil_then_mutate_input(x):
    tmp = x.ceil()
    x.add_(10)
    return tmp


@program(lambda n: [randn(6, n=n)])
def clone_then_mutate_input(x):
    c = x.clone()
    x.mul_(2)
    return c, x


@program(lambda n: [randn(3, 4, n=n)])
def contiguous_of_contiguous_then_mutate(x):
    y = x.contiguous()
    z = y.reshape(12).clone()
    x.zero_()
    return y, z


# -- mutation ------------------------------------------------------------------------------
@program(lambda n: [randn(5, n=n), randn(5, n=n + 1)])
def mutate_two_inputs(x, y):
    x.add_(y)
    y.mul_(2)
    return x + y


@program(lambda n: [randn(4, 6, n=n)])
def mutate_input_through_view(x):
    x[:, 1:3].mul_(0)
    x.t()[0].add_(1)
    return x.sum()


@program(lambda n: [randn(4, n=n)])
def mutate_input_twice_read_between(x):
    x.add_(1)
    a = x * 2
    x.add_(1)
    return a, x


class _BufferModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("running", torch.ones(4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.count.add_(1)
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return self.lin(x) + self.count


PROGRAMS.append(Program("module_buffers_updated_in_place", None,
                        lambda n: [randn(3, 4, n=n)], module=_BufferModule))


class _KVCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(2, 8, 4))

    def forward(self, pos, x):
        self.k.index_copy_(1, pos, x)
        return self.k.sum(1)


PROGRAMS.append(Program("kv_cache_index_copy", None,
                        lambda n: [torch.tensor([n % 8]), randn(2, 1, 4, n=n)], module=_KVCache))


# -- zero-size and empty slices ------------------------------------------------------------
@program(lambda n: [randn(10, n=n), randn(0, n=n)])
def slice_scatter_into_empty_slice(x, s):
    return torch.slice_scatter(x, s, 0, 10, 10), torch.slice_scatter(x, s, 0, 4, 4)


@program(lambda n: [randn(0, 4, n=n), randn(3, 4, n=n)])
def zero_size_through_ops(e, x):
    return torch.cat([e, x]), e.sum(0), (e * 2).shape, x[5:], x[:, 4:].mean()


@program(lambda n: [randn(5, n=n)])
def empty_slice_of_intermediate(x):
    y = x.cumsum(0)
    return y[3:3], y[7:], y[-1:]


@program(lambda n: [randn(2 + n, 3, n=n)], dynamic_sizes=True)
def narrow_to_zero_dynamic(x):
    return x.narrow(0, x.size(0), 0) + 1, x[x.size(0):]


# -- converters the issue found wrong ------------------------------------------------------
@program(lambda n: [torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, -0.0])])
def signbit_and_bitwise_not(x):
    return (~torch.signbit(-x)) & 1, ~(x > 0)


@program(lambda n: [torch.arange(5.0), torch.tensor([-2, 1]), torch.tensor([True, True])])
def unsafe_masked_index_negative(a, idx, mask):
    return torch.ops.aten._unsafe_masked_index(a, mask, [idx], 0.0)


@program(lambda n: [randn(1, 2, 8, 8, n=n), randn(3, 2, 3, 3, n=n + 1)])
def convolution_one_element_lists(x, w):
    return torch.ops.aten.convolution(x, w, None, [1], [0], [1], False, [0], 1)


# -- runtime checks and errors -------------------------------------------------------------
@program(lambda n: [torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]][n])],
         data_dependent=True)
def check_on_data_dependent_size(x):
    z = x.nonzero()
    torch._check(z.size(0) == 4)
    return z * 2


@program(lambda n: [randn(2, 2, n=n), torch.ones(2, 2, dtype=torch.int64)])
def mm_of_mismatched_dtypes(a, b):
    return torch.mm(a, b)


@program(lambda n: [randn(3, 4, n=n), randn(5, 6, n=n)])
def mm_of_mismatched_shapes(a, b):
    return a @ b


@program(lambda n: [torch.tensor([2, 1, 0 if n == 1 else 3])], data_dependent=True)
def item_checked_positive(x):
    v = x.min().item()
    torch._check(v > 0)
    return x * v


# -- outputs that view an input, with symbolic sizes (AOT rebuilds them from the layout the
# compiled graph returns: a dense result at offset 0 made every element wrong) -------------
@program(lambda n: [randn(3 + n, 4, n=n)], dynamic_sizes=True)
def narrow_of_input_dynamic(x):
    return x.narrow(0, 1, x.size(0) - 1)


@program(lambda n: [randn(3, 4 + n, n=n)], dynamic_sizes=True)
def transposed_slice_of_input_dynamic(x):
    return x.t()[:x.size(1) - 1]


@program(lambda n: [randn(3 + n, 6, n=n)], dynamic_sizes=True)
def strided_slice_of_input_dynamic(x):
    return x[:, ::2][:x.size(0) - 1]


@program(lambda n: [randn(4 + n, 3, n=n)], dynamic_sizes=True)
def input_views_and_a_result_dynamic(x):
    return x[1:], x[:, 1:][::2], x.sum(0)


# -- dynamic sizes and Python on sizes -----------------------------------------------------
@program(lambda n: [randn(7 + 2 * n, n=n)], dynamic_sizes=True)
def round_and_trunc_of_sizes(x):
    half = round(x.size(0) / 2)
    third = math.trunc(x.size(0) / 3)
    return x[:half] * third


@program(lambda n: [randn(4 + n, 6, n=n)], dynamic_sizes=True)
def reshape_by_computed_sizes(x):
    b, d = x.shape
    return x.reshape(b * 2, d // 2).t().contiguous(), x.new_zeros(b, 2)


# -- more layouts, aliasing and mutation ---------------------------------------------------
CL3 = torch.channels_last_3d


@program(lambda n: [randn(1, 2, 3, 4, 4, n=n).to(memory_format=CL3)])
def channels_last_3d_elementwise_and_view(x):
    y = x * 2 + 1
    return y, y.flatten(2)


@program(lambda n: [randn(2, 3, 6, 6, n=n).to(memory_format=CL), randn(4, 3, 3, 3, n=n + 1),
                    randn(4, n=n + 2), randn(4, n=n + 3)])
def conv_batchnorm_relu_channels_last(x, w, mean, var):
    y = F.conv2d(x, w)
    y = F.batch_norm(y, mean, var.abs() + 1, training=False)
    return torch.relu(y)


@program(lambda n: [randn(3, 4, n=n), randn(3, 4, n=n + 1)])
def output_is_input_and_mutated_input(x, y):
    y.add_(x)
    return x, y, x.view(-1)


@program(lambda n: [randn(5, 4, n=n), torch.tensor([0, 2, 2 + (n % 2)]), randn(3, 4, n=n + 1)])
def index_put_accumulate_into_input(x, idx, v):
    x.index_put_((idx,), v, accumulate=True)
    return x * 1


@program(lambda n: [randn(6, 4, n=n), randn(2, 4, n=n + 1)])
def copy_into_slice_of_input(x, v):
    x[2:4].copy_(v)
    x[-1] = 0.5
    return x.sum(0)


class _ViewOfBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 4))

    def forward(self, x):
        self.state[1].add_(x)
        self.state.diagonal().mul_(0.5)
        return self.state.sum(0)


PROGRAMS.append(Program("mutate_views_of_a_buffer", None, lambda n: [randn(4, n=n)],
                        module=_ViewOfBuffer))


@program(lambda n: [randn(4, 4, n=n)])
def detach_and_alias_outputs(x):
    y = x + 1
    return y.detach(), torch.ops.aten.alias(y), y


@program(lambda n: [randn(3, 5, n=n)])
def outputs_viewing_each_other_through_reshape(x):
    y = x.exp()
    z = y.reshape(15)
    return z, y, z[3:9].view(2, 3)


@program(lambda n: [randn(4, 3, n=n)])
def unbind_and_select_outputs(x):
    y = x.cos()
    a, b, c, d = y.unbind(0)
    return a, d, y.select(1, 2)


@program(lambda n: [randn(2, 3, n=n, dtype=torch.float64), randint(0, 4, (2, 3), n=n)])
def type_promotion_and_int_division(a, b):
    return a + b, b // 3, b / 3, torch.true_divide(b, 2).dtype, (b % 3).to(torch.int8)


@program(lambda n: [randn(4, 5, n=n)])
def where_with_scalar_and_nan(x):
    y = torch.where(x > 0, x, float("nan"))
    return torch.nan_to_num(y, nan=-1.0), torch.isnan(y).sum()


@program(lambda n: [torch.zeros(0, 3), randn(2, 3, n=n)])
def zero_size_matmul_and_reduce(e, x):
    return e @ x.t(), e.amax(1) if e.numel() else e.sum(1), torch.cat([e, e]).shape


@program(lambda n: [randn(3, 4, n=n)])
def empty_like_preserves_layout_of_transposed(x):
    t = x.t()
    out = torch.empty_like(t)
    out.copy_(t * 3)
    return out, torch.zeros_like(t), torch.ones_like(t).stride()


@program(lambda n: [randint(1, 6, (4,), n=n)], data_dependent=True)
def check_is_size_then_allocate(x):
    k = x.max().item()
    torch._check_is_size(k)
    torch._check(k < 10)
    return torch.arange(k) * 2


_AOT_DROPS_ASSERT_ASYNC = (
    "torch's AOT autograd drops torch._assert_async from the graph it traces (aot_eager and "
    "inductor return the value too, torch 2.13): no backend behind AOT sees it")


@program(lambda n: [torch.tensor([1.0, 2.0, -1.0 if n == 2 else 3.0])],
         known_wrong={(m, False): _AOT_DROPS_ASSERT_ASYNC
                      for m in ("npugraph_ex", "max-autotune", "reduce-overhead")})
def assert_async_on_values(x):
    torch._assert_async((x > 0).all())
    return x.log()


@program(lambda n: [randn(3 + n, 4, n=n), randn(4, 5, n=n + 1)], dynamic_sizes=True)
def dynamic_linear_then_views(x, w):
    y = x @ w
    return y[:, :2], y.t(), y.sum(0, keepdim=True).expand(y.size(0), 5)


@program(lambda n: [randn(2, 6 + 2 * n, n=n)], dynamic_sizes=True)
def dynamic_mutation_of_input_slice(x):
    half = x.size(1) // 2
    x[:, :half].mul_(2)
    return x[:, half:] + 1


@program(lambda n: [randn(3, 3, n=n) + 4 * torch.eye(3)])
def linalg_inverse_and_solve(a):
    """linalg's error checks travel as effect tokens (a graph input returned as an output)."""
    return torch.linalg.inv(a), torch.linalg.solve(a, a[:, :1])


import catalogue_dynamic  # noqa: E402,F401  (registers the dynamic-size programs, issue 44)
PROGRAM_NAMES = [p.name for p in PROGRAMS]
