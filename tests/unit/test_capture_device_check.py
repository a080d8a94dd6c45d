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
