"""Training through our backend: backward graphs' static inputs, compiled autograd, and the
``sym_sum`` forms torch records (issue 31, causes C, D, E)."""
import pytest
import torch

from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.pipeline.route import record_graphs


def backend(mode):
    cfg = CompilerConfig()
    cfg.mode = mode
    return get_npu_backend(compiler_config=cfg)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def train(model, step_fn, steps=6):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    torch.manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 8)
        opt.zero_grad()
        loss = step_fn(model, x)
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        losses.append(loss.detach())
        opt.step()
    return losses, grads


class Scaled(torch.nn.Module):
    """A 2-layer MLP whose backward reads a parameter itself (``scale``: d(x*scale)/dx)."""

    def __init__(self):
        super().__init__()
        self.body = mlp()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4))

    def forward(self, x):
        return self.body(x) * self.scale


@pytest.mark.parametrize("make", [mlp, Scaled], ids=["mlp", "reads-parameter"])
def test_backward_graph_has_its_own_static_inputs_and_captures_once(runners, make):
    """npugraph_ex, 6 training steps: one capture per graph (forward and backward), losses and
    gradients equal eager's. The backward's static inputs are the forward's static inputs it
    reads (placeholders named after the forward's primals), never the forward's positions
    (that was an IndexError, or a recapture every step)."""
    torch.manual_seed(0)
    ref_losses, ref_grads = train(make(), lambda m, x: m(x).square().mean())
    torch.manual_seed(0)
    model = make()
    compiled = torch.compile(model, backend=backend("npugraph_ex"), fullgraph=True)
    with record_graphs() as graphs:
        losses, grads = train(model, lambda m, x: compiled(x).square().mean())
    assert len(graphs) == 2 and len(runners) == 2
    assert [r.capture_count for r in runners] == [1, 1]
    for got, want in zip(losses, ref_losses):
        torch.testing.assert_close(got, want)
    for got, want in zip(grads, ref_grads):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    fw, bw = graphs
    names = [n.name for n in bw.gm.graph.nodes if n.op == "placeholder"]
    expected = [i for i, n in enumerate(names) if n.startswith("primals_")
                and int(n.split("_")[1]) - 1 in fw.static_input_indices]
    assert bw.static_input_indices == expected
    if make is Scaled:  # the parameter itself is a backward input, used in place
        assert expected


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_compiled_autograd_with_our_backend(mode):
    """torch._dynamo.compiled_autograd with our backend: its graph takes a list of inputs,
    which AOT needs flattened (as Dynamo's aot_autograd does)."""
    from torch._dynamo import compiled_autograd

    model = mlp()
    x = torch.randn(3, 8)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    with compiled_autograd._enable(torch.compile(backend=backend(mode))):
        model(x).sum().backward()
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w)


@pytest.mark.parametrize("form", ["one sequence", "separate arguments"])
def test_sym_sum_converts_in_both_forms(form):
    """max-autotune's ``sym_sum`` converter takes the forms torch 2.13 records:
    ``torch.sym_sum((a, b))`` (a traced call) and ``torch.sym_sum(a, b)`` (a size expression
    rebuilt from sympy, as DTensor's shard propagation makes with dynamic shapes: it was a
    TypeError). The graph runs on the GE reference runtime with another shape too."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from test_ge_common import convert
    from torchair_dist.backends.ge import make_runner
    from torchair_dist.cpu.ge_reference import ReferenceRuntime

    def fn(x):
        n = torch.sym_sum((x.shape[0], x.shape[1]))
        return x.reshape(-1)[:n] * 2

    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(3, 5))
    (node,) = [n for n in gm.graph.nodes if n.target is torch.sym_sum]
    if form == "separate arguments":
        node.args = tuple(node.args[0])
        gm.recompile()
    converted = convert(gm, [torch.randn(3, 5)])
    runtime = ReferenceRuntime()
    runtime.load(converted.model.SerializeToString())
    run = make_runner(converted, runtime)
    for shape in [(3, 5), (4, 2)]:
        x = torch.randn(*shape)
        (out,) = run([x])
        assert torch.equal(out, fn(x))
