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
# Every graph compiled anywhere in the suite (rank workers too) has each cross-stream data edge
# ordered by the graph's events/waits/fork/join, or its compile fails naming the edge
# (torchair_dist/passes/happens_before.py).
os.environ.setdefault("TORCHAIR_DIST_CHECK_STREAM_ORDER", "1")

# The stream tests run again under each adversarial order of the CPU model of concurrency
# (TORCHAIR_DIST_CPU_STREAM_ORDER): whole modules, plus any test named *stream* elsewhere in
# tests/unit and tests/torchair_compat. Multi-process tests are not rerun (2-core budget).
STREAM_ORDERS = ("program", "early", "late", "random:1", "random:2", "random:3")
STREAM_MODULES = frozenset({"test_streams.py", "test_capture_streams.py", "test_ge_streams.py",
                            "test_ta_scope_ops.py"})
_RERUN_DIRS = ("unit", "torchair_compat")

# passes/stream_ordering.py's program matrix (9 programs x 3 modes x static/dynamic) reruns
# under every order too, in the cases where the order can change the answer and the cost stays
# affordable: npugraph_ex, static (reduce-overhead captures alike; max-autotune's reference
# executor is interleaved by test_cpu_stream_model.py). Its other cases run in program order only.
ORDER_MATRIX = "test_stream_ordering.py::test_program_equals_program_order_and_every_cross_read_is_ordered"

_MULTICARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multicard")
if _MULTICARD not in sys.path:  # `import harness` / `collective_cases` from any test directory
    sys.path.insert(0, _MULTICARD)

from harness import RankPool  # noqa: E402


def _reruns_under_orders(metafunc) -> bool:
    path = str(metafunc.definition.fspath)
    name = os.path.basename(path)
    if os.path.basename(os.path.dirname(path)) not in _RERUN_DIRS:
        return False
    if name == "test_cpu_stream_model.py":  # chooses its orders itself
        return False
    return (name in STREAM_MODULES or "stream" in metafunc.function.__name__
            or f"{name}::{metafunc.function.__name__}" == ORDER_MATRIX)


def pytest_generate_tests(metafunc):
    if _reruns_under_orders(metafunc) and "cpu_stream_order" not in metafunc.fixturenames:
        metafunc.fixturenames.append("cpu_stream_order")
        metafunc.parametrize("cpu_stream_order", STREAM_ORDERS)


@pytest.fixture(autouse=True)
def _cpu_stream_order(request, monkeypatch):
    """A test parametrized by ``cpu_stream_order`` runs with ``TORCHAIR_DIST_CPU_STREAM_ORDER``
    = the parameter; tagged events (unique per process) are forgotten after each rerun."""
    callspec = getattr(request.node, "callspec", None)
    order = callspec.params.get("cpu_stream_order") if callspec is not None else None
    if order is None:
        yield
        return
    from torchair_dist.streams import api as stream_api

    monkeypatch.setenv("TORCHAIR_DIST_CPU_STREAM_ORDER", order)
    yield
    stream_api._forget_tagged_events()


def pytest_collection_modifyitems(config, items):
    """Deselect the order matrix's reruns outside npugraph_ex/static (see ORDER_MATRIX)."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        key = f"{os.path.basename(str(item.fspath))}::{item.originalname}"
        rerun = params.get("cpu_stream_order", "program") != "program"
        if key == ORDER_MATRIX and rerun and not (params.get("mode") == "npugraph_ex"
                                                  and params.get("dynamic") is False):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def fresh_dynamo():
    """Compiles from scratch: no Dynamo cache shared with other tests, and no capture counts (a
    graph loaded by ``cache_compile`` never passed through Dynamo, whose reset reaches only the
    backends it compiled with). The unit suite uses it for every test."""
    import torch

    from torchair_dist.base.util import reset_process_state

    torch._dynamo.reset()
    reset_process_state()
    yield
    torch._dynamo.reset()
    reset_process_state()


@pytest.fixture
def fresh_record_capture(monkeypatch, fresh_dynamo):
    """``fresh_dynamo`` with the CPU record capture whatever the environment says (the client
    and TorchAir-compat suites use it for every test)."""
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")


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
