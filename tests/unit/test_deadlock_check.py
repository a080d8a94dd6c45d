"""debug.deadlock_check: concurrent collectives on different streams are named (every platform)."""
import warnings

import pytest
import torch
import torch.distributed as dist

import torchair_dist
from torchair_dist import npu_stream_switch, npu_tagged_event_record, npu_tagged_event_wait
from torchair_dist.streams import api as stream_api


pytestmark = pytest.mark.usefixtures("one_rank_group")


@pytest.fixture(scope="module", autouse=True)
def _forget_events():
    yield
    stream_api._forget_tagged_events()


def racing(x, y):
    with npu_stream_switch("comm"):
        a = x * 2
        dist.all_reduce(a)
    b = y + 1
    dist.all_reduce(b)          # main stream: nothing orders it against the side stream's
    return a, b


def ordered(x, y):
    with npu_stream_switch("comm"):
        a = x * 2
        dist.all_reduce(a)
        npu_tagged_event_record("done", "comm")
    npu_tagged_event_wait("done")  # the main stream waits for the side stream's collective
    b = y + 1
    dist.all_reduce(b)
    return a, b


def _run(fn, mode, check=True):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.debug.deadlock_check = check
    compiled = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                             fullgraph=True)
    x, y = torch.randn(4), torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x, y)
    assert all(torch.equal(o, r) for o, r in zip(out, fn(x, y)))
    return [str(w.message) for w in caught if "deadlock_check" in str(w.message)]


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_concurrent_collectives_on_two_streams_are_named(mode):
    found = _run(racing, mode)
    assert len(found) == 1
    assert "stream 'comm'" in found[0] and "stream '(current)'" in found[0]
    assert "test_deadlock_check.py" in found[0]  # the user's lines


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_an_event_between_them_clears_the_check(mode):
    assert _run(ordered, mode) == []


def test_off_by_default():
    assert _run(racing, "npugraph_ex", check=False) == []


# -- the check reads the one order model: synchronize orders too --------------------------------
def _two_stream_collectives(between):
    """all_reduce on stream 'a', then ``between`` (stream ops), then all_reduce on stream 'b'."""
    from torchair_dist.streams import ops as st

    c10d = torch.ops._c10d_functional
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(st.fork.default, (["a", "b"],))
    done = []
    for i, tag in enumerate("ab"):
        if i:
            for target, args in between:
                g.call_function(target, args)
        g.call_function(st.stream_enter.default, (tag, 0))
        ar = g.call_function(c10d.all_reduce.default, (x, "sum", "0"))
        done.append(g.call_function(c10d.wait_tensor.default, (ar,)))
        g.call_function(st.stream_exit.default, (tag,))
    g.call_function(st.join.default, (["a", "b"],))
    g.output(tuple(done))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_a_synchronize_between_the_collectives_clears_the_check():
    from torchair_dist.passes.deadlock_check import find_conflicts
    from torchair_dist.streams import ops as st

    assert len(find_conflicts(_two_stream_collectives([]))) == 1
    # the host waits for the device (or for stream 'a') before stream 'b' gets its collective
    assert find_conflicts(_two_stream_collectives([(st.synchronize.default, ("",))])) == []
    assert find_conflicts(_two_stream_collectives([(st.synchronize.default, ("a",))])) == []
    # waiting for another stream does not order stream 'a''s collective
    assert len(find_conflicts(_two_stream_collectives([(st.synchronize.default, ("c",))]))) == 1
