"""The collectives' spec table (torchair_dist/collectives/spec.py) is the one place per-collective
facts live: every row agrees with the op's registered schema, every collective op torch or we
define and every op the remaps/decompositions emit has a row, and each consumer's table is the
spec's view (the check's fingerprint ops, the op library, p2p, overlap, re-inplacing, the cache's
group argument, the GE converters)."""
import ast
import os

import pytest
import torch
import torch.fx

import torchair_dist  # noqa: F401  (installs the op library)
from torchair_dist.backends.ge.converters import CONVERTERS, lookup
from torchair_dist.cache import groups as cache_groups
from torchair_dist.collectives import consistency, p2p, spec
from torchair_dist.collectives import collective_ops as ops
from torchair_dist.cpu import shm_graph  # noqa: F401  (adds the shared-memory twins' rows)
from torchair_dist.passes import overlap, reinplace

ROWS = list(spec.SPECS.values())
IDS = [r.op for r in ROWS]
# ops in the communication namespaces that are not collectives
NOT_COLLECTIVES = spec.WAIT_OPS | {"_c10d_functional::_wrap_tensor_autograd"}
SPEC_NAMESPACES = {"_c10d_functional", "_c10d_functional_autograd", spec.NAMESPACE}


def _schema(row):
    return row.overload()._schema


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_row_agrees_with_the_registered_schema(row):
    schema = _schema(row)
    args = schema.arguments
    assert schema.name == row.op
    assert args[row.group_arg].name == "group_name"
    assert str(args[row.tensor_arg].type) in ("Tensor", "List[Tensor]")
    assert schema.is_mutable == row.inplace
    expected = {"reduce": ("reduce_op",), "root": ("src",), "peer": ("dst", "src"),
                "tag": ("tag",)}
    for field, position in row.fields:
        assert args[position].name in expected[field], (field, args[position].name)
    if row.p2p in ("send", "recv"):
        assert args[row.peer_arg].name == ("dst" if row.p2p == "send" else "src")
        assert args[row.tag_arg].name == "tag"
    else:
        assert row.peer_arg is None and row.tag_arg is None
    if row.inplace_twin:
        twin = spec.SPECS[row.inplace_twin]
        assert twin.inplace and not row.inplace
        assert [a.name for a in _schema(twin).arguments] == [a.name for a in args]
        assert (twin.kind, twin.fields, twin.group_arg) == (row.kind, row.fields, row.group_arg)
    assert not row.reinplace or row.inplace_twin
    if row.namespace == spec.NAMESPACE:
        assert str(schema) == f"{spec.NAMESPACE}::{row.schema}"
    else:
        assert row.schema is None and not row.side_effect


def test_every_collective_op_has_a_row():
    registered = {s.name for s in torch._C._jit_get_all_schemas()
                  if s.name.split("::")[0] in SPEC_NAMESPACES}
    assert registered - NOT_COLLECTIVES == set(spec.SPECS)


def _emitted_ops(path):
    """``ns::name`` of every collective op a module's source calls: ``_fn.x`` / ``_td.x`` /
    ``torch.ops.<ns>.x`` attribute chains and ``op("x")`` (this library's op helper)."""
    aliases = {"_fn": "_c10d_functional", "_td": spec.NAMESPACE}
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                found.add(f"{aliases[base.id]}::{node.attr}")
            elif (isinstance(base, ast.Attribute) and base.attr in SPEC_NAMESPACES
                  and isinstance(base.value, ast.Attribute) and base.value.attr == "ops"):
                found.add(f"{base.attr}::{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "op" and node.args and isinstance(node.args[0], ast.Constant)):
            found.add(f"{spec.NAMESPACE}::{node.args[0].value}")
    return found


def test_every_op_the_remaps_and_decompositions_emit_has_a_fingerprinted_row():
    root = os.path.dirname(spec.__file__)
    emitted = set()
    for module in ("remap.py", "decompositions.py", "collective_ops.py"):
        emitted |= _emitted_ops(os.path.join(root, module))
    emitted -= NOT_COLLECTIVES
    # the remap's list all_gather/all_to_all, the decompositions' outputs, p2p and barrier
    assert {"_c10d_functional::all_reduce", "_c10d_functional::broadcast",
            "torchair_dist::all_gather", "torchair_dist::all_to_all_v", "torchair_dist::send",
            "torchair_dist::recv", "torchair_dist::barrier"} <= emitted
    missing = emitted - set(spec.SPECS)
    assert not missing, f"ops without a spec row: {sorted(missing)}"
    unchecked = [op for op in emitted if spec.SPECS[op].kind is None]
    assert not unchecked, f"emitted ops the cross-rank check would not record: {unchecked}"
    # the re-inplacing pass's output too
    assert all(spec.SPECS[r.inplace_twin].kind for r in ROWS if r.reinplace)


def test_consistency_check_reads_the_spec():
    assert consistency._SPECS == {r.op: r for r in ROWS if r.kind is not None}
    assert consistency._P2P_KINDS == {"send", "recv"}


def test_op_library_reads_the_spec():
    wing = {r.name for r in shm_graph.ROWS}  # the CPU wing's rows, added when it is imported
    library = {r.name: r for r in ROWS if r.namespace == spec.NAMESPACE}
    assert ops.SCHEMAS == {name: r.schema for name, r in library.items() if name not in wing}
    assert set(ops.OPS) | wing == set(library)
    for name, row in library.items():
        effectful = row.overload() in torch.fx.node._side_effectful_functions
        assert effectful == row.side_effect, name


def test_p2p_reads_the_spec():
    assert p2p.P2P_OPS == {r.op for r in ROWS if r.p2p}
    assert set(p2p.TAGGED) == {"torchair_dist::send", "torchair_dist::recv"}


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_overlap_classifies_every_row_as_communication(row):
    assert overlap.COMM_NAMESPACES == spec.COMM_NAMESPACES
    assert spec.COMM_NAMESPACES == {r.namespace for r in ROWS} | spec.EAGER_NAMESPACES
    graph = torch.fx.Graph()
    node = graph.call_function(row.overload(), ())
    # an in-place collective keeps its place relative to everything (a barrier)
    assert overlap.node_kind(node) == (overlap.BARRIER if row.inplace else overlap.COMM)
    assert node in overlap.comm_sequence(torch.fx.GraphModule({}, graph))
    wait = graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (node,))
    assert overlap.node_kind(wait) == overlap.WAIT


def test_reinplace_reads_the_spec():
    assert reinplace.INPLACE_TWINS == {
        r.overload(): spec.SPECS[r.inplace_twin].overload() for r in ROWS if r.reinplace}
    assert reinplace.INPLACE_TWINS  # all_reduce -> all_reduce_


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_cache_group_argument_reads_the_spec(row):
    assert cache_groups.group_arg_position(row.overload()) == row.group_arg
    assert cache_groups.group_arg_position is spec.group_arg_position


def test_group_argument_of_ops_without_a_row_from_the_schema():
    assert spec.group_arg_position(torch.ops.aten.add.Tensor) is None
    lib = torch.library.Library("spectest", "FRAGMENT")
    if not hasattr(torch.ops.spectest, "fused"):
        lib.define("fused(Tensor a, int n, str group_name) -> Tensor")
    assert spec.group_arg_position(torch.ops.spectest.fused.default) == 2


def test_ge_converters_read_the_spec():
    for row in ROWS:
        conv = lookup(row.overload())
        if not row.ge_ops:
            assert conv is None, f"{row.op} has a GE converter but no GE op in its spec row"
            continue
        hcom = {t for t in conv.emits if t.startswith("Hcom")}
        assert hcom == set(row.ge_ops), row.op
    # every converter of a collective namespace op is a spec row's (or the wait's)
    for key in CONVERTERS:
        ns, name = key.split(".")[:2]
        if ns in SPEC_NAMESPACES:
            assert f"{ns}::{name}" in spec.SPECS or f"{ns}::{name}" in spec.WAIT_OPS, key
