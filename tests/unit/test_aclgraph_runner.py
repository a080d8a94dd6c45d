"""ACL-graph runner semantics, with the CPU stand-in graph so capture/replay logic runs."""
import warnings

import pytest
import torch

import torchair_dist
from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.backends.aclgraph import runner as runner_mod


@pytest.fixture(autouse=True, params=["emulate", "record"])
def emulate_capture(monkeypatch, request):
    """Both CPU stand-ins: replay re-runs the forward / re-issues the recorded ops."""
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", request.param)


def compile_fn(fn, dynamic=False, **options):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    for path, value in options.items():
        cfg.option(path).set(value)
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True,
                         dynamic=dynamic)


def test_replay_equals_eager_and_captures_once(runners):
    f = compile_fn(lambda x, y: torch.relu(x @ y) + 1)
    for _ in range(4):
        x, y = torch.randn(4, 5), torch.randn(5, 3)
        assert torch.equal(f(x, y), torch.relu(x @ y) + 1)
    assert len(runners) == 1 and runners[0].capture_count == 1


def test_input_mutation_is_written_back(runners):
    def g(x, acc):
        acc.add_(x)
        return acc * 2

    f = compile_fn(g)
    acc, ref = torch.zeros(3), torch.zeros(3)
    for i in range(3):
        x = torch.full((3,), float(i + 1))
        out = f(x, acc)
        expected = g(x, ref)
        assert torch.equal(acc, ref) and torch.equal(out, expected)
    # A mutated input at a new address is recaptured, never written to the old one.
    other, other_ref = torch.ones(3), torch.ones(3)
    f(torch.ones(3), other)
    g(torch.ones(3), other_ref)
    assert torch.equal(other, other_ref) and torch.equal(acc, ref)
    assert runners[0].capture_count == 2


def test_outputs_aliasing_inputs():
    f = compile_fn(lambda x: (x.view(-1), x.t(), x + 1))
    x = torch.randn(2, 3)
    a, b, c = f(x)
    assert a.data_ptr() == x.data_ptr() and b.data_ptr() == x.data_ptr()
    x.add_(1)
    assert torch.equal(a, x.view(-1)) and torch.equal(b, x.t())


def test_outputs_held_across_the_next_replay_keep_their_values_with_or_without_clone():
    """Without clone: an output held across the next replay (its memory about to be
    overwritten) is moved onto a copy first and keeps its values (one copy, counted); with
    clone every output is a copy."""
    f = compile_fn(lambda x: x * 2)
    first = f(torch.ones(2))
    second = f(torch.full((2,), 5.0))
    assert torch.equal(first, torch.full((2,), 2.0))
    assert torch.equal(second, torch.full((2,), 10.0))
    assert torchair_dist.capture_summary()["graph_0"]["output_copies"] == 1
    torch._dynamo.reset()
    f = compile_fn(lambda x: x * 2, **{"debug.aclgraph.enable_output_clone": True})
    first = f(torch.ones(2))
    f(torch.full((2,), 5.0))
    assert torch.equal(first, torch.full((2,), 2.0))


def test_clone_input_off_uses_caller_tensor_and_copies_moved_inputs(runners):
    f = compile_fn(lambda x: x + 1, **{"debug.aclgraph.clone_input": False})
    x = torch.zeros(3)
    f(x)
    x.fill_(4)  # same address: the graph reads it directly
    assert torch.equal(f(x), torch.full((3,), 5.0))
    assert torch.equal(f(torch.full((3,), 9.0)), torch.full((3,), 10.0))
    assert runners[0].capture_count == 1


def test_clone_input_on_copies_every_call():
    f = compile_fn(lambda x: x + 1)
    x = torch.zeros(3)
    f(x)
    x.fill_(2)
    assert torch.equal(f(x), torch.full((3,), 3.0))


def test_several_shapes_get_their_own_capture(runners):
    f = compile_fn(lambda x: x.sum(0) * 2, dynamic=True)
    for n in (2, 3, 4, 3, 2):
        x = torch.randn(n, 4)
        assert torch.equal(f(x), x.sum(0) * 2)
    assert len(runners) == 1
    assert runners[0].capture_count == 3 and len(runners[0].captures) == 3


def test_capture_limit_warns_once_and_runs_only_new_keys_eagerly(runners):
    """Past static_capture_size_limit a new key runs eagerly (one warning); the captured keys
    keep replaying (TorchAir turns the whole graph eager instead)."""
    f = compile_fn(lambda x: x * 3, dynamic=True,
                   **{"debug.aclgraph.static_capture_size_limit": 2})
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for n in (2, 3, 4, 5, 6, 2, 3):
            x = torch.randn(n)
            assert torch.equal(f(x), x * 3)
    hits = [w for w in rec if "static_capture_size_limit reached" in str(w.message)]
    assert len(hits) == 1
    assert len(runners[0].captures) == 2
    counts = next(iter(torchair_dist.capture_report().values()))
    assert sum(k.get("replays", 0) for k in counts.values()) == 2
    assert sum(k.get("capture_limit", 0) for k in counts.values()) == 3


class _Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def test_parameters_are_static_and_rekey_when_moved(runners):
    m = _Lin()
    f = compile_fn(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        f(x)
        f(x)
        r = runners[0]
        assert r.static_indices, "parameters must be static inputs"
        assert not set(r.static_indices) & set(r.user_indices)
        assert r.capture_count == 1
        m.lin.weight.data = m.lin.weight.data.clone() * 2  # new storage
        assert torch.allclose(f(x), m(x))
    assert r.capture_count == 2


def test_frozen_parameters_do_not_rekey(runners):
    m = _Lin()
    f = compile_fn(m, **{"experimental_config.frozen_parameter": True})
    with torch.no_grad():
        f(torch.randn(2, 4))
        assert runners[0].keys.ptr_indices == ()


def test_force_recapture(runners):
    f = compile_fn(lambda x: x - 1, **{"npugraphex_config.force_recapture": True})
    for _ in range(3):
        f(torch.ones(2))
    assert runners[0].capture_count == 3


def _runner_frames(call):
    """The runner's Python frames one call enters (its module and its capture entry's)."""
    import sys

    from torchair_dist.backends.aclgraph import entry as entry_mod

    names = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in (runner_mod.__file__,
                                                             entry_mod.__file__):
            names.append(frame.f_code.co_name)
    sys.setprofile(prof)
    try:
        out = call()
    finally:
        sys.setprofile(None)
    return out, names


@pytest.mark.parametrize("options, fast", [
    ({}, True),
    ({"debug.aclgraph.enable_output_clone": True}, False),  # clones: the checked path
    ({"npugraphex_config.force_recapture": True}, False),
])
def test_a_plain_replay_takes_one_lookup_and_the_entry(runners, options, fast):
    import torchair_dist

    fn = lambda x: torch.relu(x) * 2  # noqa: E731
    f = compile_fn(fn, **options)
    x = torch.randn(8)
    f(x), f(x)
    out, frames = _runner_frames(lambda: f(x))
    assert torch.equal(out, fn(x))
    if fast:
        # The call skips AOT's runtime wrapper and the runner's __call__ (aot_direct): the
        # runner's ``direct`` looks the key up once and the capture entry replays (no checks
        # of ``_call``, no second lookup), with either stand-in.
        assert frames == ["direct", "replay"], frames
        (keys,) = torchair_dist.capture_report().values()
        assert next(iter(keys.values()))["replays"] == 2  # the fast path still counts
    else:
        assert "_call" in frames, frames
