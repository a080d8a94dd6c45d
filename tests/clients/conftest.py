"""Client suites: code other projects wrote against TorchAir's API, replayed with small stand-in
models (facts only: the calls, their arguments and the options they set). Every test starts
from a fresh Dynamo and fresh capture counts, with the CPU record capture."""
import pytest


@pytest.fixture(autouse=True)
def _fresh(fresh_record_capture):  # tests/conftest.py
    yield
