"""Converters for further ops Hugging Face decoder models lower to (found by
``benchmarks/ge_model_sweep.py``). Ops whose IR lists only float32/float16 compute other
floating dtypes (bf16) in float32 and cast back."""
from __future__ import annotations

import torch

from .registry import register

aten = torch.ops.aten
_F32_F16 = {torch.float32, torch.float16}


def _in_float(cx, x, allowed=_F32_F16):
    """(x in a dtype the op accepts, that dtype)."""
    dtype = cx.out_dtype
    work = dtype if dtype in allowed else torch.float32
    return cx.cast(x, work), work


@register([aten.softplus.default], ["SoftplusV2", "Cast"])
def _softplus(cx, x, beta=1, threshold=20):
    x, work = _in_float(cx, x)
    y = cx.emit1("SoftplusV2", [("x", x)], {"beta": float(beta), "threshold": float(threshold)},
                 (work, x.shape))
    return cx.cast(y, cx.out_dtype)


# -- complex numbers (rotary embeddings written with torch.polar / view_as_complex) ------------
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _complex(cx, real, imag):
    dtype, shape = cx.out()
    part = _REAL_OF[dtype]
    return cx.emit1("Complex", [("real", cx.cast(real, part)), ("imag", cx.cast(imag, part))],
                    {"Tout": dtype}, (dtype, shape), port="out")


@register([aten.polar.default], ["Complex", "Cos", "Sin", "Mul", "Cast"])
def _polar(cx, magnitude, angle):
    """abs * (cos(angle) + i sin(angle))."""
    shape = cx.out()[1]
    parts = []
    for fn in ("Cos", "Sin"):
        trig = cx.emit1(fn, [("x", angle)], None, (angle.dtype, angle.shape))
        parts.append(cx.emit1("Mul", [("x1", magnitude), ("x2", trig)], None, (angle.dtype, shape)))
    return _complex(cx, *parts)


@register([aten.view_as_complex.default], ["Complex", "GatherV2", "Const", "Cast"])
def _view_as_complex(cx, x):
    """x[..., 0] + i x[..., 1] (a new tensor here: GE has no complex views)."""
    if cx.out_dtype not in _REAL_OF:
        from ....errors import UnsupportedOpError

        raise UnsupportedOpError(f"%{cx.node.name}: view_as_complex of a {x.dtype} tensor gives "
                                 f"{cx.out_dtype}, which GE's Complex cannot build (complex64/"
                                 "complex128 from float32/float64 only)")
    last = len(x.shape) - 1
    real, imag = (cx.emit1("GatherV2", [("x", x), ("indices", cx.const(i, torch.int64)),
                                        ("axis", cx.const(last, torch.int64))], None,
                           (x.dtype, x.shape[:-1])) for i in (0, 1))
    return _complex(cx, real, imag)


@register([aten.view_as_real.default], ["Real", "Imag", "Pack"])
def _view_as_real(cx, z):
    dtype, shape = cx.out()
    real, imag = (cx.emit1(op, [("input", z)], {"Tout": dtype}, (dtype, z.shape), port="output")
                  for op in ("Real", "Imag"))
    return cx.emit1("Pack", [("x", [real, imag])], {"axis": len(z.shape), "N": 2}, (dtype, shape))


@register([aten.repeat.default], ["Tile", "Reshape", "Const", "Pack", "Cast"])
def _repeat(cx, x, repeats):
    """Tile; extra leading repeats first give ``x`` leading 1-dims (bool travels as int8)."""
    dtype, shape = cx.out()
    lead = len(repeats) - len(x.shape)
    if lead:
        x = cx.reshape(x, [1] * lead + cx.dims(x), (1,) * lead + tuple(x.shape))
    work = torch.int8 if dtype == torch.bool else dtype
    y = cx.emit1("Tile", [("x", cx.cast(x, work)), ("multiples", cx.int_list(list(repeats)))], None,
                 (work, shape))
    return cx.cast(y, dtype)


@register([aten._safe_softmax.default], ["SoftmaxV2", "Equal", "ReduceAll", "SelectV2", "Cast",
                                         "Const"])
def _safe_softmax(cx, x, dim, dtype=None):
    """softmax, with rows that are all -inf giving zeros instead of NaN (SDPA's masked rows)."""
    out_dtype, shape = cx.out()
    x = cx.cast(x, out_dtype)
    rank = len(shape)
    d = dim % rank
    y = cx.emit1("SoftmaxV2", [("x", x)], {"axes": [d]}, (out_dtype, shape))
    masked = cx.emit1("Equal", [("x1", x), ("x2", cx.const(float("-inf"), out_dtype))], None,
                      (torch.bool, shape))
    kept = tuple(1 if i == d else s for i, s in enumerate(shape))
    empty = cx.emit1("ReduceAll", [("x", masked), ("axes", cx.const([d], torch.int64))],
                     {"keep_dims": True}, (torch.bool, kept))
    return cx.emit1("SelectV2", [("condition", empty), ("then", cx.const(0.0, out_dtype)),
                                 ("else", y)], None, (out_dtype, shape), port="result")


@register([aten.logsumexp.default], ["ReduceLogSumExp", "Cast", "Const"])
def _logsumexp(cx, x, dim, keepdim=False):
    dtype = cx.out_dtype
    rank = len(x.shape)
    if rank == 0:  # logsumexp of one element is that element
        return cx.cast(x, dtype)
    axes = [d % rank for d in dim] if dim else list(range(rank))
    return cx.emit1("ReduceLogSumExp", [("x", cx.cast(x, dtype)),
                                        ("axes", cx.const(axes, torch.int64))],
                    {"keep_dims": bool(keepdim)})


@register([aten.log_sigmoid_forward.default], ["LogSigmoid", "Cast"])
def _log_sigmoid_forward(cx, x):
    """(log(sigmoid(x)), buffer): the buffer is a backward-only workspace, refused if read."""
    from .aten_attention import _uses_output
    from ....errors import UnsupportedOpError

    if _uses_output(cx.node, 1):
        raise UnsupportedOpError(f"%{cx.node.name}: the log_sigmoid buffer has no GE lowering")
    dtype, shape = cx.out(0)
    xf, work = x, dtype if dtype in _F32_F16 else torch.float32
    y = cx.emit1("LogSigmoid", [("x", cx.cast(xf, work))], None, (work, shape))
    return [cx.cast(y, dtype), None]


@register([aten.constant_pad_nd.default], ["PadV3", "Const", "Cast"])
def _constant_pad_nd(cx, x, pad, value=0):
    """PadV3 ``constant``; torch lists (before, after) from the last dim backwards, PadV3 one
    contiguous (before, after) pair per dim from the first."""
    from ....errors import UnsupportedOpError

    if any(not isinstance(p, int) or p < 0 for p in pad):
        raise UnsupportedOpError(f"%{cx.node.name}: constant_pad_nd with negative or symbolic "
                                 f"pads {list(pad)} has no GE lowering")
    rank = len(x.shape)
    pairs = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        pairs[rank - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    flat = [p for pair in pairs for p in pair]
    return cx.emit1("PadV3", [("x", x), ("paddings", cx.const(flat, torch.int64)),
                              ("constant_values", cx.tensor(value, x.dtype))],
                    {"mode": "constant", "paddings_contiguous": True})


@register([aten.eye.default, aten.eye.m], ["Const"])
def _eye(cx, n, m=None, **_):
    """An identity matrix of static size is a constant."""
    from ....errors import UnsupportedOpError

    if not isinstance(n, int) or not isinstance(m if m is not None else n, int):
        raise UnsupportedOpError(f"%{cx.node.name}: eye with a symbolic size has no GE lowering")
    return cx.const(torch.eye(n, n if m is None else m, dtype=cx.out_dtype))


@register([aten.linalg_solve_triangular.default],
          ["MatrixTriangularSolve", "Transpose", "Mul", "Add", "Const", "Cast"])
def _solve_triangular(cx, a, b, *, upper, left=True, unitriangular=False):
    """X with A X = B (``left``) or X A = B: GE MatrixTriangularSolve (TF semantics: ``lower``
    names A's triangle, ``adjoint`` solves with A^T), float32 for other float dtypes. A unit
    diagonal is written into A first; ``left=False`` solves A^T X^T = B^T."""
    dtype, shape = cx.out()
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    a, b = cx.cast(a, work), cx.cast(b, work)
    n = a.shape[-1]
    if unitriangular:
        from ....errors import UnsupportedOpError

        if n < 0:
            raise UnsupportedOpError(f"%{cx.node.name}: unitriangular solve with a symbolic size")
        eye = torch.eye(n, dtype=work)
        a = cx.emit1("Mul", [("x1", a), ("x2", cx.const(1 - eye))], None, (work, a.shape))
        a = cx.emit1("Add", [("x1", a), ("x2", cx.const(eye))], None, (work, a.shape))
    if not left:
        b = _swap_last(cx, b)
    y = cx.emit1("MatrixTriangularSolve", [("matrix", a), ("rhs", b)],
                 {"lower": not upper, "adjoint": not left}, (work, b.shape))
    if not left:
        y = _swap_last(cx, y)
    return cx.cast(y, dtype)


def _swap_last(cx, x):
    perm = list(range(len(x.shape)))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    shape = tuple(x.shape[p] for p in perm)
    return cx.emit1("Transpose", [("x", x), ("perm", cx.const(perm, torch.int64))], None,
                    (x.dtype, shape))


_REVERSE_DTYPES = {torch.bool, torch.float64, torch.float32, torch.float16, torch.int16,
                   torch.int32, torch.int64, torch.int8, torch.uint16, torch.uint8}


@register([aten.flip.default], ["ReverseV2", "Const", "Cast"])
def _flip(cx, x, dims):
    """ReverseV2 (bf16, outside its IR dtypes, flips as float32: exact)."""
    dtype = x.dtype
    work = dtype if dtype in _REVERSE_DTYPES else torch.float32
    rank = len(x.shape)
    y = cx.emit1("ReverseV2", [("x", cx.cast(x, work)),
                               ("axis", cx.const([d % rank for d in dims], torch.int64))], None,
                 (work, x.shape))
    return cx.cast(y, dtype)


_ROLL_DTYPES = {torch.bfloat16, torch.float32, torch.float16, torch.int32, torch.int64, torch.int8,
                torch.uint8}


@register([aten.roll.default], ["Roll", "Cast"])
def _roll(cx, x, shifts, dims=()):
    """Roll (dims empty: the flattened tensor rolls, as in torch). Dtypes outside Roll's IR
    list (bool, int16, float64) roll as float32."""
    dtype = x.dtype
    work = dtype if dtype in _ROLL_DTYPES else torch.float32
    shifts = [int(s) for s in (shifts if isinstance(shifts, (list, tuple)) else [shifts])]
    dims = [int(d) % max(len(x.shape), 1) for d in (dims or [])]
    y = cx.emit1("Roll", [("x", cx.cast(x, work))], {"shifts": shifts, "dims": dims},
                 (work, x.shape))
    return cx.cast(y, dtype)


@register([aten.unfold.default], ["GatherV2", "Transpose", "Const"])
def _unfold(cx, x, dim, size, step):
    """Sliding windows along ``dim``: GatherV2 of the window positions (a [n, size] Const),
    then the window axis moved last, as torch lays it out."""
    from ....errors import UnsupportedOpError

    if not x.shape:  # a 0-d tensor unfolds as a 1-element vector
        out_shape = cx.out()[1]
        y = _unfold(cx, cx.reshape(x, [1], (1,)), 0, size, step)
        return cx.reshape(y, list(out_shape), out_shape)
    rank = len(x.shape)
    d = dim % rank
    length = x.shape[d]
    if length < 0:
        raise UnsupportedOpError(f"%{cx.node.name}: unfold of a symbolic dim has no GE lowering")
    n = (length - size) // step + 1
    index = torch.arange(n).unsqueeze(1) * step + torch.arange(size)
    gathered_shape = tuple(x.shape[:d]) + (n, size) + tuple(x.shape[d + 1:])
    g = cx.emit1("GatherV2", [("x", x), ("indices", cx.const(index)),
                              ("axis", cx.const(d, torch.int64))], None, (x.dtype, gathered_shape))
    perm = [i for i in range(rank + 1) if i != d + 1] + [d + 1]
    return cx.emit1("Transpose", [("x", g), ("perm", cx.const(perm, torch.int64))])
