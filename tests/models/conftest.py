"""Fixtures of the model suite: a module-scoped pool of 2 gloo ranks (the multicard harness).

``ranks2.run(fn, *args)`` calls the module-level ``fn(rank, world_size, *args)`` on every rank
(see ``tests/multicard/harness.py``); a failure shows every rank's traceback.
"""
import os
import sys

import pytest

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (_HERE, os.path.join(os.path.dirname(_HERE), "multicard")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from harness import RankPool  # noqa: E402


@pytest.fixture(scope="module")
def ranks2():
    pool = RankPool(2)
    yield pool
    pool.shutdown()
