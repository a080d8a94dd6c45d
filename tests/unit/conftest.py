import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch: no Dynamo cache shared between tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
