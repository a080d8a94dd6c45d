"""Default decompositions of the collectives, traced on a fake 4-rank process group."""
import os

import pytest
import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from torchair_dist.collectives import groups
from torchair_dist.collectives import collective_ops as ops  # noqa: E402,F401
from torchair_dist.collectives.decompositions import (  # noqa: E402
    counts_and_displacements, default_decompositions)

WORLD = 4
c10d_fn = torch.ops._c10d_functional


@pytest.fixture(scope="module", autouse=True)
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=WORLD)
    yield
    dist.destroy_process_group()


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _trace(fn, *args, decompositions=None):
    table = default_decompositions() if decompositions is None else decompositions
    return make_fx(fn, decomposition_table=table, tracing_mode="fake")(*args)


def test_table_has_both_entries_and_is_fresh():
    table = default_decompositions()
    assert set(table) == {torch.ops.torchair_dist.all_gather.default,
                          c10d_fn.all_to_all_single.default}
    table.clear()
    assert len(default_decompositions()) == 2


def test_list_all_gather_equal_sizes_is_one_gather_plus_slices():
    name = groups.stable_name_of(None)

    def fn(x):
        return torch.ops.torchair_dist.all_gather([torch.empty_like(x)] * WORLD, x, name)

    gm = _trace(fn, torch.randn(2, 3))
    targets = _targets(gm)
    assert targets.count(c10d_fn.all_gather_into_tensor.default) == 1
    assert c10d_fn.wait_tensor.default in targets
    assert torch.ops.torchair_dist.all_gather.default not in targets
    assert c10d_fn.broadcast.default not in targets
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert [tuple(o.meta["val"].shape) for o in outs] == [(2, 3)] * WORLD


def test_list_all_gather_unequal_sizes_is_one_broadcast_per_rank():
    name = groups.stable_name_of(None)

    def fn(x):
        like = [x.new_empty((i + 1, 3)) for i in range(WORLD)]
        return torch.ops.torchair_dist.all_gather(like, x, name)

    gm = _trace(fn, torch.randn(2, 3))  # this is rank 1: 2 rows
    bcasts = [n for n in gm.graph.nodes if n.target is c10d_fn.broadcast.default]
    assert [n.args[1] for n in bcasts] == [0, 1, 2, 3]  # one per group rank, as root
    assert [tuple(n.meta["val"].shape) for n in bcasts] == [(i + 1, 3) for i in range(WORLD)]
    assert c10d_fn.all_gather_into_tensor.default not in _targets(gm)


def test_all_to_all_single_becomes_counts_and_displacements():
    def fn(x):
        return c10d_fn.all_to_all_single(x, [1, 2, 3, 4], [4, 3, 2, 1], "0")

    gm = _trace(fn, torch.randn(10, 2, 3))
    (node,) = [n for n in gm.graph.nodes if n.target is torch.ops.torchair_dist.all_to_all_v.default]
    _, send, send_disp, recv, recv_disp, group = node.args
    assert send == [24, 18, 12, 6] and send_disp == [0, 24, 42, 54]
    assert recv == [6, 12, 18, 24] and recv_disp == [0, 6, 18, 36]
    assert group == groups.stable_group_name(range(WORLD))
    assert tuple(node.meta["val"].shape) == (10, 2, 3)
    assert c10d_fn.all_to_all_single.default not in _targets(gm)


def test_all_to_all_even_split_and_symbolic_sizes():
    assert counts_and_displacements([], 8, 3, 4) == ([6, 6, 6, 6], [0, 6, 12, 18])

    def fn(x):
        return c10d_fn.all_to_all_single(x, [x.shape[0] // 4] * 4, [x.shape[0] // 4] * 4, "0")

    gm = make_fx(fn, decomposition_table=default_decompositions(),
                 tracing_mode="symbolic")(torch.randn(8, 5))
    (node,) = [n for n in gm.graph.nodes if n.target is torch.ops.torchair_dist.all_to_all_v.default]
    assert any(isinstance(c, torch.fx.Node) for c in node.args[1])  # symbolic counts
    assert node.meta["val"].shape[1] == 5


def test_user_decomposition_overrides_the_default():
    import torchair_dist
    from torchair_dist.pipeline.decomposition_table import merge_decompositions

    def mine(*args):
        raise AssertionError("unused")

    merged = merge_decompositions({c10d_fn.all_to_all_single.default: mine})
    assert merged[c10d_fn.all_to_all_single.default] is mine
    assert torch.ops.torchair_dist.all_gather.default in merged
    torchair_dist.get_npu_backend(custom_decompositions={c10d_fn.all_to_all_single.default: mine})


def test_fake_kernels_give_the_documented_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(6, 4)
        out = torch.ops.torchair_dist.all_to_all_v(x, [8, 16], [0, 8], [4, 4], [0, 4], "0")
        assert out.shape == (2, 4)
        assert torch.ops.torchair_dist.send(x, 0, 0, "0").shape == (0,)
        assert torch.ops.torchair_dist.recv(x, 0, 0, "0").shape == (6, 4)
        got = torch.ops.torchair_dist.all_gather([x, x[:2]], x, "0")
        assert [t.shape for t in got] == [(6, 4), (2, 4)]


def test_p2p_ops_survive_dead_code_elimination():
    def fn(x):
        torch.ops.torchair_dist.send(x, 0, 0, "0")
        torch.ops.torchair_dist.recv(x, 2, 0, "0")
        return x + 1

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(2))
    gm.graph.eliminate_dead_code()
    names = [str(t) for t in _targets(gm)]
    assert "torchair_dist.send.default" in names and "torchair_dist.recv.default" in names
