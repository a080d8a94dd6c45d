"""reinplace_collectives: dead-input all_reduce becomes all_reduce_, values unchanged."""
import torch
import torch.fx

from torchair_dist import CompilerConfig
from torchair_dist.passes.graph_info import op_targets
from torchair_dist.passes.reinplace import reinplace_collectives

aten = torch.ops.aten
c10d = torch.ops._c10d_functional


def _graph(read_after: bool, input_is_placeholder: bool = False):
    """x -> mm -> all_reduce -> wait -> copy(mm, wait) -> add; optionally mm read later."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    buf = x if input_is_placeholder else g.call_function(aten.mm.default, (x, w))
    ar = g.call_function(c10d.all_reduce.default, (buf, "sum", "0"))
    wait = g.call_function(c10d.wait_tensor.default, (ar,))
    copy = g.call_function(aten.copy.default, (buf, wait))
    out = g.call_function(aten.add.Tensor, (copy, x))
    outputs = (out, g.call_function(aten.mul.Tensor, (buf, 2))) if read_after else (out,)
    g.output(outputs)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_dead_input_is_reduced_in_place_and_copy_dropped():
    gm = reinplace_collectives(_graph(read_after=False), [], CompilerConfig())
    ops = op_targets(gm)
    assert "_c10d_functional.all_reduce_.default" in ops
    assert "_c10d_functional.all_reduce.default" not in ops
    assert "aten.copy.default" not in ops


def test_input_read_after_the_collective_is_left_functional():
    gm = reinplace_collectives(_graph(read_after=True), [], CompilerConfig())
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)


def test_graph_inputs_are_never_reduced_in_place():
    gm = reinplace_collectives(_graph(read_after=False, input_is_placeholder=True), [],
                               CompilerConfig())
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)


def test_switch_off():
    cfg = CompilerConfig()
    cfg.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    gm = reinplace_collectives(_graph(read_after=False), [], cfg)
    assert "_c10d_functional.all_reduce.default" in op_targets(gm)
