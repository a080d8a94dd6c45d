"""The GE converter registry: one widening rule, fail-closed registry questions, registration
that does not depend on the order converter modules are imported in."""
import ast
import os

import pytest
import torch

from torchair_dist.backends.ge.converters import context, registry
from torchair_dist.backends.ge.converters.registry import ConverterIrError

aten = torch.ops.aten
prims = torch.ops.prims
CONVERTERS_DIR = os.path.dirname(registry.__file__)


def test_port_questions_fail_closed():
    # an op the registry does not know, and a port an op does not have, are errors (they used
    # to answer "accepted", so a converter of an op missing from the subset lost its carriers)
    with pytest.raises(ConverterIrError, match="NoSuchGeOp is not in the operator registry"):
        context.port_accepts("NoSuchGeOp", "inputs", "x", "DT_BF16")
    with pytest.raises(ConverterIrError, match="Maximum has no input port 'x9'"):
        context.port_accepts("Maximum", "inputs", "x9", "DT_BF16")
    assert context.port_accepts("Maximum", "inputs", "x1", "DT_FLOAT")


def test_one_carrier_rule():
    # bfloat16 where the port refuses it -> float32; bool -> the first integer type taken
    assert context.carrier_for("Maximum", ["x1"], torch.bfloat16) == torch.float32
    assert context.carrier_for("Maximum", ["x1"], torch.float32) == torch.float32
    assert context.carrier_for("Transpose", ["x"], torch.bool) in (torch.int32, torch.uint8,
                                                                    torch.int8, torch.int64)
    # float16 and int operands of a float-only op are carried by the same table
    assert context.carrier_for("SoftplusV2", ["x"], torch.float16) == torch.float16
    assert context.carrier_for("SoftplusV2", ["x"], torch.int32) == torch.float32
    # float64 has no carrier: computing it in float32 would drop precision silently
    assert context.carrier_for("SoftplusV2", ["x"], torch.float64) is None


def test_a_converter_declaring_an_unknown_op_fails_at_the_next_lookup():
    key = "test_ns.not_an_op.default"

    def fn(cx, x):
        return x

    registry.register([key], ["NoSuchGeOp"])(fn)
    try:
        with pytest.raises(ConverterIrError, match="test_ns.not_an_op.default: NoSuchGeOp"):
            registry.lookup(aten.relu.default)
    finally:
        registry.unregister(key)
        registry._unchecked.clear()
    assert registry.lookup(aten.relu.default) is not None


def test_alias_is_resolved_at_lookup_whatever_the_order():
    target, twin = "test_ns.late.default", "test_ns.twin.default"
    registry.alias(twin, target)  # the alias first, its target registered afterwards
    try:
        assert registry.resolve(twin) is None

        def fn(cx, x):
            return x

        registry.register([target], ["Identity"])(fn)
        assert registry.resolve(twin).fn is fn
        assert registry.resolve(twin).emits == ("Identity",)
        with pytest.raises(ConverterIrError, match="two GE converters registered for "
                                                   "test_ns.twin.default"):
            registry.register([twin], ["Identity"])(fn)
    finally:
        registry.unregister(twin)
        registry.unregister(target)


def test_prims_twins_convert_as_their_aten_op():
    # prims.abs used to get the complex-aware abs only because aten_fft was imported first
    assert registry.lookup(prims.abs.default).fn is registry.lookup(aten.abs.default).fn
    assert "ComplexAbs" in registry.lookup(prims.abs.default).emits


def test_no_module_writes_the_table_past_register():
    offenders = []
    for name in sorted(os.listdir(CONVERTERS_DIR)):
        if not name.endswith(".py") or name == "registry.py":
            continue
        tree = ast.parse(open(os.path.join(CONVERTERS_DIR, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in ("CONVERTERS",
                                                                           "ALIASES"):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, offenders


def test_complex_abs_is_the_modulus_in_max_autotune():
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    fn = torch.compile(lambda z: (z.abs(), torch.abs(z * 2)), fullgraph=True,
                       backend=torchair_dist.get_npu_backend(compiler_config=cfg))
    z = torch.randn(5, dtype=torch.complex64)
    for got, want in zip(fn(z), (z.abs(), (z * 2).abs())):
        torch.testing.assert_close(got, want)
