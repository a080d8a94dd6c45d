"""``aclgraph_config.pool_scope``: which captures share one memory pool.

"device": every graph of the process on one device (and rank) captures into one pool (on CPU
the record stand-in's one RecordPool), whose output bookkeeping spans graphs: a replay of graph
A watches the outputs of graph B captured after it in the same pool, preserves one the caller
holds, and the record stand-in's worst-case model overwrites (NaN) one nobody holds. "graph":
one pool per compiled graph, as before. Dropped graphs leave the pool without the collector."""
import gc
import threading
import weakref

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.backends.aclgraph import compile as acl_compile
from torchair_dist.cpu.record_pool import RecordPool
from torchair_dist.base.torch_support import torch_at_least
from test_output_lifetime import _Attend, weak_runners  # the piecewise decode step

pytestmark = pytest.mark.usefixtures("record_capture")


def compile_fn(fn, scope, **options):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.aclgraph_config.pool_scope = scope
    for path, value in options.items():
        cfg.option(path).set(value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True)


def _two_graphs(scope):
    """Graphs A and B (different code, different ops), their eager forms."""
    torch.manual_seed(0)
    la, lb = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def a(x):
        return torch.relu(la(x)) * 3 + 1

    def b(x):
        return torch.tanh(lb(x)) - 2

    return compile_fn(a, scope), compile_fn(b, scope), a, b


def _copies(graph=None):
    return sum(row.get("output_copies", 0) for name, row in
               torchair_dist.capture_summary().items() if graph is None or name == graph)


def _entry(runner):
    (entry,) = runner.captures.values()
    return entry


def test_device_scope_puts_two_graphs_in_one_record_pool(runners):
    fa, fb, _, _ = _two_graphs("device")
    with torch.no_grad():
        fa(torch.randn(4, 8))
        fb(torch.randn(4, 8))
    ra, rb = runners
    assert isinstance(ra.graph_factory.pool, RecordPool)
    assert ra.graph_factory.pool is rb.graph_factory.pool
    assert _entry(ra).graph.pool is _entry(rb).graph.pool
    # A, captured first, watches B's outputs: its replay may reuse their blocks
    assert set(map(id, _entry(rb).held)) <= set(map(id, _entry(ra).watch))


def test_graph_scope_gives_each_graph_its_own_pool(runners):
    fa, fb, _, _ = _two_graphs("graph")
    with torch.no_grad():
        fa(torch.randn(4, 8))
        fb(torch.randn(4, 8))
    ra, rb = runners
    assert ra.graph_factory.pool is not rb.graph_factory.pool
    assert not set(map(id, _entry(rb).held)) & set(map(id, _entry(ra).watch))


def test_an_output_of_b_kept_across_a_replay_of_a_is_preserved(runners):
    fa, fb, a, b = _two_graphs("device")
    with torch.no_grad():
        fa(torch.randn(4, 8))  # A captured first
        y = torch.randn(4, 8)
        kept = fb(y)  # B captured after A, in the same pool
        view = kept[1:3]
        before = _copies(runners[1].name)
        x2 = torch.randn(4, 8)
        torch.testing.assert_close(fa(x2), a(x2), rtol=0, atol=0)  # A replays
        torch.testing.assert_close(kept, b(y), rtol=0, atol=0)
        torch.testing.assert_close(view, b(y)[1:3], rtol=0, atol=0)
    assert _copies(runners[1].name) == before + 1


def test_an_unheld_output_of_b_is_overwritten_by_a_replay_of_a_and_nothing_is_copied(runners):
    """The stand-in's worst case spans graphs: A's replay writes the blocks of B's outputs
    (a device pool may hand them to A's intermediates); B's next replay makes them right."""
    fa, fb, _, b = _two_graphs("device")
    with torch.no_grad():
        fa(torch.randn(4, 8))
        fb(torch.randn(4, 8))  # its outputs dropped by the caller
        fa(torch.randn(4, 8))  # A replays
        assert _entry(runners[1]).outputs[0].isnan().all(), "the model spans graphs"
        assert _copies() == 0, "nothing held: nothing copied"
        y = torch.randn(4, 8)
        torch.testing.assert_close(fb(y), b(y), rtol=0, atol=0)


def test_graph_scope_does_not_overwrite_another_graphs_outputs(runners):
    fa, fb, _, b = _two_graphs("graph")
    with torch.no_grad():
        fa(torch.randn(4, 8))
        y = torch.randn(4, 8)
        fb(y)
        fa(torch.randn(4, 8))
    out = _entry(runners[1]).outputs[0]
    assert not out.isnan().any()
    torch.testing.assert_close(out, b(y), rtol=0, atol=0)


def test_a_dropped_graph_leaves_the_device_pool_without_the_collector(monkeypatch):
    made = weak_runners(monkeypatch)
    # a pool of this test's own (graphs of earlier tests may still be alive in the device's)
    monkeypatch.setattr(acl_compile, "_SHARED_POOLS", weakref.WeakValueDictionary())
    gc.collect()
    gc.disable()
    try:
        fa, fb, _, _ = _two_graphs("device")
        with torch.no_grad():
            fa(torch.randn(4, 8))
            fb(torch.randn(4, 8))
        ra = made[0]()  # graph A stays (the test holds its runner); B is dropped
        b_graph = weakref.ref(_entry(made[1]()).graph)
        b_out = weakref.ref(_entry(made[1]()).outputs[0].untyped_storage())
        pool = weakref.ref(ra.graph_factory.pool)
        torch._dynamo.reset()
        del fa, fb
        assert made[1]() is None, "graph B's runner outlived the reset"
        assert b_graph() is None and b_out() is None, "the shared pool kept B's memory alive"
        watch = _entry(ra).watch
        assert watch and all(h.graph == ra.name for h in watch), "B's outputs still watched"
        assert pool() is not None  # A still uses it
        del ra, watch
        assert pool() is None, "the device pool outlived its last graph"
        assert not [k for k in acl_compile._SHARED_POOLS if k[0] == "device"]
    finally:
        gc.enable()


WIDTH = 16


@torch.compiler.disable
def _write_cache(cache, k):
    cache[: k.shape[0]].copy_(k)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.o = torch.nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x, cache):
        q, k, v = self.qkv(torch.nn.functional.rms_norm(x, (WIDTH,))).chunk(3, dim=-1)
        _write_cache(cache, k)  # a graph break on each side: graphs before and after it
        return x + self.o(torch.sigmoid(q) * v + cache[: x.shape[0]])


class _Decoder(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(32, WIDTH)
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(layers))
        self.head = torch.nn.Linear(WIDTH, 32, bias=False)

    def forward(self, tokens, caches):
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache)
        return self.head(x)


def _generate(step, steps=10):
    tokens, out, logits = torch.tensor([3, 7, 11]), [], []
    caches = [torch.zeros(8, WIDTH) for _ in range(2)]
    for _ in range(steps):
        y = step(tokens, caches)
        logits.append(y.clone())
        tokens = y.argmax(-1)
        out.append(tokens.tolist())
    return out, logits


@pytest.mark.parametrize("scope", ["device", "graph"])
def test_a_decoder_of_several_graphs_equals_eager(scope, runners):
    torch.manual_seed(0)
    m = _Decoder().eval()
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.aclgraph_config.pool_scope = scope
    f = torch.compile(m, backend=get_npu_backend(compiler_config=cfg))
    with torch.no_grad():
        expected, expected_logits = _generate(m)
        got, logits = _generate(f)
    assert got == expected
    for a, b in zip(logits, expected_logits):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    pools = {id(r.graph_factory.pool) for r in runners}
    assert len(runners) >= 2
    assert len(pools) == (1 if scope == "device" else len(runners))
    summary = torchair_dist.capture_summary()
    assert all(row.get("output_copies", 0) == 0 for row in summary.values()), summary


@pytest.mark.skipif(
    not torch_at_least(2, 13),
    reason="thread ranks need torch >= 2.13: torch 2.11's threaded world is never torn down "
           "and breaks the worker's later tests (as in test_thread_ranks.py)")
def test_thread_ranks_never_share_a_pool(runners):
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import spawn_threads_and_init_comms

    results = {}

    @spawn_threads_and_init_comms(world_size=2)
    def run(_):
        rank = dist.get_rank()
        fa, fb, a, b = _two_graphs("device")
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(4, 8) + rank
                torch.testing.assert_close(fa(x), a(x), rtol=0, atol=0)
                torch.testing.assert_close(fb(x), b(x), rtol=0, atol=0)
        results[rank] = threading.get_ident()

    run(None)
    assert sorted(results) == [0, 1]
    by_pool = {}
    for r in runners:
        by_pool.setdefault(id(r.graph_factory.pool), []).append(r)
    assert len(by_pool) == 2 and all(len(rs) == 2 for rs in by_pool.values()), by_pool


def _piecewise_pool_bytes():
    m = _Attend().eval()
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.piecewise = True
    cfg.aclgraph_config.pool_scope = "device"
    f = torch.compile(m, backend=get_npu_backend(compiler_config=cfg), dynamic=True)
    args = torch.randn(2, 1, 16), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(f(*args), m(*args), rtol=1e-5, atol=1e-5)
    summary = torchair_dist.capture_summary()
    return sum(row["pool_bytes"] for row in summary.values()), f


def test_a_device_pool_whose_graphs_were_all_dropped_starts_afresh(monkeypatch):
    """Piece runners hang off FX's split module until the collector runs, and with them the
    device pool; a graph compiled after torch._dynamo.reset() starts a fresh pool (charged the
    blocks again) instead of joining the dropped graph's."""
    # a pool of this test's own (graphs of earlier tests may still be alive in the device's)
    monkeypatch.setattr(acl_compile, "_SHARED_POOLS", weakref.WeakValueDictionary())
    gc.collect()
    gc.disable()
    try:
        first, f = _piecewise_pool_bytes()
        assert first > 0
        old = acl_compile._SHARED_POOLS.get(("device", "cpu", None, None))
        assert old is not None
        del f
        torch._dynamo.reset()
        torchair_dist.reset_capture_report()
        # the reset forgets the shared pools, though the dropped graph (held in a cycle until
        # the collector runs) still holds its own
        assert acl_compile._SHARED_POOLS.get(("device", "cpu", None, None)) is None
        again, f = _piecewise_pool_bytes()
        fresh = acl_compile._SHARED_POOLS.get(("device", "cpu", None, None))
        assert fresh is not None and fresh is not old
        assert again == first, (again, first)
    finally:
        gc.enable()
