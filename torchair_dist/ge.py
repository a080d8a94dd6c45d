"""What a user's GE converter is written with (TorchAir's ``torchair.ge`` names).

A converter turns one FX node (an aten op or a user's ``torch.library`` op) into GE ops::

    from torchair_dist import register_fx_node_ge_converter, ge

    @register_fx_node_ge_converter(torch.ops.mylib.scaled_add.default)
    def convert(x, y, scale: float, meta_outputs: ge.TensorSpec = None):
        scaled = ge.custom_op("Mul", inputs={"x1": y, "x2": ge.Const(scale, dtype=x.dtype)},
                              outputs=["y"])
        return ge.custom_op("Add", inputs={"x1": x, "x2": scaled}, outputs=["y"])

The converter gets the node's arguments with every tensor a :class:`Tensor` (lists stay lists,
Python numbers stay numbers) and ``meta_outputs``: a :class:`TensorSpec` of the node's output
(a list of them for a tuple output). It returns a :class:`Tensor` or a tuple/list of them.
Ops are emitted with :func:`custom_op` (any op type of the GE registry), :func:`Const` and
:func:`Cast` and :func:`Clone`. On this machine the graph runs on the CPU reference executor, which has a kernel
for the op types the built-in converters emit (``custom_op`` of another type converts and
validates, and fails to load there with a message naming the op type).
"""
from __future__ import annotations

import contextvars
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

from .backends.ge.builder import TensorRef
from .backends.ge.converters import registry as _registry
from .backends.ge.converters.context import meta_desc
from .backends.ge.dtypes import ge_dtype, torch_dtype
from .backends.ge.proto import DataType as _ProtoDataType
from .errors import TorchairDistError, UnsupportedOpError

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("torchair_dist_ge_cx", default=None)


class GeConverterError(TorchairDistError, ValueError):
    """A user's GE converter emitted something the GE registry or the builder rejects."""


class DataType:
    """GE data types (``DataType.DT_FLOAT`` ...): the integer values of GE's ``DT_*`` enum."""


for _name, _value in _ProtoDataType.items():
    setattr(DataType, _name, _value)


class Format:
    """GE tensor formats (values of GE's ``Format`` enum); this backend lays tensors out ND."""

    FORMAT_NCHW = 0
    FORMAT_NHWC = 1
    FORMAT_ND = 2
    FORMAT_NC1HWC0 = 3
    FORMAT_FRACTAL_Z = 4
    FORMAT_FRACTAL_NZ = 29


class TensorSpec:
    """What the node's output will be (from its FX meta): ``dtype`` (a ``DataType`` value),
    ``size`` (ints, -1 for a symbolic dim), ``rank``."""

    def __init__(self, val: Any) -> None:
        dtype, shape = meta_desc(val)
        self.dtype = int(ge_dtype(dtype))
        self.size = list(shape)
        self.rank = len(shape)

    def __repr__(self) -> str:
        return f"TensorSpec(dtype={_ProtoDataType.Name(self.dtype)}, size={self.size})"


class Tensor:
    """One output of a GE op, as a converter sees it."""

    def __init__(self, ref: TensorRef) -> None:
        self.ref = ref

    @property
    def dtype(self) -> int:
        return int(ge_dtype(self.ref.dtype))

    @property
    def rank(self) -> int:
        return len(self.ref.shape)

    @property
    def shape(self) -> List[int]:
        return list(self.ref.shape)

    @property
    def node(self) -> str:
        """The name of the GE op this tensor comes from."""
        return self.ref.op

    def __repr__(self) -> str:
        return f"ge.Tensor({self.ref.op}:{self.ref.index}, {self.ref.dtype}, {self.shape})"


def _cx():
    cx = _CURRENT.get()
    if cx is None:
        raise GeConverterError("torchair_dist.ge ops can only be used inside a GE converter "
                               "(a function registered with register_fx_node_ge_converter)")
    return cx


def _torch_dtype(dtype: Any) -> Optional[torch.dtype]:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    return torch_dtype(int(dtype))


def _ref(x: Any) -> Any:
    return x.ref if isinstance(x, Tensor) else x


def Const(v: Any, dtype: Any = None, node_name: Optional[str] = None,  # noqa: N802
          readable: bool = True) -> Tensor:
    """A constant (a number, nested lists, or a tensor); ``dtype`` a ``DataType`` value or a
    torch dtype (default: float32 for floats, int64 for ints, as torch infers)."""
    cx = _cx()
    return Tensor(cx.const(v, _torch_dtype(dtype)))


def Cast(x: Tensor, *, dst_type: Any, dependencies: Sequence[Tensor] = (),  # noqa: N802
         node_name: Optional[str] = None) -> Tensor:
    """``x`` converted to ``dst_type`` (a ``DataType`` value or a torch dtype)."""
    cx = _cx()
    dtype = _torch_dtype(dst_type)
    ref = _ref(x)
    (out,) = cx.emit("Cast", [("x", ref)], {"dst_type": int(ge_dtype(dtype))},
                     [("y", (dtype, ref.shape))], control=[_ref(d) for d in dependencies])
    return Tensor(out)


def Clone(x: Tensor, *, dependencies: Sequence[Tensor] = (),  # noqa: N802
          node_name: Optional[str] = None) -> Tensor:
    """A copy of ``x`` (GE ``Identity``), ordered after ``dependencies``."""
    cx = _cx()
    ref = _ref(x)
    (out,) = cx.emit("Identity", [("x", ref)], None, [("y", (ref.dtype, ref.shape))],
                     control=[_ref(d) for d in dependencies])
    return Tensor(out)


def custom_op(op_type: str, *args: Any, inputs: Optional[Dict[str, Any]] = None,
              outputs: Optional[Sequence[str]] = None, attrs: Optional[Dict[str, Any]] = None,
              node_name: Optional[str] = None) -> Union[Tensor, tuple]:
    """Emit one GE op of ``op_type``: ``inputs`` maps IR input names to Tensors (a list for a
    dynamic input, None for an absent optional one), ``outputs`` names the IR outputs (default
    ``["y"]``), ``attrs`` maps attribute names to Python values (``attr.*`` wrappers accepted).
    Output dtypes/shapes are the node's own (``meta_outputs``) when the counts match, else the
    first input's. Returns one Tensor, or a tuple for several outputs. An op type the GE
    registry does not know raises."""
    from .backends.ge.registry_check import load_registry

    if args:
        raise GeConverterError(f"custom_op({op_type!r}): pass inputs by name (inputs={{...}})")
    if op_type not in load_registry() and op_type not in ("Cast",):
        raise GeConverterError(f"custom_op: {op_type!r} is not an op type of the GE operator "
                               "registry")
    cx = _cx()
    outputs = list(outputs or ["y"])
    ins = [(name, [_ref(t) for t in v] if isinstance(v, (list, tuple)) else _ref(v))
           for name, v in (inputs or {}).items()]
    val = cx.val
    if isinstance(val, (list, tuple)) and len(val) == len(outputs):
        descs = [meta_desc(v) for v in val]
    elif len(outputs) == 1 and val is not None and not isinstance(val, (list, tuple)):
        descs = [meta_desc(val)]
    else:
        first = next((r for _, r in ins if isinstance(r, TensorRef)), None)
        if first is None:
            raise GeConverterError(f"custom_op({op_type!r}): cannot tell its output dtype/shape")
        descs = [(first.dtype, first.shape)] * len(outputs)
    plain = {k: getattr(v, "value", v) for k, v in (attrs or {}).items()}
    refs = cx.emit(op_type, ins, plain, list(zip(outputs, descs)))
    tensors = tuple(Tensor(r) for r in refs)
    return tensors[0] if len(tensors) == 1 else tensors


class attr:  # noqa: N801 - TorchAir's module name
    """Typed attribute values for :func:`custom_op` (plain Python values work as well)."""

    class _Value:
        def __init__(self, value: Any) -> None:
            self.value = value

    class Int(_Value):
        pass

    class Float(_Value):
        def __init__(self, value: Any) -> None:
            super().__init__(float(value))

    class Bool(_Value):
        pass

    class Str(_Value):
        pass

    class ListInt(_Value):
        pass

    class ListFloat(_Value):
        def __init__(self, value: Any) -> None:
            super().__init__([float(v) for v in value])

    class DataType(_Value):
        def __init__(self, value: Any) -> None:
            super().__init__(_torch_dtype(value))


def _wrap(value: Any) -> Any:
    if isinstance(value, TensorRef):
        return Tensor(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _unwrap(value: Any, target: Any) -> Any:
    if isinstance(value, Tensor):
        return value.ref
    if isinstance(value, (list, tuple)):
        return [_unwrap(v, target) for v in value]
    raise GeConverterError(f"the GE converter of {target} returned {value!r}; it must return "
                           "ge.Tensor values (one, or a tuple/list of them)")


def register_fx_node_ge_converter(aten_op: Any) -> Callable[[Callable], Callable]:
    """Decorator: ``fn`` converts FX nodes calling ``aten_op`` (an OpOverload such as
    ``torch.ops.aten.add.Tensor`` or ``torch.ops.mylib.op.default``, or a packet for every
    overload). It replaces a built-in converter of the same op."""
    if not isinstance(aten_op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        raise UnsupportedOpError(f"register_fx_node_ge_converter expects an op such as "
                                 f"torch.ops.aten.add.Tensor, got {aten_op!r}")

    def deco(fn: Callable) -> Callable:
        def convert(cx, *args, **kwargs):
            val = cx.val
            spec = ([TensorSpec(v) for v in val] if isinstance(val, (list, tuple))
                    else TensorSpec(val) if val is not None else None)
            token = _CURRENT.set(cx)
            try:
                out = fn(*_wrap(list(args)), **{k: _wrap(v) for k, v in kwargs.items()},
                         meta_outputs=spec)
            finally:
                _CURRENT.reset(token)
            return _unwrap(out, aten_op)

        key = _registry.target_key(aten_op)
        _registry.unregister(key)
        _registry.register([aten_op], ())(convert)
        return fn

    return deco


__all__ = ["register_fx_node_ge_converter", "custom_op", "Const", "Cast", "Clone", "DataType",
           "Format",
           "Tensor", "TensorSpec", "attr", "GeConverterError"]
