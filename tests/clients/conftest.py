"""Client suites: code other projects wrote against TorchAir's API, replayed with small stand-in
models (facts only: the calls, their arguments and the options they set). Every test starts
from a fresh Dynamo and fresh capture counts, with the CPU record capture."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    from torchair_dist.base.util import reset_process_state

    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")
    torch._dynamo.reset()
    reset_process_state()
    yield
    torch._dynamo.reset()
    reset_process_state()
