"""Streams and events with capture: the user's objects keep their identity, events used in a
capture are external, the warm-up runs on the capture stream, TorchAir's stream-switch API."""
import contextlib

import pytest
import torch

import torchair_dist
from torchair_dist.backends.aclgraph.capture import DeviceGraph
from torchair_dist.pipeline.route import record_graphs
from torchair_dist.platform import Platform
from torchair_dist.platform.interfaces import InputFeed
from torchair_dist.streams import StreamApiError, npu_stream_switch
from torchair_dist.streams import runtime
from torchair_dist.streams.stream_ops import ops


@pytest.fixture(autouse=True)
def clean():
    torch._dynamo.reset()
    runtime.reset()
    yield
    runtime.reset()
    torch._dynamo.reset()


def _compile(fn, mode="npugraph_ex"):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


# -- TorchAir's npu_stream_switch(tag, priority, enable_inner_parallel) -------------------------
def _switch(x):
    with npu_stream_switch("side", 0, True):
        y = x * 2
    return y + 1


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_stream_switch_takes_torchair_third_argument(mode):
    x = torch.randn(4)
    assert torch.equal(_switch(x), x * 2 + 1)
    assert torch.equal(_compile(_switch, mode)(x), x * 2 + 1)
    assert npu_stream_switch("a", 1, enable_inner_parallel=True).enable_inner_parallel is True
    with pytest.raises(StreamApiError, match="enable_inner_parallel must be a bool"):
        npu_stream_switch("a", 0, "yes")


# -- the user's torch.Stream / torch.Event keep their identity -----------------------------------
STREAM = torch.Stream(device="cpu")
OTHER = torch.Stream(device="cpu")
EVENT = torch.Event("cpu")


def _user_objects(x):
    with STREAM:
        y = x + 1
        EVENT.record(STREAM)
    EVENT.wait(OTHER)
    OTHER.wait_stream(STREAM)
    return y * 2


def test_rewrite_binds_tags_to_the_users_objects_both_ways():
    with record_graphs() as graphs:
        x = torch.randn(3)
        assert torch.equal(_compile(_user_objects)(x), (x + 1) * 2)
    records = [n.args for n in graphs[0].gm.graph.nodes if n.target is ops.event_record.default
               and runtime.user_object(n.args[0]) is not None]  # not the stream_order events
    (event_tag, stream_tag) = records[0]
    assert runtime.user_object(event_tag) is EVENT and runtime.tag_of(EVENT) == event_tag
    assert runtime.user_object(stream_tag) is STREAM and runtime.tag_of(STREAM) == stream_tag


# -- a fake device: what the kernels and the device graph do with streams and events -------------
class _FakeStream:
    def __init__(self, priority=0, name="s"):
        self.name, self.waited = name, []

    def wait_stream(self, other):
        self.waited.append(other)


class _FakeEvent:
    def __init__(self, external=False):
        self.external, self.records = external, []

    def record(self, stream=None):
        self.records.append(stream)

    def wait(self, stream=None):
        pass


class _FakeDevice:
    """Stands in for ``torch.cuda``: current stream, stream context, capture context."""

    Stream, Event = _FakeStream, _FakeEvent

    def __init__(self):
        self.default = _FakeStream(name="caller")
        self.current = self.default
        self.capturing = False
        self.captured_on = None

    def current_stream(self):
        return self.current

    def current_device(self):
        return 0

    def is_current_stream_capturing(self):
        return self.capturing

    def set_stream(self, s):
        self.current = s

    @contextlib.contextmanager
    def stream(self, s):
        saved, self.current = self.current, s
        try:
            yield
        finally:
            self.current = saved

    @contextlib.contextmanager
    def graph(self, graph, pool=None, stream=None, capture_error_mode=None):
        saved, self.current, self.capturing = self.current, stream, True
        self.captured_on = stream
        try:
            yield
        finally:
            self.current, self.capturing = saved, False


class _FakeGraph:
    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


@pytest.fixture
def fake_device(monkeypatch):
    dev = _FakeDevice()
    monkeypatch.setattr(torch, "fakedev", dev, raising=False)
    plat = Platform("fakedev", "fakedev", "fake", _FakeGraph, _FakeStream, _FakeEvent)
    monkeypatch.setattr(runtime, "_device_platform", lambda: plat)
    return dev, plat


def test_event_recorded_inside_a_capture_is_external_and_the_users_event_is_rerecorded(
        fake_device):
    dev, plat = fake_device
    user_event = _FakeEvent()
    runtime.bind("g0_event0", user_event)
    seen = []

    def forward(args):
        seen.append(dev.current_stream())
        runtime.event_record("g0_event0", "")
        return [args[0]]

    graph = DeviceGraph(plat)
    buffers = [torch.ones(1)]
    graph.capture(forward, buffers, InputFeed(buffers, (0,)))
    warm_stream, capture_stream = seen
    # the warm-up ran on the capture stream, not on a throwaway side stream
    assert warm_stream is capture_stream is dev.captured_on and warm_stream is not dev.default
    assert user_event.records == [capture_stream], "warm-up records the user's own event"
    private = runtime.event_for("g0_event0", capturing=True)
    assert private is not user_event and private.external
    assert private.records == [capture_stream], "inside the capture: the external event"
    graph.replay([torch.ones(1)])
    graph.replay([torch.ones(1)])
    assert user_event.records[1:] == [dev.default, dev.default], \
        "each replay re-records the user's event on the caller's stream"


def test_tag_events_are_external(fake_device):
    runtime.event_record("shared_between_graphs", "")
    assert runtime.event_for("shared_between_graphs").external
