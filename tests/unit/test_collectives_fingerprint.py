"""Fingerprint, comparison, store exchange and the first-run guard, on a fake 2-rank group."""
import json
import os

import pytest
import torch
import torch.distributed as dist
from torch.fx.experimental.proxy_tensor import make_fx

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from torchair_dist.collectives import consistency, failures, groups
from torchair_dist.collectives import collective_ops as ops  # noqa: E402,F401
from torchair_dist.collectives.consistency import (  # noqa: E402
    CollectiveFaultError, collective_fingerprint, compare, exchange_and_check, guard_first_run)
from torchair_dist.errors import CollectiveMismatchError  # noqa: E402

fn_ops = torch.ops._c10d_functional
td = torch.ops.torchair_dist


@pytest.fixture(scope="module", autouse=True)
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=2)
    yield
    dist.destroy_process_group()


def _program(x):
    name = groups.stable_name_of(None)
    a = fn_ops.wait_tensor(fn_ops.all_reduce(x, "max", "0"))
    b = fn_ops.wait_tensor(fn_ops.all_gather_into_tensor(a, 2, "0"))
    c = td.all_to_all_v(b, [4, 4], [0, 4], [2, 6], [0, 2], name)
    token = td.send(c, 0, 7, name)
    r = fn_ops.wait_tensor(td.recv(x, 0, 8, name))
    fn_ops.wait_tensor(token)
    return fn_ops.wait_tensor(fn_ops.broadcast(r, 0, "0"))


def test_fingerprint_lists_collectives_in_order():
    gm = make_fx(_program, tracing_mode="fake")(torch.randn(2, 2))
    first = next(n for n in gm.graph.nodes if n.op == "call_function")
    first.meta["stack_trace"] = (
        '  File "/home/me/model.py", line 12, in forward\n    dist.all_reduce(h)\n'
        f'  File "{consistency.__file__}", line 99, in all_reduce\n    res = ...\n')
    fp = collective_fingerprint(gm)
    assert [e["op"] for e in fp] == ["all_reduce", "all_gather", "all_to_all", "send", "recv",
                                     "broadcast"]
    assert all(e["group"] == [0, 1] for e in fp)
    assert fp[0]["reduce"] == "max" and fp[0]["shape"] == ["2", "2"] and fp[0]["dtype"] == "float32"
    assert fp[2]["shape"] == ["*", "2"]  # all_to_all rows differ per rank legitimately
    assert (fp[3]["peer"], fp[3]["tag"]) == (0, 7) and (fp[4]["peer"], fp[4]["tag"]) == (0, 8)
    assert fp[5]["root"] == 0
    # the user's frame, not the library's
    assert fp[0]["where"] == 'File "/home/me/model.py", line 12, in forward: dist.all_reduce(h)'
    assert fp[1]["where"] == "all_gather_into_tensor"  # no stack trace: the node name
    json.dumps(fp)  # goes through the store as JSON


def test_symbolic_shapes_are_named_by_order_of_appearance():
    def f(x, y):
        a = fn_ops.wait_tensor(fn_ops.all_reduce(y, "sum", "0"))
        return fn_ops.wait_tensor(fn_ops.all_reduce(x, "sum", "0")), a

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(3, 5), torch.randn(7, 3))
    fp = collective_fingerprint(gm)
    assert fp[0]["shape"] == ["s0", "s1"]
    assert fp[1]["shape"] == ["s1", "s2"]  # x dim 0 == y dim 1 (3): the same symbol


def _e(op, **kw):
    entry = {"op": op, "group": [0, 1], "dtype": "float32", "shape": ["4"], "where": f"{op} line"}
    entry.update(kw)
    return entry


def test_compare_equal_and_first_divergence():
    mine = [_e("all_reduce", reduce="sum"), _e("broadcast", root=0)]
    assert compare(0, mine, {1: [dict(e, where="elsewhere") for e in mine]}) == []
    other = [_e("all_reduce", reduce="sum"), _e("all_gather")]
    (problem,) = compare(0, mine, {1: other})
    assert problem.startswith("collective #1 on group [0, 1]: rank 0 has broadcast(")
    assert "rank 1 has all_gather(float32['4']) on ranks [0, 1] at all_gather line" in problem
    (problem,) = compare(0, mine, {1: mine[:1]})
    assert "rank 1 has nothing" in problem
    (problem,) = compare(0, mine, {1: [_e("all_reduce", reduce="max"), mine[1]]})
    assert "collective #0" in problem and "reduce=max" in problem


def test_compare_groups_independently():
    sub = [_e("all_reduce", reduce="sum", group=[0, 2])]
    world = [_e("all_reduce", reduce="sum", group=[0, 1, 2])]
    # rank 1 is not in group [0, 2]: only the world collectives are compared with it
    assert compare(0, sub + world, {1: world, 2: world + sub}) == []


def test_compare_p2p_pairs_sends_with_receives():
    send = _e("send", peer=1, tag=0)
    recv = _e("recv", peer=0, tag=0)
    assert compare(0, [send], {1: [recv]}) == []
    (problem,) = compare(0, [send], {1: [dict(recv, shape=["5"])]})
    assert "send #0 between ranks 0 and 1 is unmatched" in problem
    (problem,) = compare(0, [send], {1: []})
    assert "rank 1 has nothing" in problem
    # interleaving of directions does not matter, order within one direction does
    back = _e("recv", peer=1, tag=0)
    assert compare(0, [send, back], {1: [_e("send", peer=0, tag=0), recv]}) == []


def test_exchange_through_the_store():
    store = dist.HashStore()
    fp = [_e("all_reduce", reduce="sum")]
    consistency.reset_check_sequence()
    base = f"torchair_dist/consistency/{failures.epoch()}/group:0,1"
    store.set(f"{base}/0/0", json.dumps({"graph": "g", "fp": fp}))
    store.set(f"{base}/0/0/ok", "1")  # rank 0 confirmed its check
    assert exchange_and_check(fp, "g", 5, store=store) >= 0  # rank 1 (fake world)
    assert store.check([f"{base}/0/1/ok"])  # rank 1 confirmed too
    store.set(f"{base}/1/0", json.dumps({"graph": "g", "fp": [_e("all_gather")]}))
    with pytest.raises(CollectiveMismatchError, match="collective #0 on group"):
        exchange_and_check(fp, "g", 5, store=store)
    with pytest.raises(CollectiveMismatchError, match=r"rank\(s\) \[0\] published no .*group:0,1"):
        exchange_and_check(fp, "g", 0.2, store=store)
    assert store.check([f"{base}/2/1"])  # this rank published its fingerprint


def test_scopes_meet_per_group_and_per_pair():
    ring = [_e("send", peer=2, tag=0), _e("recv", peer=0, tag=0),
            _e("all_reduce", reduce="sum", group=[0, 1, 2])]
    scopes = consistency.scopes_of(ring, 1)
    assert sorted(scopes) == ["group:0,1,2", "p2p:0,1", "p2p:1,2"]
    assert scopes["p2p:1,2"][0] == [2] and scopes["group:0,1,2"][0] == [0, 2]


class _Ctx:
    def __init__(self, gm, **options):
        import torchair_dist

        self.gm = gm
        self.graph_name = "graph_t"
        self.config = torchair_dist.CompilerConfig()
        for k, v in options.items():
            setattr(self.config.distributed_config, k, v)


def test_guard_skips_graphs_without_collectives_and_honours_the_switch():
    def runner(args):
        return [args[0] + 1]

    plain = make_fx(lambda x: x + 1)(torch.randn(2))
    assert guard_first_run(runner, _Ctx(plain)) is runner
    gm = make_fx(_program, tracing_mode="fake")(torch.randn(2, 2))
    guarded = guard_first_run(runner, _Ctx(gm, consistency_check=False))
    assert guarded is not runner and guarded._boxed_call
    assert guarded([torch.ones(1)])[0].item() == 2  # no store traffic: the check is off


def test_guard_turns_peer_failures_into_a_clear_error():
    def runner(args):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")

    gm = make_fx(_program, tracing_mode="fake")(torch.randn(2, 2))
    guarded = guard_first_run(runner, _Ctx(gm, consistency_check=False))
    with pytest.raises(CollectiveFaultError, match="rank 1: a collective of graph_t failed"):
        guarded([torch.ones(1)])

    def other(args):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        guard_first_run(other, _Ctx(gm, consistency_check=False))([torch.ones(1)])
