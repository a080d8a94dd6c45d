"""Remap table installation and the send/recv preprocessing pass (single process)."""
import os
import warnings

import pytest
import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torchair_dist  # noqa: E402
from torchair_dist.collectives import p2p, remap  # noqa: E402

td = torch.ops.torchair_dist


@pytest.fixture(scope="module", autouse=True)
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


def test_install_is_idempotent_and_covers_the_table():
    from torch._dynamo.trace_rules import is_polyfilled_callable

    assert remap.installed()  # import torchair_dist installed it
    remap.install()
    remap.install()
    for api in remap.REMAPS:
        assert is_polyfilled_callable(api), api
    for api in (dist.broadcast, dist.send, dist.recv, dist.all_to_all, dist.isend):
        assert api in remap.REMAPS


def test_eager_calls_are_untouched():
    assert dist.all_reduce.__module__ == "torch.distributed.distributed_c10d"
    t = torch.ones(2)
    dist.all_reduce(t)  # fake backend: runs the real (fake) c10d call, no tracing assertion


def _p2p_program(x):
    a = td.send(x, 1, 0, "g")
    b = td.recv(x, 1, 0, "g")
    c = td.send(x, 1, 0, "g")
    d = td.send(x, 1, 3, "g")
    return a, b, c, d


def _tags(gm):
    return [(str(n.target).split(".")[1], n.args[2]) for n in gm.graph.nodes
            if n.op == "call_function" and "torchair_dist" in str(n.target)]


def test_tags_count_messages_per_channel_and_user_tag():
    gm = make_fx(_p2p_program, tracing_mode="fake")(torch.ones(2))
    assert p2p.assign_tags(gm) == 4
    s = p2p.TAG_STRIDE
    # sends 0->1 with tag 0: #0, #1; the receive 1->0 is its own channel; user tag 3 its own
    assert _tags(gm) == [("send", 0), ("recv", 0), ("send", 1), ("send", 3 * s)]


def test_max_autotune_switches_to_stable_rdfs_with_a_warning():
    """The stage table runs p2p_order in GE mode only, and only when the strategy is not
    StableRDFS already; the stage body reads no option."""
    from torchair_dist.pipeline import stages

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "max-autotune"
    gm = make_fx(_p2p_program, tracing_mode="fake")(torch.ones(2))
    assert [s.name for s in stages.stages_at(cfg, "dynamo-pass")][:2] == ["send_recv", "p2p_order"]
    with pytest.warns(UserWarning, match="StableRDFS"):
        stages.run_stages(cfg, "dynamo-pass", gm, cfg)
    assert cfg.experimental_config.topology_sorting_strategy.raw == "StableRDFS"
    assert "p2p_order" not in [s.name for s in stages.stages_at(cfg, "dynamo-pass")]

    acl = torchair_dist.CompilerConfig()
    acl.mode = "npugraph_ex"
    assert "p2p_order" not in [s.name for s in stages.stages_at(acl, "dynamo-pass")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stages.run_stages(acl, "dynamo-pass",
                          make_fx(_p2p_program, tracing_mode="fake")(torch.ones(2)), acl)
    assert acl.experimental_config.topology_sorting_strategy.raw == "DFS"


def test_single_p2p_op_keeps_the_strategy():
    from torchair_dist.pipeline import stages

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "max-autotune"
    gm = make_fx(lambda x: td.send(x, 1, 0, "g"), tracing_mode="fake")(torch.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stages.run_stages(cfg, "dynamo-pass", gm, cfg)
    assert cfg.experimental_config.topology_sorting_strategy.raw == "DFS"


def test_async_op_and_broadcast_trace_into_one_graph():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x):
        y = x * 2
        work = dist.all_reduce(y, async_op=True)
        dist.broadcast(x, src=1)
        work.wait()
        return y + x

    torch.compile(fn, backend=backend, fullgraph=True)(torch.ones(2))
    (gm,) = graphs
    names = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any("all_reduce" in n for n in names) and any("broadcast" in n for n in names)
