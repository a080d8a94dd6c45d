"""Logging set-up and the determinism guard of the backend entry."""
import subprocess
import sys
import textwrap

import torch

from torchair_dist.pipeline import entry as backend_mod


def test_log_level_from_environment_and_rank_prefix():
    code = textwrap.dedent("""
        import logging, os
        os.environ["TORCHAIR_DIST_LOG_LEVEL"] = "DEBUG"
        os.environ["RANK"] = "3"
        from torchair_dist.base.log import init_logging
        log = init_logging()
        assert log.level == logging.DEBUG
        log.debug("hello")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "[rank 3] DEBUG torchair_dist: hello" in out.stderr


def test_records_propagate_to_the_application_handlers_without_duplicates():
    code = textwrap.dedent("""
        import logging, os
        os.environ["TORCHAIR_DIST_LOG_LEVEL"] = "INFO"
        from torchair_dist.base.log import init_logging
        log = init_logging()
        log.info("before")
        logging.basicConfig(format="APP %(name)s %(message)s", level=logging.INFO)
        log.info("after")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == ["INFO torchair_dist: before", "APP torchair_dist after"], lines


def test_bad_log_level_is_an_error_naming_the_variable():
    code = textwrap.dedent("""
        import os
        os.environ["TORCHAIR_DIST_LOG_LEVEL"] = "LOUD"
        import torchair_dist  # importing never fails on a variable
        from torchair_dist.base.log import init_logging
        try:
            init_logging()
        except torchair_dist.errors.ConfigError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == ("environment variable TORCHAIR_DIST_LOG_LEVEL='LOUD': "
                                  "expected one of DEBUG | INFO | WARNING | ERROR | CRITICAL"), \
        out.stdout + out.stderr


def test_determinism_guard_warns_once_without_torch_npu(monkeypatch):
    warned = []

    class Recorder:
        def warning(self, msg, *args):
            warned.append(msg % args)

    monkeypatch.setattr(backend_mod, "log", Recorder())
    monkeypatch.setattr(backend_mod, "_determinism_warned", False)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert backend_mod.install_determinism_guard() is False
        assert backend_mod.install_determinism_guard() is False
    finally:
        torch.use_deterministic_algorithms(previous)
    assert len(warned) == 1 and "deterministic" in warned[0]
