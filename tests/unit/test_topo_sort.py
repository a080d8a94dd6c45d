"""experimental_config.topology_sorting_strategy orders the graph GE receives (every platform)."""
import pytest
import torch
import torch.distributed as dist

import torchair_dist
from torchair_dist.pipeline import route as compiler


pytestmark = pytest.mark.usefixtures("one_rank_group")


def two_chains(x, y):
    a = torch.cos(torch.sin(x))
    dist.all_reduce(a)
    a = torch.exp(a)
    b = torch.neg(torch.relu(y))
    dist.all_reduce(b)
    b = torch.abs(b)
    return b, a


def _order(strategy):
    cfg = torchair_dist.CompilerConfig()
    cfg.experimental_config.topology_sorting_strategy = strategy
    cfg.distributed_config.overlap_collectives = False  # the strategy's order alone
    fn = torch.compile(two_chains, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                       fullgraph=True)
    x, y = torch.randn(4), torch.randn(4)
    with compiler.record_graphs() as graphs:
        out = fn(x, y)
    ref = two_chains(x, y)
    assert all(torch.equal(o, r) for o, r in zip(out, ref))
    nodes = [n for n in graphs[0].gm.graph.nodes if n.op == "call_function"]
    reduced = [str(n.args[0].target).split(".")[1] for n in nodes
               if str(n.target).startswith("_c10d_functional.all_reduce")]
    assert reduced == ["cos", "neg"]  # the collectives never swap, whatever the strategy
    names = [str(n.target).split(".")[1] for n in nodes]
    return [n for n in names if n in ("sin", "cos", "exp", "relu", "neg", "abs", "all_reduce")]


def test_dfs_and_stable_rdfs_keep_program_order():
    program = ["sin", "cos", "all_reduce", "exp", "relu", "neg", "all_reduce", "abs"]
    assert _order("DFS") == program
    assert _order("StableRDFS") == program


def test_bfs_goes_level_by_level():
    assert _order("BFS") == ["sin", "relu", "cos", "neg", "all_reduce", "all_reduce", "exp", "abs"]


def test_rdfs_computes_each_value_just_before_its_consumer():
    # outputs are (b, a): b's chain is computed first; the collectives still keep program order
    assert _order("RDFS") == ["relu", "neg", "sin", "cos", "all_reduce", "all_reduce", "abs",
                              "exp"]
