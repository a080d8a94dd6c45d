"""What a converter gets: the builder, the FX node, and helpers to emit common GE patterns."""
from __future__ import annotations

import functools
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from ....errors import UnsupportedOpError
from ..builder import GraphBuilder, TensorRef, static_shape
from ..dtypes import ge_dtype, ge_dtype_name
from .registry import ConverterIrError

Value = Union[TensorRef, int, float, bool]


def meta_desc(val: Any) -> Tuple[torch.dtype, Tuple[int, ...]]:
    """(dtype, shape with -1 for symbols) of a FakeTensor / SymInt meta value."""
    if isinstance(val, torch.Tensor):
        return val.dtype, static_shape(val.shape)
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return torch.int64, ()
    if isinstance(val, (torch.SymFloat, float)):
        return torch.float32, ()
    if isinstance(val, (torch.SymBool, bool)):
        return torch.bool, ()
    raise UnsupportedOpError(f"cannot describe a GE tensor for meta value {val!r}")


_WIDEN_EXEMPT = frozenset({"Cast", "Data", "RefData", "Const", "NetOutput"})
# bool as 0/1 integers gives another answer (Invert(1) == -2, which reads back as True)
_BOOL_EXEMPT = frozenset({"Invert"})
# THE carrier table: what an operand is carried as when a GE port refuses its dtype, in order of
# preference. Floats narrower than float32 compute in float32 (as torch's own CPU kernels do
# internally); integers the op refuses compute in float32 (the op is a floating-point one);
# bool is carried as 0/1 in the first integer type the port takes.
CARRIERS = {
    torch.bool: (torch.int32, torch.uint8, torch.int8, torch.int64, torch.float32),
    torch.bfloat16: (torch.float32,), torch.float16: (torch.float32,),
    torch.int8: (torch.float32,), torch.uint8: (torch.float32,), torch.int16: (torch.float32,),
    torch.int32: (torch.float32,), torch.int64: (torch.float32,),
}


def _refs(value: Any) -> List[TensorRef]:
    values = [value] if isinstance(value, TensorRef) or not isinstance(
        value, (list, tuple)) else value  # a TensorRef is a NamedTuple
    return [v for v in values if isinstance(v, TensorRef)]


def carrier_for(op_type: str, ports: Sequence[str], dtype: torch.dtype) -> Optional[torch.dtype]:
    """The dtype ``op_type`` computes a ``dtype`` operand in at ``ports`` (input ports): ``dtype``
    itself when every port takes it, else the first of :data:`CARRIERS` every port takes, else
    None (nothing helps: the op is emitted as it is and the registry check names it). The ONE
    decision every converter's widening goes through: :meth:`ConvertContext.emit`'s automatic
    carrying and :meth:`ConvertContext.work_dtype` for a chain computed in a wider type."""
    name = ge_dtype_name(ge_dtype(dtype))
    if all(port_accepts(op_type, "inputs", p, name) for p in ports):
        return dtype
    for carrier in CARRIERS.get(dtype, ()):
        cname = ge_dtype_name(ge_dtype(carrier))
        if all(port_accepts(op_type, "inputs", p, cname) for p in ports):
            return carrier
    return None


def _widen_plan(op_type: str, inputs: Sequence[Tuple[str, Any]]) -> dict:
    """What to carry operands the op's IR refuses as (:func:`carrier_for`): ``{dtype: carrier}``
    for every non-bool dtype (all operands of that dtype: GE ops tie their types), and
    ``{(torch.bool, port): carrier}`` for bool, only at the refusing ports (plus
    ``{torch.bool: carrier}`` for outputs whose port refuses bool). Empty when the op takes its
    operands as they are."""
    if op_type in _WIDEN_EXEMPT:
        return {}
    plan: dict = {}
    bool_ports = []
    for port, value in inputs:
        for dtype in {v.dtype for v in _refs(value)}:
            if dtype == torch.bool:
                if op_type not in _BOOL_EXEMPT and carrier_for(op_type, [port], dtype) != dtype:
                    bool_ports.append(port)
            elif dtype not in plan:
                carrier = carrier_for(op_type, [port], dtype)
                if carrier is not None and carrier != dtype:
                    plan[dtype] = carrier
    if bool_ports:
        carrier = carrier_for(op_type, bool_ports, torch.bool)
        if carrier is not None:
            plan.update({(torch.bool, p): carrier for p in bool_ports})
            plan[torch.bool] = carrier
    return plan


def first_input_port(op_type: str) -> str:
    """The name of ``op_type``'s first input port in the registry."""
    inputs = _op_spec(op_type).get("inputs", [])
    if not inputs:
        raise ConverterIrError(f"GE op {op_type} has no input ports in the operator registry")
    return inputs[0]["name"]


def _op_spec(op_type: str) -> dict:
    from ..registry_check import load_registry

    spec = load_registry().get(op_type)
    if spec is None:
        raise ConverterIrError(
            f"GE op {op_type} is not in the operator registry in use (a converter emits an op the "
            "registry does not know: fix its name, or regenerate the bundled subset with "
            "`make registry`)")
    return spec


@functools.lru_cache(maxsize=None)
def port_accepts(op_type: str, side: str, port: str, dt_name: str) -> bool:
    """Whether ``op_type``'s ``side`` ("inputs"/"outputs") port takes ``dt_name`` per the GE
    registry. Fails closed: an op the registry does not know, or a port the op does not have, is
    a :class:`ConverterIrError` (never a silent "accepted"). True when the registry leaves the
    port's types open. A narrow-float question about a port with no floating types at all is
    answered True: the op is not a float op and widening would not help."""
    from ..registry_check import _allowed

    for spec in _op_spec(op_type).get(side, []):
        if spec["name"] == port or (spec["kind"] == "dynamic" and port.startswith(spec["name"])):
            allowed = _allowed(spec.get("type_expr", ""), tuple(spec.get("dtypes") or ()))
            if allowed is None or dt_name in allowed:
                return True
            return dt_name in ("DT_BF16", "DT_FLOAT16") and "DT_FLOAT" not in allowed
    raise ConverterIrError(f"GE op {op_type} has no {side[:-1]} port {port!r} in the operator "
                          "registry")


class ConvertContext:
    """Per-node conversion state handed to converters as ``cx``."""

    def __init__(self, builder: GraphBuilder, rank: int = 0, world_size: int = 1) -> None:
        self.b = builder
        self.rank = rank
        self.world_size = world_size
        self.node: Optional[torch.fx.Node] = None
        self.keep_alive: List[str] = []  # side-effect ops NetOutput must depend on
        self.data_index: dict = {}  # Data op name -> FX placeholder index
        self.mutations: List[Tuple[int, TensorRef]] = []  # (placeholder index, new value)
        self.ref_data: dict = {}  # RefData op name -> the FX node that updates it in place
        self.inplace_done: set = set()  # RefData op names already updated in place
        self.assigned: set = set()  # RefData op names written back by Assign (enable_ref_data)
        self.rng_key: Optional[TensorRef] = None  # the per-call random key input (aten_random)
        self.rng_ops = 0  # random ops converted so far: each gets its own counter

    def random_key_counter(self) -> Tuple[TensorRef, TensorRef]:
        """The (key, counter) pair of a stateless GE random op: the key is one uint64 graph
        input the runner draws from torch's generator before every run (so a seed set with
        ``torch.manual_seed`` repeats the draws and each call draws anew); the counter is a
        Const distinct per random op of the graph, so two ops never draw the same numbers."""
        if self.rng_key is None:
            self.rng_key = self.b.data(torch.uint64, (1,), placement="CPU", name="rng_key")
        self.rng_ops += 1
        return self.rng_key, self.const([self.rng_ops, 0], torch.uint64)

    # -- the node being converted -------------------------------------------------------------
    @property
    def val(self) -> Any:
        return self.node.meta.get("val") if self.node is not None else None

    def out(self, i: Optional[int] = None) -> Tuple[torch.dtype, Tuple[int, ...]]:
        """Descriptor of the node's output (or its i-th output for tuple-valued nodes)."""
        val = self.val if i is None else self.val[i]
        return meta_desc(val)

    @property
    def out_dtype(self) -> torch.dtype:
        return self.out()[0]

    # -- emitting ------------------------------------------------------------------------------
    def emit(self, op_type: str, inputs: Sequence[Tuple[str, Any]], attrs: Optional[dict] = None,
             outputs: Optional[Sequence[Tuple[str, Any]]] = None,
             control: Sequence[Any] = ()) -> List[TensorRef]:
        if outputs is None:
            outputs = [("y", self.out())]
        plan = _widen_plan(op_type, inputs)
        if plan:
            return self._emit_widened(op_type, inputs, attrs, outputs, control, plan)
        refs = self.b.op(op_type, inputs, attrs, outputs, name=self._op_name(op_type),
                         control=control)
        if self.node is not None:
            self.b.graph.op[-1].attr["_fx_node"].s = self.node.name.encode()
        return refs

    def emit1(self, op_type: str, inputs: Sequence[Tuple[str, Any]], attrs: Optional[dict] = None,
              desc: Optional[Tuple[torch.dtype, Sequence[int]]] = None, port: str = "y") -> TensorRef:
        return self.emit(op_type, inputs, attrs, [(port, desc or self.out())])[0]

    def _emit_widened(self, op_type, inputs, attrs, outputs, control, plan) -> List[TensorRef]:
        """The op computed on carried operands (see :func:`_widen_plan`): GE's Maximum, Relu,
        TensorMove, ... take no bfloat16 on this registry; Transpose, StridedSlice, Less, ...
        no bool. Operands are cast to their carrier; an output of a carried dtype whose port
        refuses it is produced in the carrier and cast back (a bool reads back as nonzero)."""
        def up(port, v):
            if not isinstance(v, TensorRef):
                return v
            carrier = plan.get((v.dtype, port)) if v.dtype == torch.bool else plan.get(v.dtype)
            return self.cast(v, carrier) if carrier is not None else v

        def carried(port, d):
            if not (isinstance(d, tuple) and len(d) == 2 and d[0] in plan):
                return None
            if d[0] != torch.bool or not port_accepts(
                    op_type, "outputs", port, ge_dtype_name(ge_dtype(d[0]))):
                return plan[d[0]]  # non-bool: the op's types are tied, its output is carried too
            return None

        wide = [(p, up(p, value) if isinstance(value, TensorRef) or value is None
                 else [up(p, v) for v in value]) for p, value in inputs]
        flat = []  # (wanted desc, carrier or None) per output ref, dynamic ports flattened
        outs = []
        for p, d in outputs:
            descs = d if isinstance(d, list) else [d]
            new = []
            for one in descs:
                c = carried(p, one)
                flat.append((one, c))
                new.append((c, one[1]) if c is not None else one)
            outs.append((p, new if isinstance(d, list) else new[0]))
        refs = self.b.op(op_type, wide, attrs, outs, name=self._op_name(op_type), control=control)
        if self.node is not None:
            self.b.graph.op[-1].attr["_fx_node"].s = self.node.name.encode()
        return [self.cast(r, d[0]) if c is not None else r for r, (d, c) in zip(refs, flat)]

    def work_dtype(self, op_type: str, dtype: torch.dtype, port: Optional[str] = None
                   ) -> torch.dtype:
        """The dtype to compute a chain around ``op_type`` in for a ``dtype`` value: ``dtype``
        when ``op_type``'s ``port`` (default: its first input) takes it, else its carrier
        (:func:`carrier_for`, the same rule :meth:`emit` carries operands by)."""
        port = port or first_input_port(op_type)
        carrier = carrier_for(op_type, [port], dtype)
        if carrier is None:
            where = f"%{self.node.name}: " if self.node is not None else ""
            raise UnsupportedOpError(f"{where}GE's {op_type} takes no {dtype} at {port!r} and no "
                                     "carrier type it takes holds that dtype exactly")
        return carrier

    def require_float(self, x: TensorRef, ge_type: str) -> None:
        """Refuse an integer/bool operand of a GE op whose IR computes in floating point only
        (MatMulV2, Conv2D, AvgPoolV2 take no int64/int32 here)."""
        if not (x.dtype.is_floating_point or x.dtype.is_complex):
            raise UnsupportedOpError(
                f"%{self.node.name}: {self.node.target} of a {x.dtype} tensor: GE's {ge_type} "
                "takes floating-point inputs only (cast to float before the op)")

    def sinks_reading(self, op_name: str) -> List[str]:
        """The ops emitted so far that depend on ``op_name``'s outputs (directly or through
        other ops) and feed none of the others: once they ran, every reader of it has run."""
        users: dict = {}
        for op in self.b.graph.op:
            for src in op.input:
                users.setdefault(src.rsplit(":", 1)[0], []).append(op.name)
        seen, stack = set(), list(users.get(op_name, ()))
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(users.get(name, ()))
        return sorted(n for n in seen if not any(u in seen for u in users.get(n, ())))

    def _op_name(self, op_type: str) -> str:
        return op_type if self.node is None else f"{self.node.name}_{op_type}"

    def const(self, value: Any, dtype: Optional[torch.dtype] = None) -> TensorRef:
        """A Const of ``value``; a scalar the graph computes (a symbolic size or a SymFloat,
        a shape-[] TensorRef) is the value itself, cast to ``dtype``."""
        if isinstance(value, TensorRef):
            return self.cast(value, dtype) if dtype is not None else value
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise UnsupportedOpError(f"symbolic value {value} reached a converter unconverted")
        ref = self.b.const(value, dtype, name=self._op_name("Const"))
        if self.node is not None:
            self.b.graph.op[-1].attr["_fx_node"].s = self.node.name.encode()
        return ref

    def cast(self, x: TensorRef, dtype: torch.dtype) -> TensorRef:
        if x.dtype == dtype:
            return x
        return self.emit1("Cast", [("x", x)], {"dst_type": int(ge_dtype(dtype))}, (dtype, x.shape))

    def tensor(self, x: Value, dtype: Optional[torch.dtype] = None) -> TensorRef:
        """``x`` as a GE tensor of ``dtype``: a TensorRef cast if needed, a number as a Const."""
        if isinstance(x, TensorRef):
            return self.cast(x, dtype) if dtype is not None else x
        if isinstance(x, (torch.SymInt, torch.SymFloat)):
            raise UnsupportedOpError(f"symbolic value {x} reached a converter unconverted")
        return self.const(x, dtype)

    def static_int(self, value: Any, fx_arg: Any, what: str) -> int:
        """``value`` as a Python int where GE takes an attribute (conv ``groups``/``pads``):
        an int as it is; a symbolic size (a TensorRef whose FX argument ``fx_arg`` is a
        SymInt) specialized to its value in this compile, with a guard so that another
        value recompiles. Refused by name once the guards are fixed (a backward compiled
        after its forward ran: a guard added then would be ignored)."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        sym = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else fx_arg
        if isinstance(sym, int) and not isinstance(sym, bool):
            return sym
        if isinstance(sym, torch.SymInt):
            env = sym.node.shape_env
            if env is not None and not getattr(env, "frozen", False):
                from torch.fx.experimental.symbolic_shapes import guard_int

                return guard_int(sym)
        raise UnsupportedOpError(
            f"%{self.node.name}: {self.node.target}'s {what} is the symbolic value {sym}, which "
            "GE takes as an attribute (a constant) and which can no longer be fixed by a guard "
            "here; make it a Python constant, mark the size static "
            "(torch._dynamo.mark_static), or compile with mode='npugraph_ex'")

    def static_ints(self, values: Any, fx_args: Any, what: str) -> List[int]:
        """:meth:`static_int` of each element of an int list (or of one int)."""
        if not isinstance(values, (list, tuple)):
            return [self.static_int(values, fx_args, what)]
        fx_args = list(fx_args) if isinstance(fx_args, (list, tuple)) else [None] * len(values)
        return [self.static_int(v, a, what) for v, a in zip(values, fx_args)]

    def static_shape(self, ref: TensorRef, fx_arg: Any, what: str) -> TensorRef:
        """``ref`` with every symbolic dim fixed by a guard (:meth:`static_int` of its FX
        value's sizes): for lowerings that need static sizes (another size recompiles)."""
        if all(d >= 0 for d in ref.shape):
            return ref
        val = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOpError(f"%{self.node.name}: {self.node.target}'s {what} has the "
                                     f"symbolic shape {ref.shape}, which this lowering needs static")
        return ref._replace(shape=tuple(self.static_int(d, v, f"{what} size")
                                        for d, v in zip(ref.shape, val.shape)))

    def int_list(self, values: Sequence[Any], dtype: torch.dtype = torch.int64) -> TensorRef:
        """A 1-D int tensor from ints and/or scalar int refs (symbolic sizes): Const or Pack."""
        if all(isinstance(v, int) for v in values):
            return self.const(list(values), dtype)
        parts = [self.tensor(v, dtype) for v in values]
        return self.emit1("Pack", [("x", parts)], {"axis": 0, "N": len(parts)},
                          (dtype, (len(parts),)))

    def shape_of(self, x: TensorRef) -> TensorRef:
        """The run-time shape of ``x`` as an int64 tensor (a Const when fully static)."""
        if all(d >= 0 for d in x.shape):
            return self.const(list(x.shape), torch.int64)
        return self.emit1("Shape", [("x", x)], {"dtype": int(ge_dtype(torch.int64))},
                          (torch.int64, (len(x.shape),)))

    def dim(self, x: TensorRef, i: int) -> Any:
        """Dimension i of x: an int when static, else a shape-[] int64 ref read at run time."""
        i = i % len(x.shape)
        if x.shape[i] >= 0:
            return x.shape[i]
        return self.emit1("GatherV2", [("x", self.shape_of(x)), ("indices", self.const(i, torch.int64)),
                                       ("axis", self.const(0, torch.int64))], None, (torch.int64, ()))

    def dims(self, x: TensorRef) -> List[Any]:
        """Every dimension of x (see :meth:`dim`); one Shape op serves all symbolic ones."""
        if all(d >= 0 for d in x.shape):
            return list(x.shape)
        shape = self.shape_of(x)
        return [d if d >= 0 else self.emit1(
            "GatherV2", [("x", shape), ("indices", self.const(i, torch.int64)),
                         ("axis", self.const(0, torch.int64))], None, (torch.int64, ()))
            for i, d in enumerate(x.shape)]

    def reshape(self, x: TensorRef, shape: Sequence[Any], desc_shape: Sequence[int]) -> TensorRef:
        return self.emit1("Reshape", [("x", x), ("shape", self.int_list(shape))], None,
                          (x.dtype, tuple(desc_shape)))
