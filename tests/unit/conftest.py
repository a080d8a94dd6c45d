import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo):  # tests/conftest.py: every unit test compiles from scratch
    yield


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """A one-rank gloo process group for the module (collectives trace and run eagerly);
    use with ``pytestmark = pytest.mark.usefixtures("one_rank_group")``."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "s"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def record_capture(monkeypatch):
    """The CPU record stand-in for the ACL modes, whatever the environment says; use with
    ``pytestmark = pytest.mark.usefixtures("record_capture")``."""
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")


@pytest.fixture
def runners(monkeypatch):
    """Every AclGraphRunner created during the test."""
    from torchair_dist.backends.aclgraph import runner as runner_mod

    made = []
    orig = runner_mod.AclGraphRunner.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(runner_mod.AclGraphRunner, "__init__", spy)
    return made


@pytest.fixture
def run_stage(monkeypatch):
    """``run_stage(name, cfg, value, *args)``: the pipeline's runner on a row holding only
    stage ``name`` (of ``cfg``'s mode): the stage runs exactly when the table's rule (gate,
    platforms) says so, as in a compile. Passes check no switch of their own, so a pass called
    directly always runs; a test of a switch goes through here."""
    from torchair_dist.pipeline import stages

    def run(name, cfg, value, *args):
        mode = cfg.peek("mode")
        row = stages.MODE_TABLE[mode]
        assert name in row.stages, f"{name} is not a stage of {mode}"
        monkeypatch.setitem(stages.MODE_TABLE, mode, stages.ModeRow(
            row.mode, row.backend, (name,), row.cache_format, row.doc))
        try:
            return stages.run_stages(cfg, stages.STAGES[name].level, value, *args)
        finally:
            monkeypatch.setitem(stages.MODE_TABLE, mode, row)

    return run
