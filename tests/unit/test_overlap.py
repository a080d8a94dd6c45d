"""Unit tests of the overlap scheduling pass (torchair_dist/passes/overlap.py).

Graphs are built by hand or at random with a test-only communication op library ``ovltest``
(an issue op that doubles its input and a wait), registered as a communication namespace for
the duration of the tests, so the graphs run in one process without a process group. Real
``_c10d_functional`` graphs are checked structurally (they are not executed here).
"""
import os
import random

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import pytest
import torch
import torch.fx

from torchair_dist import CompilerConfig
from torchair_dist.passes import overlap

aten = torch.ops.aten

_lib = torch.library.Library("ovltest", "FRAGMENT")
if not hasattr(torch.ops.ovltest, "all_reduce"):
    _lib.define("all_reduce(Tensor x) -> Tensor")
    _lib.define("wait_tensor(Tensor x) -> Tensor")
    _lib.impl("all_reduce", lambda x: x * 2, "CompositeExplicitAutograd")
    _lib.impl("wait_tensor", lambda x: x.clone(), "CompositeExplicitAutograd")
ISSUE = torch.ops.ovltest.all_reduce.default
WAIT = torch.ops.ovltest.wait_tensor.default
C10D_AR = torch.ops._c10d_functional.all_reduce.default
C10D_WAIT = torch.ops._c10d_functional.wait_tensor.default


@pytest.fixture(autouse=True)
def _test_namespace(monkeypatch):
    monkeypatch.setattr(overlap, "COMM_NAMESPACES", overlap.COMM_NAMESPACES | {"ovltest"})


def _config(on=True):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.distributed_config.overlap_collectives = on
    return cfg


def _order(gm):
    return [n.name for n in gm.graph.nodes]


def _snapshot(gm):
    """name -> (target, arg names) of every node: the graph's nodes and edges."""
    def names(a):
        return [x.name for x in a] if isinstance(a, (list, tuple)) else (
            a.name if isinstance(a, torch.fx.Node) else a)
    return {n.name: (n.target, [names(a) for a in n.args]) for n in gm.graph.nodes}


def _comm_names(gm):
    return [n.name for n in overlap.comm_sequence(gm)]


def _barrier_prefixes(gm):
    """For each barrier: the set of nodes before it (must not change)."""
    seen, out = [], {}
    for n in gm.graph.nodes:
        if overlap.node_kind(n) == overlap.BARRIER:
            out[n.name] = frozenset(seen)
        seen.append(n.name)
    return out


def _check_invariants(before, after):
    assert _snapshot(before) == _snapshot(after), "nodes or edges changed"
    after.graph.lint()  # topological
    assert _comm_names(before) == _comm_names(after), "communication ops reordered"
    assert _barrier_prefixes(before) == _barrier_prefixes(after), "moved across a side effect"
    names = _order(after)
    assert names[-1] == "output"
    n_ph = sum(1 for n in after.graph.nodes if n.op == "placeholder")
    assert all(n.op == "placeholder" for n in list(after.graph.nodes)[:n_ph])


def _call(g, name, target, args):
    return g.create_node("call_function", target, args, name=name)


def _copy_gm(gm):
    return torch.fx.GraphModule(torch.nn.Module(), gm.graph.__deepcopy__())


def _run_pass(gm, on=True):
    before = _copy_gm(gm)
    after = overlap.schedule_overlap(gm, [], _config(on))
    return before, after


# -- handwritten graphs ---------------------------------------------------------------------
def _two_branch_graph(issue=ISSUE, wait=WAIT, extra_args=()):
    """h = x@w; ar = comm(h); y = wait(ar); z = relu(x@w2); out = y + z (wait right after)."""
    g = torch.fx.Graph()
    x, w, w2 = g.placeholder("x"), g.placeholder("w"), g.placeholder("w2")
    h = _call(g, 'h', aten.mm.default, (x, w))
    ar = _call(g, 'ar', issue, (h, *extra_args))
    y = _call(g, 'y', wait, (ar,))
    m = _call(g, 'm', aten.mm.default, (x, w2))
    z = _call(g, 'z', aten.relu.default, (m,))
    out = _call(g, 'out', aten.add.Tensor, (y, z))
    g.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_wait_moves_after_independent_compute():
    before, after = _run_pass(_two_branch_graph())
    _check_invariants(before, after)
    order = _order(after)
    assert order.index("ar") < order.index("m")
    assert order.index("z") < order.index("y") < order.index("out")
    args = [torch.randn(4, 4) for _ in range(3)]
    torch.testing.assert_close(before(*args), after(*args))


def test_c10d_functional_graph_structure():
    gm = _two_branch_graph(C10D_AR, C10D_WAIT, ("sum", "0"))
    before, after = _run_pass(gm)
    _check_invariants(before, after)
    order = _order(after)
    assert order.index("ar") < order.index("z") < order.index("y")


def test_issue_moves_before_independent_compute():
    """The collective's input is ready first; compute written before it moves after it."""
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    m = _call(g, 'm', aten.mm.default, (x, w))         # independent compute first
    r = _call(g, 'r', aten.relu.default, (m,))
    ar = _call(g, 'ar', ISSUE, (x,))                    # needs only x
    y = _call(g, 'y', WAIT, (ar,))
    out = _call(g, 'out', aten.add.Tensor, (y, r))
    g.output((out,))
    before, after = _run_pass(torch.fx.GraphModule(torch.nn.Module(), g))
    _check_invariants(before, after)
    assert _order(after)[2:6] == ["ar", "m", "r", "y"]
    args = [torch.randn(4, 4) for _ in range(2)]
    torch.testing.assert_close(before(*args), after(*args))


def test_collectives_never_reordered():
    """comm2's input is ready before comm1's; comm2 must still be issued after comm1."""
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    m = _call(g, 'm', aten.mm.default, (x, w))
    ar1 = _call(g, 'ar1', ISSUE, (m,))
    y1 = _call(g, 'y1', WAIT, (ar1,))
    ar2 = _call(g, 'ar2', ISSUE, (x,))
    y2 = _call(g, 'y2', WAIT, (ar2,))
    out = _call(g, 'out', aten.add.Tensor, (y1, y2))
    g.output((out,))
    before, after = _run_pass(torch.fx.GraphModule(torch.nn.Module(), g))
    _check_invariants(before, after)
    order = _order(after)
    assert order.index("ar1") < order.index("ar2")
    assert order.index("ar2") < order.index("y1")  # both in flight


def test_nothing_crosses_side_effect():
    """An in-place copy_ into an input is a barrier: compute after it stays after it."""
    g = torch.fx.Graph()
    x, w, buf = g.placeholder("x"), g.placeholder("w"), g.placeholder("buf")
    ar = _call(g, 'ar', ISSUE, (x,))
    y = _call(g, 'y', WAIT, (ar,))
    _call(g, "copy_", aten.copy_.default, (buf, y))
    r = _call(g, 'r', aten.relu.default, (buf,))        # reads the mutated buffer
    m = _call(g, 'm', aten.mm.default, (x, w))
    out = _call(g, 'out', aten.add.Tensor, (r, m))
    g.output((out,))
    before, after = _run_pass(torch.fx.GraphModule(torch.nn.Module(), g))
    _check_invariants(before, after)
    order = _order(after)
    assert order.index("copy_") < order.index("r") and order.index("copy_") < order.index("m")
    args = [torch.randn(4, 4) for _ in range(3)]
    args2 = [a.clone() for a in args]
    torch.testing.assert_close(before(*args), after(*args2))
    torch.testing.assert_close(args[2], args2[2])


def test_switch_off_leaves_graph_alone(run_stage):
    gm = _two_branch_graph()
    order = _order(gm)
    after = run_stage("overlap", _config(on=False), gm, [], _config(on=False))
    assert _order(after) == order
    assert _order(run_stage("overlap", _config(), gm, [], _config())) != order


def test_graph_without_collectives_untouched():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = _call(g, 'a', aten.relu.default, (x,))
    b = _call(g, 'b', aten.neg.default, (x,))
    g.output((g.call_function(aten.add.Tensor, (a, b)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    code = gm.code
    assert overlap.schedule_overlap(gm, [], _config()).code == code


# -- random graphs --------------------------------------------------------------------------
def _random_graph(rng: random.Random, n_ops: int):
    g = torch.fx.Graph()
    inputs = [g.placeholder(f"x{i}") for i in range(3)]
    bufs = [g.placeholder(f"buf{i}") for i in range(2)]
    values = list(inputs)
    pending = []  # issued, not yet waited
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.2:
            pending.append(g.call_function(ISSUE, (rng.choice(values),)))
        elif r < 0.35 and pending:
            values.append(g.call_function(WAIT, (pending.pop(rng.randrange(len(pending))),)))
        elif r < 0.42:
            g.call_function(aten.copy_.default, (rng.choice(bufs), rng.choice(values)))
        elif r < 0.5:
            values.append(g.call_function(aten.mul.Tensor, (rng.choice(bufs), 0.5)))
        else:
            op = rng.choice([aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor])
            a, b = rng.choice(values), rng.choice(values)
            values.append(g.call_function(aten.tanh.default,
                                          (g.call_function(op, (a, b)),)))
    for p in pending:
        values.append(g.call_function(WAIT, (p,)))
    g.output(tuple(values[3:]) or (values[0],))
    return torch.fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_keep_semantics(seed):
    rng = random.Random(seed)
    gm = _random_graph(rng, rng.randint(5, 40))
    before, after = _run_pass(gm)
    _check_invariants(before, after)
    torch.manual_seed(seed)
    args = [torch.randn(3, 3) for _ in range(5)]
    args2 = [a.clone() for a in args]
    torch.testing.assert_close(before(*args), after(*args2))
    for a, b in zip(args, args2):
        torch.testing.assert_close(a, b)


def test_random_graphs_waits_not_earlier():
    """Across random graphs, a wait never ends up earlier relative to the compute nodes."""
    for seed in range(40):
        gm = _random_graph(random.Random(seed), 30)
        before, after = _run_pass(gm)

        def idx(gm_, kind):
            order = [n for n in gm_.graph.nodes if n.op == "call_function"]
            n_compute = {}
            count = 0
            for n in order:
                if overlap.node_kind(n) == kind:
                    n_compute[n.name] = count
                elif overlap.node_kind(n) in (overlap.COMPUTE, overlap.BARRIER):
                    count += 1
            return n_compute

        wb, wa = idx(before, overlap.WAIT), idx(after, overlap.WAIT)
        assert all(wa[k] >= wb[k] for k in wb), seed


def test_random_graphs_issue_as_soon_as_ready():
    """Each communication op comes right after the last of: its inputs, the previous
    communication op, the last side-effect node before it (the earliest legal place)."""
    for seed in range(40):
        gm = _random_graph(random.Random(seed), 30)
        _, after = _run_pass(gm)
        nodes = list(after.graph.nodes)
        pos = {n: i for i, n in enumerate(nodes)}
        prev_comm, last_fixed = None, max(i for i, n in enumerate(nodes)
                                          if n.op == "placeholder")
        for i, n in enumerate(nodes):
            kind = overlap.node_kind(n)
            if kind == overlap.BARRIER:
                last_fixed = i
            if kind != overlap.COMM:
                continue
            earliest = max([last_fixed] + [pos[d] for d in n.all_input_nodes]
                           + ([pos[prev_comm]] if prev_comm is not None else []))
            assert i == earliest + 1, (seed, n.name)
            prev_comm = n
