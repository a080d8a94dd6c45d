"""A small GE graph builder on top of the ``ge.proto`` messages.

Ops are appended in topological order. A data input is written ``"<op>:<i>"`` and a control
edge ``"<op>:-1"`` (control edges come after all data inputs). Every op input and output gets a
``TensorDescriptor`` named after its IR port (``x1``, ``x2``, ... as in GE's operator IR), which
is what :mod:`.registry_check` matches against the operator registry. Dynamic ports get an index
suffix (``x0``, ``x1``, ...). Symbolic dimensions are written as -1.

Ops are issued on a :class:`Lane` (``GraphBuilder.lane``; a user stream, see
:mod:`.converters.streams`): every op but ``Data``/``Const``/``NetOutput`` gets the lane's
attributes and takes the lane's pending control edges, and becomes the lane's last op.

Attribute values are typed from their Python type: ``bool`` -> ``b``, ``int`` -> ``i``, ``float``
-> ``f``, ``str`` -> ``s``, ``torch.dtype`` -> ``dt``, ``torch.Tensor`` -> ``t``, a list of those ->
``list`` (empty lists are int lists), a list of int lists -> ``list_list_int``.
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from ...errors import TorchairDistError
from .dtypes import ge_dtype
from .proto import AttrDef, GraphDef, ModelDef, OpDef, TensorDef, TensorDescriptor

LIST = AttrDef.ListValue
Shape = Tuple[int, ...]


class GeBuildError(TorchairDistError, ValueError):
    """An op was added to a GE graph with inputs or attributes the builder cannot encode."""


class TensorRef(NamedTuple):
    """One output of one op: what the next op names as its input."""

    op: str
    index: int
    dtype: torch.dtype
    shape: Shape  # -1 for a symbolic dimension

    def __str__(self) -> str:
        return f"{self.op}:{self.index}"


class Control(NamedTuple):
    """A control edge source (ordering only): ``"<op>:-1"``."""

    op: str

    def __str__(self) -> str:
        return f"{self.op}:-1"


def static_shape(shape: Iterable[Any]) -> Shape:
    """A shape with every non-int (SymInt) dimension written as -1."""
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw row-major bytes of a CPU tensor (no numpy needed)."""
    t = t.detach().to("cpu").contiguous()
    nbytes = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), nbytes) if nbytes else b""


def fill_desc(desc: TensorDescriptor, name: str, dtype: torch.dtype, shape: Sequence[int],
              placement: str = "NPU") -> TensorDescriptor:
    desc.name = name
    desc.dtype = ge_dtype(dtype)
    desc.shape.dim.extend(static_shape(shape))
    desc.layout = "ND"
    desc.device_type = placement
    return desc


def set_attr(attr: AttrDef, value: Any) -> None:
    """Encode one Python value into ``attr`` (see the module docstring for the typing rules)."""
    if isinstance(value, bool):
        attr.b = value
    elif isinstance(value, int):
        attr.i = value
    elif isinstance(value, float):
        attr.f = value
    elif isinstance(value, (str, bytes)):
        attr.s = value.encode() if isinstance(value, str) else value
    elif isinstance(value, torch.dtype):
        attr.dt = ge_dtype(value)
    elif isinstance(value, torch.Tensor):
        fill_tensor_def(attr.t, value)
    elif isinstance(value, (list, tuple)):
        _set_list_attr(attr, list(value))
    else:
        raise GeBuildError(f"cannot encode attribute value {value!r} of type {type(value).__name__}")


def _set_list_attr(attr: AttrDef, values: List[Any]) -> None:
    if values and all(isinstance(v, (list, tuple)) for v in values):
        for row in values:
            attr.list_list_int.list_list_i.add().list_i.extend(int(v) for v in row)
        return
    lst = attr.list
    if not values or all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        lst.val_type = LIST.VT_LIST_INT
        lst.i.extend(values)
    elif all(isinstance(v, bool) for v in values):
        lst.val_type = LIST.VT_LIST_BOOL
        lst.b.extend(values)
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        lst.val_type = LIST.VT_LIST_FLOAT
        lst.f.extend(float(v) for v in values)
    elif all(isinstance(v, str) for v in values):
        lst.val_type = LIST.VT_LIST_STRING
        lst.s.extend(v.encode() for v in values)
    elif all(isinstance(v, torch.dtype) for v in values):
        lst.val_type = LIST.VT_LIST_DATA_TYPE
        lst.dt.extend(ge_dtype(v) for v in values)
    else:
        raise GeBuildError(f"cannot encode mixed list attribute {values!r}")


def fill_tensor_def(tdef: TensorDef, value: torch.Tensor) -> TensorDef:
    fill_desc(tdef.desc, "", value.dtype, tuple(value.shape))
    tdef.data = tensor_bytes(value)
    return tdef


@dataclasses.dataclass
class Lane:
    """Where ops are issued: a stream. ``attrs`` are stamped on each op issued on it,
    ``pending`` are control sources the next op on it must follow, ``last`` is its last op."""

    attrs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    pending: List[str] = dataclasses.field(default_factory=list)
    last: Optional[str] = None


# ops that are not issued on a stream (graph inputs, constants, the output)
UNSCHEDULED = frozenset({"Data", "RefData", "Const", "NetOutput"})

InputSpec = Tuple[str, Union[None, TensorRef, Sequence[TensorRef]]]
OutputSpec = Tuple[str, Union[Tuple[torch.dtype, Sequence[int]], List[Tuple[torch.dtype, Sequence[int]]]]]


class GraphBuilder:
    """Appends GE ops to one ``GraphDef``."""

    def __init__(self, name: str) -> None:
        self.graph = GraphDef(name=name)
        self._names: dict = {}
        self.num_data = 0
        self.lane = Lane()  # the main stream until a converter switches lanes
        self.lanes: Dict[str, Lane] = {"": self.lane}  # by stream tag ("" = the main stream)

    def unique_name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def op(self, op_type: str, inputs: Sequence[InputSpec] = (), attrs: Optional[dict] = None,
           outputs: Sequence[OutputSpec] = (), name: Optional[str] = None,
           control: Iterable[Union[TensorRef, Control, str]] = ()) -> List[TensorRef]:
        """Append one op; return one TensorRef per output (dynamic outputs flattened)."""
        op = self.graph.op.add()
        op.name = self.unique_name(name or op_type)
        op.type = op_type
        sources = [c if isinstance(c, str) else c.op for c in control]
        lane = None if op_type in UNSCHEDULED else self.lane
        if lane is not None and lane.pending:
            sources += lane.pending
            lane.pending = []
        for port, value in inputs:
            if value is None:  # an omitted optional input
                continue
            if isinstance(value, TensorRef):
                self._add_input(op, port, value)
            else:
                for i, ref in enumerate(value):
                    self._add_input(op, f"{port}{i}", ref)
        for src in dict.fromkeys(sources):  # once each, in order
            op.input.append(f"{src}:-1")
        for key, value in (attrs or {}).items():
            if value is not None:
                set_attr(op.attr[key], value)
        if lane is not None:
            for key, value in lane.attrs.items():
                set_attr(op.attr[key], value)
            lane.last = op.name
        refs: List[TensorRef] = []
        for port, spec in outputs:
            specs = [(port, spec)] if isinstance(spec, tuple) else [
                (f"{port}{i}", s) for i, s in enumerate(spec)]
            for out_name, (dtype, shape) in specs:
                fill_desc(op.output_desc.add(), out_name, dtype, shape)
                refs.append(TensorRef(op.name, len(refs), dtype, static_shape(shape)))
        return refs

    def _add_input(self, op: OpDef, port: str, ref: TensorRef) -> None:
        if not isinstance(ref, TensorRef):
            raise GeBuildError(f"input {port!r} of {op.type} {op.name!r} is {ref!r}, not a tensor")
        op.input.append(str(ref))
        fill_desc(op.input_desc.add(), port, ref.dtype, ref.shape)

    def data(self, dtype: torch.dtype, shape: Sequence[int], placement: str = "NPU",
             name: Optional[str] = None, ref_data: bool = False) -> TensorRef:
        """A graph input; Data ops are numbered 0, 1, ... in creation order. ``ref``: a
        ``RefData`` (an input GE may update in place: the caller's buffer, not a copy)."""
        index = self.num_data
        self.num_data += 1
        (ref,) = self.op("RefData" if ref_data else "Data", [], {"index": index}, [("y", (dtype, shape))],
                         name=name or f"arg{index}")
        desc = self.graph.op[-1].output_desc[0]
        desc.device_type = placement
        return ref

    def const(self, value: Any, dtype: Optional[torch.dtype] = None,
              name: Optional[str] = None) -> TensorRef:
        """A constant from a tensor, a Python number or a (nested) list of numbers."""
        if isinstance(value, TensorRef) or (isinstance(value, (list, tuple)) and any(
                isinstance(v, TensorRef) for v in value)):
            raise GeBuildError(f"a Const of {value!r}: a value the graph computes is not a "
                               "constant (pass it as a tensor input, or Pack the list)")
        t = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=dtype)
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        (ref,) = self.op("Const", [], {"value": t}, [("y", (t.dtype, tuple(t.shape)))],
                         name=name or "Const")
        return ref

    def net_output(self, refs: Sequence[TensorRef], control: Iterable[Any] = ()) -> None:
        """The graph's output; it also follows every control edge no op on its lane took."""
        control = [*control, *(src for lane in self.lanes.values() for src in lane.pending)]
        for lane in self.lanes.values():
            lane.pending = []
        self.op("NetOutput", [("x", list(refs))], {}, [], name="NetOutput", control=control)

    def model(self, name: Optional[str] = None) -> ModelDef:
        model = ModelDef(name=name or self.graph.name)
        model.graph.add().CopyFrom(self.graph)
        return model
