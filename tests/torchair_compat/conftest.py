"""TorchAir-compatibility tests: TorchAir users' code, run with ``import torchair_dist as
torchair``. What they check is what TorchAir's public smoke tests check (results vs eager,
capture/replay/recapture counts, input mutation, cache save/load, config errors); the code is
written here. Every test starts from a fresh Dynamo and fresh capture counts, with the CPU
record capture (the default) whatever the environment says."""
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
