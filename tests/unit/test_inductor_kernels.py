"""``experimental_config.inductor_kernels`` in one process: inductor compiles the post-pass
graph (input mutations included), the option is reported as ignored in max-autotune and on a
device other than CPU/CUDA. Tolerance vs eager: ATOL = 1e-5 (fused kernels round differently)."""
import warnings

import torch
from torch._inductor import metrics

import torchair_dist
from torchair_dist.backends.context import GraphContext
from torchair_dist.backends.aclgraph.compile import device_allows_inductor
from torchair_dist.pipeline.option_support import check_config_support

ATOL = 1e-5


def _config(mode="npugraph_ex", on=True):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.experimental_config.inductor_kernels = on
    return cfg


def test_inductor_kernels_compile_the_graph_and_keep_input_mutations():
    def step(cache, pos, x, w):
        cache.index_copy_(0, pos, x @ w)           # a static-cache style in-place update
        return torch.softmax(cache.sum(0), -1) * 2

    torch._dynamo.reset()
    w = torch.randn(8, 8)
    compiled = torch.compile(step, fullgraph=True,
                             backend=torchair_dist.get_npu_backend(compiler_config=_config()))
    metrics.reset()
    c1, c2 = torch.zeros(4, 8), torch.zeros(4, 8)
    for i in range(3):
        x, pos = torch.randn(1, 8), torch.tensor([i])
        got, want = compiled(c1, pos, x, w), step(c2, pos, x, w)
        assert (got - want).abs().max().item() <= ATOL
        assert (c1 - c2).abs().max().item() <= ATOL  # the cache was written in place
    assert metrics.generated_kernel_count > 0


def test_inductor_kernels_reported_ignored_in_max_autotune():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert "experimental_config.inductor_kernels" in check_config_support(
            _config("max-autotune"))
        assert "experimental_config.inductor_kernels" not in check_config_support(_config())


def test_inductor_kernels_ignored_with_a_warning_off_cpu_and_cuda():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    ctx = GraphContext(gm=gm, example_inputs=[torch.empty(2, device="meta")], config=_config(),
                       static_input_indices=[], mutated_input_indices=[], graph_name="g")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert not device_allows_inductor(ctx)
    assert any("inductor_kernels is ignored on 'meta'" in str(w.message) for w in seen)
    ctx.example_inputs = [torch.empty(2)]
    assert device_allows_inductor(ctx)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.softmax(torch.nn.functional.gelu(self.lin(x)), -1)


def test_inductor_kernels_through_the_compile_cache(tmp_path):
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(4, 8)
    with torch.no_grad():
        want = net(x)
    first = torchair_dist.cache_compile(net.forward, config=_config(), cache_dir=str(tmp_path))
    assert (first(x) - want).abs().max().item() <= ATOL
    assert first.last_source == "compiled"
    torch._dynamo.reset()
    metrics.reset()
    again = torchair_dist.cache_compile(net.forward, config=_config(), cache_dir=str(tmp_path))
    assert (again(x) - want).abs().max().item() <= ATOL
    assert again.last_source == "cache" and not again.rejections
    assert metrics.generated_kernel_count > 0  # the loaded graph was compiled by inductor


def test_inductor_kernels_run_on_every_replay_of_the_cpu_stand_in(monkeypatch):
    """The CPU record stand-in re-issues dispatched ops; inductor's fused C++ kernel is not one,
    so a recorded replay would run the FX graph's aten ops instead of inductor's kernel. With
    inductor kernels the runner replays the compiled forward: no pointwise aten op is dispatched
    on a replay, and each replay equals eager on new data."""
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")
    torch._dynamo.reset()

    def fn(x):
        return torch.relu(x * 2 + 1).sin()

    compiled = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=_config()),
                             fullgraph=True)
    compiled(torch.randn(64))  # capture
    for _ in range(2):
        x = torch.randn(64)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            got = compiled(x)
        torch.testing.assert_close(got, fn(x), atol=ATOL, rtol=0)
        names = {e.name for e in prof.events()}
        assert not names & {"aten::mul", "aten::add", "aten::relu", "aten::sin"}, sorted(names)
    assert torchair_dist.capture_report(), "the graph was captured and replayed"
