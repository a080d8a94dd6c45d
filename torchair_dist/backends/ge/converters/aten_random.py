"""Random ops as GE's stateless generators (StatelessRandomUniformV2 / NormalV2 /
UniformIntV2, Philox): each op draws from a (key, counter) pair; the key is a graph input the
runner draws from torch's default generator before every run (see
:meth:`~.context.ConvertContext.random_key_counter`).

What this gives, as eager's generator does: ``torch.manual_seed(s)`` before a call repeats its
numbers, consecutive calls and distinct ops draw different numbers, the distributions are
torch's (uniform in [0, 1), standard normal, integers in [low, high)). What it cannot give: the
very numbers eager draws (GE's Philox stream is not torch's CPU Mersenne twister nor its NPU
Philox offsets). A program that asks for eager's numbers -- ``torch._inductor.config.
fallback_random = True`` -- is refused, naming that option.
"""
from __future__ import annotations

import torch

from ....errors import UnsupportedOpError
from .registry import register

aten = torch.ops.aten
_ALG_PHILOX = 1
_EMITS = ["Const", "Pack", "Shape", "GatherV2", "Cast"]


def _check_eager_stream(cx) -> None:
    try:
        from torch._inductor import config as inductor_config
    except ImportError:  # pragma: no cover - inductor always ships with torch
        return
    if getattr(inductor_config, "fallback_random", False):
        raise UnsupportedOpError(
            f"%{cx.node.name}: {cx.node.target} with torch._inductor.config.fallback_random=True: "
            "that option asks for eager's own random numbers, and GE's generators draw from "
            "their own (Philox) stream; unset it, generate the random tensor outside the "
            "compiled region, or use mode='npugraph_ex'")


def _shape(cx, size):
    return cx.int_list(list(size), torch.int64)


def _draw(cx, op_type: str, size, dtype: torch.dtype) -> object:
    """``op_type`` drawn in a float type GE's generators output (float32 for the others)."""
    _check_eager_stream(cx)
    if not dtype.is_floating_point:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} of dtype {dtype}: "
                                 "a floating-point dtype is expected")
    work = dtype if dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16) \
        else torch.float32
    key, counter = cx.random_key_counter()
    _, shape = cx.out()
    y = cx.emit1(op_type, [("shape", _shape(cx, size)), ("key", key), ("counter", counter),
                           ("alg", cx.const(_ALG_PHILOX, torch.int32))],
                 {"dtype": work}, (work, tuple(shape)))
    return cx.cast(y, dtype)


@register([aten.rand.default], ["StatelessRandomUniformV2", *_EMITS])
def _rand(cx, size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    return _draw(cx, "StatelessRandomUniformV2", size, cx.out_dtype)


@register([aten.randn.default], ["StatelessRandomNormalV2", *_EMITS])
def _randn(cx, size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    return _draw(cx, "StatelessRandomNormalV2", size, cx.out_dtype)


def _size_of(cx, x):
    return [cx.dim(x, i) for i in range(len(x.shape))]


@register([aten.rand_like.default], ["StatelessRandomUniformV2", *_EMITS])
def _rand_like(cx, x, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _draw(cx, "StatelessRandomUniformV2", _size_of(cx, x), cx.out_dtype)


@register([aten.randn_like.default], ["StatelessRandomNormalV2", *_EMITS])
def _randn_like(cx, x, *, dtype=None, layout=None, device=None, pin_memory=None,
                memory_format=None):
    return _draw(cx, "StatelessRandomNormalV2", _size_of(cx, x), cx.out_dtype)


def _randint_values(cx, low, high, size):
    """Integers uniform in [low, high) (StatelessRandomUniformIntV2 in int64), cast."""
    _check_eager_stream(cx)
    dtype, shape = cx.out()
    key, counter = cx.random_key_counter()
    y = cx.emit1("StatelessRandomUniformIntV2",
                 [("shape", _shape(cx, size)), ("key", key), ("counter", counter),
                  ("alg", cx.const(_ALG_PHILOX, torch.int32)),
                  ("minval", cx.tensor(low, torch.int64)), ("maxval", cx.tensor(high, torch.int64))],
                 None, (torch.int64, tuple(shape)))
    return cx.cast(y, dtype)


@register([aten.randint.default], ["StatelessRandomUniformIntV2", *_EMITS])
def _randint(cx, high, size, *, dtype=None, layout=None, device=None, pin_memory=None,
             generator=None):
    return _randint_values(cx, 0, high, size)


@register([aten.randint.low], ["StatelessRandomUniformIntV2", *_EMITS])
def _randint_low(cx, low, high, size, *, dtype=None, layout=None, device=None, pin_memory=None,
                 generator=None):
    return _randint_values(cx, low, high, size)


@register([aten.randint_like.default], ["StatelessRandomUniformIntV2", *_EMITS])
def _randint_like(cx, x, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
    return _randint_values(cx, 0, high, _size_of(cx, x))


@register([aten.randint_like.low_dtype], ["StatelessRandomUniformIntV2", *_EMITS])
def _randint_like_low(cx, x, low, high, *, dtype=None, layout=None, device=None,
                      pin_memory=None, memory_format=None):
    return _randint_values(cx, low, high, _size_of(cx, x))


def _no_generator(cx, generator) -> None:
    if generator is not None:
        raise UnsupportedOpError(f"%{cx.node.name}: {cx.node.target} with an explicit "
                                 "torch.Generator: its stream is not GE's; drop the generator "
                                 "or draw outside the compiled region")


@register([aten.rand.generator], ["StatelessRandomUniformV2", *_EMITS])
def _rand_generator(cx, size, *, generator=None, dtype=None, layout=None, device=None,
                    pin_memory=None):
    _no_generator(cx, generator)
    return _draw(cx, "StatelessRandomUniformV2", size, cx.out_dtype)


@register([aten.randn.generator], ["StatelessRandomNormalV2", *_EMITS])
def _randn_generator(cx, size, *, generator=None, dtype=None, layout=None, device=None,
                     pin_memory=None):
    _no_generator(cx, generator)
    return _draw(cx, "StatelessRandomNormalV2", size, cx.out_dtype)


@register([torch.ops.prims.normal.default], ["StatelessRandomNormalV2", "Mul", "Add", *_EMITS])
def _prims_normal(cx, shape, *, mean, std, dtype, device, requires_grad, generator=None):
    """prims.normal (what randn with a dtype/device decomposes to): mean + std * N(0, 1)."""
    _no_generator(cx, generator)
    y = _draw(cx, "StatelessRandomNormalV2", shape, dtype)
    if std != 1:
        y = cx.emit1("Mul", [("x1", y), ("x2", cx.tensor(std, dtype))], None, cx.out())
    if mean != 0:
        y = cx.emit1("Add", [("x1", y), ("x2", cx.tensor(mean, dtype))], None, cx.out())
    return y


@register([aten.bernoulli.p], ["StatelessRandomUniformV2", "Less", "Cast", *_EMITS])
def _bernoulli_p(cx, x, p=0.5, *, generator=None):
    """bernoulli(x, p): 1 where a uniform draw is below p (the dtype of x)."""
    _no_generator(cx, generator)
    dtype, shape = cx.out()
    u = _draw(cx, "StatelessRandomUniformV2", _size_of(cx, x), torch.float32)
    hit = cx.emit1("Less", [("x1", u), ("x2", cx.const(float(p), torch.float32))], None,
                   (torch.bool, tuple(shape)))
    return cx.cast(hit, dtype)
