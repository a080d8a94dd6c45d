"""Reduce ops through the remaps on every supported torch: the default (SUM) and explicit
``dist.ReduceOp`` members reach the graph as the functional collectives' names (torch 2.11's
Dynamo can neither wrap a ``ReduceOp.RedOpType`` default argument nor hash one), in one graph,
and the compiled function equals eager (one gloo rank)."""
import pytest
import torch
import torch.distributed as dist

from torchair_dist.collectives import remap

pytestmark = pytest.mark.usefixtures("one_rank_group")


def program(x):
    y = x * 2
    dist.all_reduce(y)                                  # the default op
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    dist.all_reduce(y, dist.ReduceOp.AVG)               # positional, AVG = SUM / world
    out = torch.empty_like(y)
    dist.reduce_scatter_tensor(out, y, op=dist.ReduceOp.MIN)
    return out + 1


def test_every_reduce_op_is_traced_by_name_and_equals_eager():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    x = torch.randn(4, 3)
    got = torch.compile(program, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, program(x))
    (gm,) = graphs
    names = [n.args[1] for n in gm.graph.nodes if n.op == "call_function"
             and ("all_reduce" in str(n.target) or "reduce_scatter" in str(n.target))]
    assert names == ["sum", "max", "sum", "min"], names  # AVG: SUM, then a division


def test_the_reduce_op_names():
    assert remap._reduce_op(None) == "sum"
    assert remap._reduce_op("max") == "max"
    assert remap._reduce_op(dist.ReduceOp.PRODUCT) == "product"
    with pytest.raises(ValueError, match="has no functional collective"):
        remap._reduce_op(object())
