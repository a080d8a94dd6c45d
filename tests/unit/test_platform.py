"""The platform layer on a CPU-only host, and the lazy torch_npu probe."""
import subprocess
import sys

import pytest
import torch

from torchair_dist import platform
from torchair_dist.errors import ConfigError


def test_cpu_platform():
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA; the CPU platform is covered by forcing it below")
    plat = platform.current()
    assert (plat.name, plat.device_type, plat.dist_backend) == ("cpu", "cpu", "gloo")
    assert plat.graph_class is None and not plat.has_graph_capture
    assert plat.device(3) == torch.device("cpu")


def test_forced_platform(monkeypatch):
    platform.current.cache_clear()
    monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cpu")
    try:
        assert platform.current().name == "cpu"
        monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "tpu")
        platform.current.cache_clear()
        with pytest.raises(ConfigError, match="TORCHAIR_DIST_PLATFORM='tpu'"):
            platform.current()
    finally:
        platform.current.cache_clear()


def test_npu_status_says_why_npu_is_off():
    reason = platform.npu_status()
    assert "torch_npu" in reason or "NPU" in reason


def test_library_imports_without_importing_torch_npu():
    code = "import sys, torchair_dist; print('torch_npu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_cuda_platform_fields_when_available():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this host (checked on the lent GPU machine)")
    plat = platform.for_device("cuda")
    assert plat.dist_backend == "nccl" and plat.graph_class is torch.cuda.CUDAGraph
