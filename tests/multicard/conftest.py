"""Fixtures of the multicard tests: module-scoped pools of 2 and 4 gloo ranks.

``ranks2`` / ``ranks4`` are :class:`harness.RankPool` objects shared by every test of one module
(spawning 4 ranks costs several seconds on a 2-core machine). ``pool.run(fn, *args)`` calls the
module-level function ``fn(rank, world_size, *args)`` on every rank and returns the results.
Use ``rank_pool(world_size, pg_timeout_s=...)`` for a module-scoped pool with other settings.
"""
import os
import sys

import pytest

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # `import harness` from the test modules, whatever the import mode
    sys.path.insert(0, _HERE)

from harness import RankPool  # noqa: E402


@pytest.fixture(scope="module")
def ranks2():
    pool = RankPool(2)
    yield pool
    pool.shutdown()


@pytest.fixture(scope="module")
def ranks4():
    pool = RankPool(4)
    yield pool
    pool.shutdown()


@pytest.fixture(scope="module")
def rank_pool():
    """Factory: ``rank_pool(world_size, **kwargs)``; every pool made is shut down at module end."""
    pools = []

    def make(world_size, **kwargs):
        pool = RankPool(world_size, **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.shutdown()
