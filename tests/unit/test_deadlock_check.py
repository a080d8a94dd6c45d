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
