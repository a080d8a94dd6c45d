"""Output lifetime of the ACL-graph modes: an output (and every view of it) is valid until its
memory is really reused; one the caller still holds when a replay is about to overwrite it is
moved onto a copy first (counted), none is copied when outputs are dropped; a graph Dynamo
drops frees its memory without the cycle collector; input buffers of batch sizes met smallest
first are reported."""
import gc
import re
import warnings
import weakref

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.backends.aclgraph import runner as runner_mod

pytestmark = pytest.mark.usefixtures("record_capture")


def compile_fn(fn, dynamic=False, **options):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    for path, value in options.items():
        cfg.option(path).set(value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True,
                         dynamic=dynamic)


def _model():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    return lambda x: torch.relu(lin(x)) * 3 + 1


def _copies():
    return sum(row.get("output_copies", 0) for row in torchair_dist.capture_summary().values())


def test_views_of_a_kept_output_read_its_values_after_the_next_call():
    g = _model()
    f = compile_fn(g)
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad():
        expected = g(x1)
        f(x1)                      # capture
        y = f(x1)
        v, flat, storage = y[0:2], y.view(-1), y.untyped_storage()
        y2 = f(x2)                 # same shape: replays into the memory y was handed out on
        assert torch.equal(y, expected) and torch.equal(v, expected[0:2])
        assert torch.equal(flat, expected.view(-1))
        assert torch.equal(torch.empty(0).set_(storage, 0, (4, 8), (8, 1)), expected)
        assert torch.equal(y2, g(x2))
    summary = torchair_dist.capture_summary()["graph_0"]
    assert summary["output_copies"] == 1 and summary["output_copy_bytes"] == 4 * 8 * 4


def test_an_output_kept_only_through_a_view_is_preserved():
    g = _model()
    f = compile_fn(g)
    x1 = torch.randn(4, 8)
    with torch.no_grad():
        f(x1)
        v = f(x1)[1:3]             # the handed-out tensor itself is dropped
        f(torch.randn(4, 8))
        assert torch.equal(v, g(x1)[1:3])
    assert _copies() == 1


def test_no_copy_when_outputs_are_dropped_before_the_next_call():
    g = _model()
    f = compile_fn(g, dynamic=True)
    with torch.no_grad():
        for n in (4, 2, 4, 2, 3, 4):
            x = torch.randn(n, 8)
            assert torch.equal(f(x), g(x))
    assert _copies() == 0
    assert torchair_dist.capture_summary()["graph_0"]["output_copies"] == 0


def test_outputs_kept_across_another_sizes_capture_and_replays_are_right():
    g = _model()
    f = compile_fn(g, dynamic=True)
    xs = {n: torch.randn(n, 8) for n in (2, 3, 4)}
    with torch.no_grad():
        kept = {n: f(xs[n]) for n in (2, 3, 4)}   # each kept while the next size captures
        for n in (4, 3, 2, 3):                     # replays of every size
            f(torch.randn(n, 8))
        for n, y in kept.items():
            assert torch.equal(y, g(xs[n])), n


def test_an_output_kept_across_a_forced_recapture_is_right_without_a_copy():
    g = _model()
    f = compile_fn(g, **{"npugraphex_config.force_recapture": True})
    x1 = torch.randn(4, 8)
    with torch.no_grad():
        y = f(x1)
        v = y.view(-1)
        for _ in range(3):
            f(torch.randn(4, 8))
        assert torch.equal(y, g(x1)) and torch.equal(v, g(x1).view(-1))
    assert _copies() == 0  # the dropped capture's memory stays the caller's while held


def test_output_clone_makes_no_preserving_copy():
    g = _model()
    f = compile_fn(g, **{"debug.aclgraph.enable_output_clone": True})
    x1 = torch.randn(4, 8)
    with torch.no_grad():
        y = f(x1)
        f(torch.randn(4, 8))
        f(torch.randn(4, 8))
        assert torch.equal(y, g(x1))
    assert _copies() == 0


def weak_runners(monkeypatch) -> list:
    """Weak references to every ACL runner made from now on (the runners fixture holds them
    strongly, which would keep a dropped graph alive)."""
    made = []
    orig = runner_mod.AclGraphRunner.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        made.append(weakref.ref(self))

    monkeypatch.setattr(runner_mod.AclGraphRunner, "__init__", spy)
    return made


def test_a_dropped_graph_frees_its_memory_without_the_cycle_collector(monkeypatch):
    made = weak_runners(monkeypatch)
    gc.collect()
    gc.disable()
    try:
        f = compile_fn(lambda x: x * 2 + 1)
        x = torch.randn(64)
        for _ in range(3):
            f(x)
        (runner,) = [r() for r in made]
        graph = weakref.ref(next(iter(runner.captures.values())).graph)
        output = next(iter(runner.captures.values())).outputs[0].untyped_storage()
        output_ref = weakref.ref(output)
        del runner, output
        torch._dynamo.reset()
        del f
        assert made[0]() is None, "the runner outlived its graph's reset"
        assert graph() is None and output_ref() is None, "captured memory kept alive"
    finally:
        gc.enable()


def test_sizes_met_smallest_first_warn_once_with_the_bytes_and_the_fix(runners):
    f = compile_fn(lambda x: x * 2, dynamic=True,
                   **{"debug.aclgraph.static_capture_size_limit": 64})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(2, 34):                      # 32 sizes, smallest first
            x = torch.randn(n * 16, 64)
            assert torch.equal(f(x), x * 2)
    memory = runners[0].memory()
    largest = 33 * 16 * 64 * 4
    ratio = memory["input_bytes"] / largest
    hits = [str(w.message) for w in caught if "input buffers" in str(w.message)]
    assert ratio <= 1.25 or len(hits) == 1, (ratio, hits)
    assert len(hits) == 1 and "npugraphex_config.capture_sizes" in hits[0]
    assert re.search(r"hold \d+ bytes, [\d.]+x the \d+ bytes the largest", hits[0]), hits[0]


def test_sizes_met_largest_first_share_one_buffer_and_do_not_warn(runners):
    f = compile_fn(lambda x: x * 2, dynamic=True,
                   **{"debug.aclgraph.static_capture_size_limit": 64})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(33, 1, -1):
            f(torch.randn(n * 16, 64))
    assert runners[0].memory()["input_bytes"] == 33 * 16 * 64 * 4
    assert not [w for w in caught if "input buffers" in str(w.message)]


class _Attend(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(16, 16)
        self.o = torch.nn.Linear(16, 16)

    def forward(self, x, k, v):
        b = x.shape[0]
        q = self.q(x).view(b, 1, 2, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return torch.relu(self.o(a.transpose(1, 2).reshape(b, 1, 16))) + x


def test_piecewise_decode_copies_nothing_when_outputs_are_dropped_and_keeps_a_kept_one():
    m = _Attend().eval()
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.piecewise = True
    f = torch.compile(m, backend=get_npu_backend(compiler_config=cfg), dynamic=True)

    def step(b, n):
        return torch.randn(b, 1, 16), torch.randn(b, 2, n, 8), torch.randn(b, 2, n, 8)

    with torch.no_grad():
        for b in (2, 3):
            for n in (5, 6, 7):
                args = step(b, n)
                torch.testing.assert_close(f(*args), m(*args), rtol=1e-5, atol=1e-5)
        assert _copies() == 0
        args = step(2, 8)
        kept = f(*args)
        f(*step(2, 9))
        torch.testing.assert_close(kept, m(*args), rtol=1e-5, atol=1e-5)
    assert _copies() >= 1


def test_a_dropped_piecewise_graph_frees_its_pieces_captures_without_the_collector(runners):
    m = _Attend().eval()
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.npugraphex_config.piecewise = True
    gc.collect()
    gc.disable()
    try:
        f = torch.compile(m, backend=get_npu_backend(compiler_config=cfg), dynamic=True)
        with torch.no_grad():
            for n in (5, 6):
                f(torch.randn(2, 1, 16), torch.randn(2, 2, n, 8), torch.randn(2, 2, n, 8))
        graphs = [weakref.ref(c.graph) for r in runners for c in r.captures.values()]
        assert len(runners) == 2 and len(graphs) == 2
        torch._dynamo.reset()
        del f
        # the pieces' runner objects hang off FX's split module (a cycle of FX's own); their
        # captures, which hold the memory, are dropped with the graph
        assert all(g() is None for g in graphs), "a piece's captured graph outlived the reset"
        assert all(not r.captures for r in runners)
    finally:
        gc.enable()


def test_without_a_storage_swap_the_stand_in_moves_the_graph_and_kept_views_stay_right(
        monkeypatch):
    """torch 2.11 has no UntypedStorage._swap_data_ptr_: the CPU stand-in, whose graph writes
    through its own tensors, moves them onto fresh memory and leaves the caller's untouched."""
    from torchair_dist.backends.aclgraph import outputs

    monkeypatch.setattr(outputs, "CAN_PRESERVE", False)
    g = _model()
    f = compile_fn(g)
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad():
        f(x1)
        y = f(x1)
        ptr, v = y.untyped_storage().data_ptr(), y[0:2]
        y2 = f(x2)
        assert torch.equal(y, g(x1)) and torch.equal(v, g(x1)[0:2])
        assert y.untyped_storage().data_ptr() == ptr  # the caller kept the memory
        assert torch.equal(y2, g(x2)) and torch.equal(f(x1), g(x1))
