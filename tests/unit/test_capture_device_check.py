"""scripts/device_check.py (make gpu-check / npu-check): what can run without a device."""
import importlib.util
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def device_check():
    spec = importlib.util.spec_from_file_location(
        "device_check", os.path.join(ROOT, "scripts", "device_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the no-device exit message, shown only without a CUDA "
                    "device (make gpu-check runs the real check there)")
def test_gpu_check_without_cuda_exits_2_with_a_clear_message(device_check, capsys):
    with pytest.raises(SystemExit) as exit_info:
        device_check.main(["--device", "cuda"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--dry-run" in err


def test_npu_check_without_npu_exits_2(device_check, capsys, monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_DISABLE_NPU", "1")
    from torchair_dist import platform

    if platform.current().name == "npu":
        pytest.skip("checks the no-device exit message, shown only without an NPU "
                    "(make npu-check runs the real check there)")
    with pytest.raises(SystemExit) as exit_info:
        device_check.main(["--device", "npu"])
    assert exit_info.value.code == 2 and "no Ascend NPU" in capsys.readouterr().err


def test_dry_run_capture_checks_pass_on_cpu(device_check, capsys, monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")
    monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cpu")
    code = device_check.main(["--dry-run", "--skip-bench", "--only", "capture:"])
    out = capsys.readouterr().out
    assert code == 0, out
    for name in ("static inputs", "mutation", "shared pool", "recapture/limit", "streams/events"):
        assert f"capture: {name}" in out and "FAIL" not in out


def test_a_failing_check_fails_the_run(device_check, monkeypatch, capsys):
    def broken(dev):
        raise AssertionError("replay differs from eager")

    monkeypatch.setattr(device_check, "check_static_inputs", broken)
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")  # --dry-run sets them
    monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cpu")
    code = device_check.main(["--dry-run", "--skip-bench", "--only", "static inputs"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "replay differs from eager" in out


def test_the_script_runs_from_a_checkout_without_pythonpath(tmp_path):
    """``python scripts/device_check.py`` from any directory, with no PYTHONPATH and no
    install: the script puts the checkout's root on sys.path itself."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "device_check.py"),
                          "--dry-run", "--skip-bench", "--only", "capture: static"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS capture: static inputs" in out.stdout
    assert f"torchair_dist from {ROOT}\n" in out.stdout  # this checkout, not an install


def test_stream_programs_run_compiled_and_every_call_is_compared(device_check, capsys,
                                                                 monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")
    monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cpu")
    source, programs = device_check.stream_programs()
    code = device_check.main(["--dry-run", "--skip-bench", "--only", "streams: "])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"stream programs: {source}" in out
    ran = [name for name in programs if f"PASS streams: {name}" in out]
    assert len(ran) >= 2, out  # (a racy program, or user streams on CPU, may SKIP)
    assert "2 replays" in out


def test_without_the_programs_file_the_check_stops_naming_it(device_check, monkeypatch,
                                                              tmp_path):
    """The stream programs are tests/stream_programs.py's (no second copy in the script): a tree
    without it stops the check with the file's name, instead of running other programs."""
    monkeypatch.setattr(device_check, "ROOT", str(tmp_path))
    with pytest.raises(SystemExit, match="stream_programs.py is missing"):
        device_check.stream_programs()


def test_a_replay_that_differs_fails_the_stream_check(device_check, monkeypatch):
    """The check compares the replays, not only the first call: a program whose compiled
    result goes wrong from the second call on fails."""
    import types

    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")
    calls = []

    def fn(x, w):
        return x @ w

    def call(parts, *args):
        calls.append(1)
        out = parts[0](*args)
        return out + 1 if len(calls) > 1 else out  # wrong from the first replay on

    program = types.SimpleNamespace(
        name="wrong_replay", build=lambda d: [fn], races=False, call=call,
        inputs=lambda size, device, seed: (torch.randn(size, size), torch.randn(size, size)),
        reference=lambda d, *a: fn(*a))
    with pytest.raises(AssertionError):
        device_check.make_stream_program_check(program)(torch.device("cpu"))
    assert len(calls) == 2
