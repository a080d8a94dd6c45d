"""The record stand-in places a replay's buffers at capture, as a device graph does
(torchair_dist/cpu/record_static.py): intermediates at fixed addresses written through their
``out=`` kernels, views made once, intermediates sharing one arena per pool by lifetime."""
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchair_dist.cpu import record as record_mod
from torchair_dist.cpu.record_pool import RecordPool
from torchair_dist.cpu.record_static import ArenaBusy
from torchair_dist.platform.interfaces import InputFeed

aten = torch.ops.aten


def _gm(fn, *examples):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*examples)


def _attention_like(x, wq, wk):
    """Projections, views and transposes, a softmax, a residual: views between compute ops."""
    q = (x @ wq.t()).view(1, -1, 2, 8).transpose(1, 2)
    k = (x @ wk.t()).view(1, -1, 2, 8).transpose(1, 2)
    s = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)
    return (s @ k).transpose(1, 2).reshape(-1, 16) + x, s.sum(-1)


def _capture(fn, inputs, pool=None, fed=(0,)):
    graph = record_mod.RecordGraph(_gm(fn, *inputs), pool)
    buffers = [t.clone() for t in inputs]
    feed = InputFeed.of_all(buffers) if fed is None else InputFeed(buffers, tuple(fed))
    graph.capture(None, buffers, feed)
    return graph


class _Issued(TorchDispatchMode):
    """The ops a replay issues (as ``aten::name``), not the ones their kernels call."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(f"aten::{func._schema.name.split('::')[-1]}")
        return func(*args, **(kwargs or {}))


def _ops(fn):
    with _Issued() as issued:
        fn()
    return issued.names


def _weights():
    torch.manual_seed(0)
    return torch.randn(6, 16), torch.randn(16, 16), torch.randn(16, 16)


def test_a_replay_issues_no_view_and_writes_placed_intermediates():
    x, wq, wk = _weights()
    graph = _capture(_attention_like, [x, wq, wk])
    assert graph.arena_bytes > 0
    placed = {t.untyped_storage().data_ptr() for t in graph._consts
              if isinstance(t, torch.Tensor)}
    for i in range(3):
        x = torch.randn(6, 16)
        ops = _ops(lambda: graph.replay([x, wq, wk]))
        want = _attention_like(x, wq, wk)
        for got, expected in zip(graph.outputs, want):
            assert torch.equal(got, expected)
        # the compute ops only: the views of placed tensors were made at capture; what is
        # issued besides is the one op with no out= kernel (clone) and its view
        assert ops == ["aten::mm", "aten::mm", "aten::bmm", "aten::mul", "aten::_softmax",
                       "aten::bmm", "aten::clone", "aten::_unsafe_view", "aten::add",
                       "aten::sum"], ops
        assert {t.untyped_storage().data_ptr() for t in graph._consts
                if isinstance(t, torch.Tensor)} == placed  # the same addresses every replay


def test_turned_off_every_op_is_reissued(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_PLACE", "0")
    x, wq, wk = _weights()
    graph = _capture(_attention_like, [x, wq, wk])
    assert graph.arena_bytes == 0
    ops = _ops(lambda: graph.replay([x, wq, wk]))
    assert "aten::view" in ops and "aten::transpose" in ops
    assert all(torch.equal(a, b) for a, b in zip(graph.outputs, _attention_like(x, wq, wk)))


def test_a_bad_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_PLACE", "yes")
    x, wq, wk = _weights()
    with pytest.raises(ValueError, match="TORCHAIR_DIST_CPU_PLACE"):
        _capture(_attention_like, [x, wq, wk])


def test_graphs_of_one_pool_share_one_arena_and_stay_right_interleaved():
    """Two graphs (as two shapes of one model) place their intermediates in the pool's one
    arena, sized for the larger; replayed in turns, each is right every time."""
    pool = RecordPool()
    _, wq, wk = _weights()
    big = _capture(_attention_like, [torch.randn(8, 16), wq, wk], pool)
    small = _capture(_attention_like, [torch.randn(2, 16), wq, wk], pool)
    assert big.arena is small.arena
    assert pool.arena.storage.nbytes() == max(big.arena_bytes, small.arena_bytes)
    for i in range(4):
        for graph, rows in ((small, 2), (big, 8)) if i % 2 else ((big, 8), (small, 2)):
            x = torch.randn(rows, 16)
            graph.replay([x, wq, wk])
            for got, want in zip(graph.outputs, _attention_like(x, wq, wk)):
                assert torch.equal(got, want)


def test_intermediates_reuse_arena_blocks_by_lifetime():
    """A chain of same-sized intermediates needs two blocks, not one per op."""
    def chain(x):
        for _ in range(8):
            x = torch.sin(x) * 2
        return x + 1

    x = torch.randn(64, 64)
    graph = _capture(chain, [x])
    block = x.untyped_storage().nbytes()
    assert graph.arena_bytes <= 2 * block, (graph.arena_bytes, block)
    graph.replay([x])
    assert torch.equal(graph.outputs[0], chain(x))


def test_a_kept_output_view_follows_its_output():
    """An output and a view of it: both are the output's own memory, and a caller who keeps
    them across a replay (the runner moves them onto a copy) and the next replay both read
    the right values."""
    def two_views(x, w):
        y = x @ w
        return y, y.t(), (y * 2).view(-1)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    graph = _capture(two_views, [x, w])
    for _ in range(3):
        x = torch.randn(3, 4)
        graph.replay([x, w])
        for got, want in zip(graph.outputs, two_views(x, w)):
            assert torch.equal(got, want)
    assert graph.outputs[1]._base is graph.outputs[0] or \
        graph.outputs[1].untyped_storage().data_ptr() == \
        graph.outputs[0].untyped_storage().data_ptr()


def test_a_replay_while_another_holds_the_arena_raises():
    """Two threads replaying graphs of one pool at once would overwrite each other's
    intermediates: the second replay raises, naming the problem and the way out."""
    pool = RecordPool()
    x, wq, wk = _weights()
    first = _capture(_attention_like, [x, wq, wk], pool)
    second = _capture(_attention_like, [x, wq, wk], pool)
    with pool.arena.lock:  # a replay of ``first`` is running on another thread
        with pytest.raises(ArenaBusy, match="pool_scope"):
            second.replay([x, wq, wk])
    errors = []

    def replay_many(graph):
        try:
            for _ in range(200):
                graph.replay([x, wq, wk])
        except ArenaBusy as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replay_many, args=(g,)) for g in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # each overlap raised (the lock is taken atomically); the arena is free after
    assert not pool.arena.busy
    first.replay([x, wq, wk])
    assert all(torch.equal(a, b) for a, b in zip(first.outputs, _attention_like(x, wq, wk)))


def test_an_in_place_op_on_a_placed_intermediate_is_reissued():
    """An op writing a placed tensor in place returns that tensor; it is still issued on every
    replay (its result is not mistaken for the op that placed it)."""
    def inplace(x):
        y = x * 3
        y.add_(1)
        z = y.view(-1)
        z.mul_(2)
        return y.sum(0)

    x = torch.randn(4, 5)
    graph = _capture(inplace, [x])
    for _ in range(3):
        x = torch.randn(4, 5)
        graph.replay([x])
        assert torch.equal(graph.outputs[0], inplace(x))
