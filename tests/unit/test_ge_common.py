"""Shared helpers of the GE backend tests (imported by the other test_ge_* modules).

``ge_roundtrip(fn, *inputs)`` traces ``fn`` to an aten graph, converts it to GE, checks the graph
against the operator registry and the converters' declared GE ops, serializes it, loads the
bytes into the reference executor and runs it. ``aot_compile`` compiles with the real backend
(``get_npu_backend``, max-autotune) and records the graphs the GE backend received.
"""
import contextlib
import os
import sys

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from torchair_dist.backends.ge import make_runner  # noqa: E402
from torchair_dist.backends.ge.converters import lookup  # noqa: E402
from torchair_dist.backends.ge.fx2ge import convert_graph  # noqa: E402
from torchair_dist.backends.ge.registry_check import validate  # noqa: E402
from torchair_dist.cpu.ge_reference import ReferenceRuntime  # noqa: E402

BUILT_GRAPHS = []  # every ModelDef the GE tests build, each validated when it was built


@pytest.fixture(autouse=True)
def ge_validate(monkeypatch):
    """The GE backend validates every GE graph against the registry while GE tests run."""
    monkeypatch.setenv("TORCHAIR_DIST_GE_VALIDATE", "1")
    yield


def check_emits(gm: torch.fx.GraphModule, model) -> None:
    """Every GE op came from an FX node whose converter declares that GE op type."""
    declared = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            # plus Cast: the context carries operands an op's IR refuses (bool, bfloat16)
            declared[node.name] = set(lookup(node.target).emits) | {"Cast"}
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


def aot_compile(model, config=None, graphs=None, dynamic=False, static=()):
    """``torch.compile(model, backend=get_npu_backend(config), fullgraph=True)`` — the real
    pipeline (Dynamo remaps, AOT autograd, every pass, the GE backend). Each graph the GE backend
    receives (after the AOT passes) is appended to ``graphs`` when given; the arguments at the
    positions in ``static`` are marked static inputs (parameters, as Dynamo marks a module's)."""
    from torchair_dist import get_npu_backend
    from torchair_dist.pipeline.route import record_graphs

    config = config if config is not None else stand_in_config()
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config),
                             fullgraph=True, dynamic=dynamic)

    def run(*args):
        for i in static:
            torch._dynamo.mark_static_address(args[i])
        with record_graphs() as seen:
            out = compiled(*args)
        if graphs is not None:
            graphs.extend(ctx.gm for ctx in seen)
        return out

    return run


@contextlib.contextmanager
def recording_conversions():
    """The ``ConvertedGraph`` of every graph the real GE backend converts inside the block."""
    import torchair_dist.backends.ge as ge_backend

    seen, original = [], ge_backend.convert_graph

    def record(*args, **kwargs):
        converted = original(*args, **kwargs)
        seen.append(converted)
        return converted

    ge_backend.convert_graph = record
    try:
        yield seen
    finally:
        ge_backend.convert_graph = original


def compile_ge(fn):
    """``fn`` compiled with the real backend in max-autotune (GE), fullgraph, after a reset."""
    from torchair_dist import CompilerConfig, get_npu_backend

    torch._dynamo.reset()
    return torch.compile(fn, backend=get_npu_backend(compiler_config=CompilerConfig()),
                         fullgraph=True)


def record_ge_types(monkeypatch) -> list:
    """A list that collects the GE op types of every graph the GE backend converts from now on
    (until ``monkeypatch`` undoes it)."""
    import torchair_dist.backends.ge as ge_backend

    types: list = []
    convert = ge_backend.convert_graph

    def record(*args, **kwargs):
        converted = convert(*args, **kwargs)
        types.extend(op.type for op in converted.model.graph[0].op)
        return converted

    monkeypatch.setattr(ge_backend, "convert_graph", record)
    return types
