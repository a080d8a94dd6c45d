"""PyTorch's fake process group (``init_process_group("fake", store=FakeStore())``: one process
plays a rank; torch's DTensor tests and dry-run tools use it) in every mode, in one process
(issue 31, causes A, B, F): the cross-rank check and the shared-memory transport step aside
with one log line instead of crashing on the store ("Not implemented") or waiting for a peer
that does not exist; max-autotune returns DTensor metadata (the DeviceMesh that travels through
AOT's graph as an opaque object) around the GE graph."""
import logging

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DeviceMesh, DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.base.log import init_logging
from torchair_dist.collectives import failures
from torchair_dist.cpu import shm

MODES = ["npugraph_ex", "max-autotune"]


@pytest.fixture
def fake_group():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield DeviceMesh("cpu", torch.arange(2))
    dist.destroy_process_group()


def compiled(fn, mode, **kwargs):
    cfg = CompilerConfig()
    cfg.mode = mode
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True,
                         **kwargs)


def _step_aside_lines(caplog):
    return [r for r in caplog.records if "step aside" in r.getMessage()]


@pytest.mark.parametrize("mode", MODES)
def test_collectives_on_the_fake_group_step_aside_once(fake_group, mode, caplog, monkeypatch):
    """Shard->Replicate (all_gather) and Partial->Replicate (all_reduce, which the shared-memory
    transport covers) compile and equal eager; the store is never asked to carry a key, no
    shared-memory segment is set up, and one INFO line says why."""
    monkeypatch.setattr(FakeStore, "set", lambda *a: pytest.fail("store.set called"),
                        raising=False)
    monkeypatch.setattr(shm, "_setup", lambda *a: pytest.fail("shared memory set up"))
    init_logging()  # sets the library's level once per process: before caplog's
    caplog.set_level(logging.INFO, logger="torchair_dist")

    def gather(x):
        return torch.mul(x, x).redistribute(x.device_mesh, [Replicate()]).to_local()

    def reduce(x):
        return (x * 2).redistribute(x.device_mesh, [Replicate()]).to_local()

    x = DTensor.from_local(torch.rand(4, 4), fake_group, [Shard(0)], run_check=False)
    p = DTensor.from_local(torch.rand(4), fake_group, [Partial()], run_check=False)
    for fn, arg in ((gather, x), (reduce, p)):
        torch._dynamo.reset()
        assert torch.equal(compiled(fn, mode)(arg), fn(arg))
    lines = _step_aside_lines(caplog)
    assert len(lines) == 1 and "fake" in lines[0].getMessage()


def test_a_store_that_cannot_carry_keys_is_named(tmp_path, caplog):
    """A real group with a store whose methods are not implemented (a bare ``dist.Store``
    subclass): the reason names the store, logged once however often it is asked."""
    init_logging()
    caplog.set_level(logging.INFO, logger="torchair_dist")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "s"), 1), rank=0,
                            world_size=1)
    try:
        _keyless_store_named(caplog)
    finally:
        dist.destroy_process_group()


def _keyless_store_named(caplog):
    store = FakeStore()
    try:
        store.set("torchair_dist/probe", "1")
    except Exception:
        pass
    else:  # this torch's FakeStore carries keys (2.14): the group type still steps aside
        pytest.skip("this torch's FakeStore carries keys")
    reasons = {failures.no_peers_reason(store=store) for _ in range(3)}
    assert len(reasons) == 1
    (reason,) = reasons
    assert reason is not None and "FakeStore" in reason and "cannot carry keys" in reason
    assert len(_step_aside_lines(caplog)) == 1
    assert failures.no_peers_reason() is None  # the group's own FileStore carries keys


@pytest.mark.parametrize("mode", MODES)
def test_dtensor_outputs_return_their_mesh(fake_group, mode):
    """A compiled function that returns a DTensor: AOT's graph returns the DeviceMesh input as
    an opaque object; max-autotune hands the caller's object back around the GE graph (it was
    'input x1 of NetOutput is DeviceMesh, not a tensor')."""
    def fn(x):
        return x * x + 2

    f = compiled(fn, mode)
    for _ in range(2):
        x = DTensor.from_local(torch.rand(4), fake_group, [Shard(0)], run_check=False)
        out, want = f(x), fn(x)
        assert isinstance(out, DTensor) and out.device_mesh == x.device_mesh
        assert out.placements == want.placements
        assert torch.equal(out.to_local(), want.to_local())


def test_non_tensor_attribute_is_returned_around_ge(fake_group):
    """F: a ``get_attr`` of a non-tensor object (a DeviceMesh held by the graph module, as a
    torchbind constant is) converts: never a GE tensor, returned as it is; an op that would
    need it inside GE is still refused by name (no converter)."""
    from torchair_dist.backends.ge import make_runner
    from torchair_dist.backends.ge.fx2ge import convert_graph
    from torchair_dist.cpu.ge_reference import ReferenceRuntime

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(3)
    mesh = graph.get_attr("mesh")
    y = graph.call_function(torch.ops.aten.add.Tensor, (x, 1))
    y.meta["val"] = torch.empty(3)
    graph.output((y, mesh))
    root = torch.nn.Module()
    root.mesh = fake_group
    gm = torch.fx.GraphModule(root, graph)
    converted = convert_graph(gm, [torch.empty(3)], "graph_attr")
    assert converted.outputs == [("ge", 0), ("value", fake_group)]
    runtime = ReferenceRuntime()
    runtime.load(converted.model.SerializeToString())
    a = torch.randn(3)
    out, got_mesh = make_runner(converted, runtime)([a])
    assert torch.equal(out, a + 1) and got_mesh is fake_group
