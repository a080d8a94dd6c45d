"""TorchAir-compatibility tests: TorchAir users' code, run with ``import torchair_dist as
torchair``. What they check is what TorchAir's public smoke tests check (results vs eager,
capture/replay/recapture counts, input mutation, cache save/load, config errors); the code is
written here. Every test starts from a fresh Dynamo and fresh capture counts, with the CPU
record capture (the default) whatever the environment says."""
import pytest


@pytest.fixture(autouse=True)
def _fresh(fresh_record_capture):  # tests/conftest.py
    yield
