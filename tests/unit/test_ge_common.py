"""Shared helpers of the GE backend tests (imported by the other test_ge_* modules).

``ge_roundtrip(fn, *inputs)`` traces ``fn`` to an aten graph, converts it to GE, checks the graph
against the operator registry and the converters' declared GE ops, serializes it, loads the
bytes into the reference executor and runs it. ``aot_compile`` goes through torch.compile + AOT
autograd + ``compile_graph`` like the real backend does.
"""
import os
import sys

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from torchair_dist.backends.context import GraphContext  # noqa: E402
from torchair_dist.backends.ge import compile_graph, make_runner  # noqa: E402
from torchair_dist.backends.ge.converters import lookup  # noqa: E402
from torchair_dist.backends.ge.fx2ge import convert_graph  # noqa: E402
from torchair_dist.backends.ge.registry_check import validate  # noqa: E402
from torchair_dist.backends.ge.runtime.reference import ReferenceRuntime  # noqa: E402

BUILT_GRAPHS = []  # every ModelDef the GE tests build, each validated when it was built


@pytest.fixture(autouse=True)
def ge_validate(monkeypatch):
    """compile_graph validates every GE graph against the registry while GE tests run."""
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")
    yield


def check_emits(gm: torch.fx.GraphModule, model) -> None:
    """Every GE op came from an FX node whose converter declares that GE op type."""
    declared = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            declared[node.name] = set(lookup(node.target).emits)
    for op in model.graph[0].op:
        if "_fx_node" in op.attr:
            fx = op.attr["_fx_node"].s.decode()
            assert op.type in declared[fx], (
                f"converter of %{fx} emitted {op.type}, not among its declared {declared[fx]}")


def convert(gm, inputs, name="graph_test", rank=0, world_size=1):
    converted = convert_graph(gm, inputs, name, rank, world_size)
    validate(converted.model)
    check_emits(gm, converted.model)
    BUILT_GRAPHS.append(converted.model)
    return converted


def ge_roundtrip(fn, *inputs, tracing_mode="fake"):
    """(GE outputs as a list, ConvertedGraph, runtime) for ``fn(*inputs)``."""
    gm = make_fx(fn, tracing_mode=tracing_mode)(*inputs)
    converted = convert(gm, inputs)
    runtime = ReferenceRuntime()
    runtime.load(converted.model.SerializeToString())
    runner = make_runner(converted, runtime)
    return list(runner(list(inputs))), converted, runtime


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    result = []
    for o in out:
        result.extend(flat(o) if isinstance(o, (list, tuple)) else [o])
    return result


def assert_same(expected, actual, rtol=1e-5, atol=1e-5):
    expected, actual = flat(expected), flat(actual)
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"expected a tensor, got {a!r}"
            assert e.dtype == a.dtype, f"dtype {a.dtype} != eager {e.dtype}"
            assert tuple(e.shape) == tuple(a.shape), f"shape {tuple(a.shape)} != {tuple(e.shape)}"
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert e == a


def stand_in_config(**options):
    """A max-autotune ``CompilerConfig`` with ``debug__run_eagerly=True``-style options set."""
    from torchair_dist import CompilerConfig

    config = CompilerConfig()
    for path, value in options.items():
        config.option(path.replace("__", ".")).set(value)
    return config


def aot_compile(model, config=None, graphs=None, name="graph_0", dynamic=False, static=(),
                **ctx_kwargs):
    """torch.compile(model) through AOT autograd (inference, input mutations kept in the graph)
    and ``compile_graph``; each AOT graph is appended to ``graphs`` when given."""
    from torch._functorch.aot_autograd import aot_module_simplified

    config = config if config is not None else stand_in_config()

    def backend(gm, example_inputs):
        def fw(g, ex):
            if graphs is not None:
                graphs.append(g)
            mutated = [i for i, n in enumerate(n for n in g.graph.nodes if n.op == "placeholder")
                       if any(u.target is torch.ops.aten.copy_.default and u.args[0] is n
                              for u in n.users)]
            ctx = GraphContext(g, ex, config, list(static), mutated, name, **ctx_kwargs)
            return compile_graph(ctx)
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw,
                                     keep_inference_input_mutations=True)

    return torch.compile(model, backend=backend, fullgraph=True, dynamic=dynamic)
