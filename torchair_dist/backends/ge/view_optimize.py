"""``experimental_config.enable_view_optimize`` (on by default, as in TorchAir): a view that
the consuming op can read in place is not materialised.

TorchAir skips view ops (transpose, permute, t, view, reshape) when converting, and lets the
consumer read the view. Here the case that matters for inference is handled: a ``Transpose``
that swaps the last two dims and feeds a ``MatMulV2`` / ``BatchMatMulV2`` operand becomes that
matmul's ``transpose_x1/x2`` (``adj_x1/x2``) attribute, so the weight of every ``nn.Linear``
(``addmm(b, x, t(w))``) is read as stored instead of being copied transposed on every run. A
``Transpose`` left with no consumer is removed, then a ``Const`` left with none. Other views are
converted as before. Off: the graph is left as converted.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict

from .decode import decode_attr, decode_tensor
from .proto import GraphDef, OpDef

# matmul op -> (data input position, attribute that reads it transposed)
_MATMUL_PORTS = {"MatMulV2": ((0, "transpose_x1"), (1, "transpose_x2")),
                 "BatchMatMulV2": ((0, "adj_x1"), (1, "adj_x2"))}


def _split(edge: str):
    name, _, index = edge.rpartition(":")
    return name, index


def _swaps_last_two(transpose: OpDef, ops: Dict[str, OpDef]):
    """Whether ``transpose`` swaps the last two dims only (its perm a Const)."""
    if len(transpose.input) < 2:
        return False
    perm_op = ops.get(_split(transpose.input[1])[0])
    if perm_op is None or perm_op.type != "Const" or "value" not in perm_op.attr:
        return False
    perm = [int(v) for v in decode_tensor(perm_op.attr["value"].t).flatten().tolist()]
    rank = len(perm)
    return rank >= 2 and perm == list(range(rank - 2)) + [rank - 1, rank - 2]


def fold_transposes_into_matmuls(graph: GraphDef) -> int:
    """Rewrite ``graph`` in place (see the module docstring); returns how many operands were
    folded."""
    ops = {op.name: op for op in graph.op}
    uses = Counter(edge for op in graph.op for edge in op.input)
    folded = 0
    touched = set()  # the folded Transposes and their perm Consts: removed when unused
    for op in graph.op:
        for k, attr in _MATMUL_PORTS.get(op.type, ()):
            if k >= len(op.input):
                continue
            name, index = _split(op.input[k])
            t = ops.get(name)
            if t is None or t.type != "Transpose" or index != "0" or \
                    not _swaps_last_two(t, ops):
                continue
            if attr in op.attr and decode_attr(op.attr[attr]) is True:
                continue
            if op.type == "MatMulV2" and len(t.input_desc[0].shape.dim) != 2:
                continue
            uses[op.input[k]] -= 1
            op.input[k] = t.input[0]
            uses[t.input[0]] += 1
            port = op.input_desc[k].name
            op.input_desc[k].CopyFrom(t.input_desc[0])
            op.input_desc[k].name = port
            op.attr[attr].b = True
            touched.update((t.name, _split(t.input[1])[0]))
            folded += 1
    if folded:
        _remove_unused(graph, uses, touched)
    return folded


def _remove_unused(graph: GraphDef, uses: Counter, candidates: set) -> None:
    """Drop the ``candidates`` none of whose outputs (nor control edge) is used, repeatedly
    (a Transpose first, then the Const it alone read)."""
    while True:
        used = Counter()
        for edge, count in uses.items():
            used[_split(edge)[0]] += count
        dead = [i for i, op in enumerate(graph.op) if op.name in candidates and used[op.name] <= 0]
        if not dead:
            return
        for i in reversed(dead):
            for edge in graph.op[i].input:
                uses[edge] -= 1
            candidates.discard(graph.op[i].name)
            del graph.op[i]
