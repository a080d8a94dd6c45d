"""Suite-wide set-up, and the rank pools every multi-process test shares.

``ranks2`` / ``ranks4`` are module-scoped :class:`harness.RankPool` objects (spawning ranks costs
seconds on a 2-core machine, so a module reuses them); ``pool.run(fn, *args)`` calls the
module-level ``fn(rank, world_size, *args)`` on every rank and returns the results. Use
``rank_pool(world_size, pg_timeout_s=...)`` for a module-scoped pool with other settings.
"""
import os
import sys

import pytest

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# Every GE graph built anywhere in the suite (rank workers inherit this) is checked against
# the GE operator registry before it runs.
os.environ.setdefault("TORCHAIR_DIST_GE_VALIDATE", "1")

_MULTICARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multicard")
if _MULTICARD not in sys.path:  # `import harness` / `collective_cases` from any test directory
    sys.path.insert(0, _MULTICARD)

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
