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


def test_npu_status_names_each_reason(monkeypatch):
    import builtins

    def status_with(env=None, import_error=None):
        platform._probe_npu.cache_clear()
        monkeypatch.delenv("TORCHAIR_DIST_DISABLE_NPU", raising=False)
        if env:
            monkeypatch.setenv("TORCHAIR_DIST_DISABLE_NPU", env)
        real_import = builtins.__import__

        def fake_import(name, *args, **kwargs):
            if name == "torch_npu" and import_error is not None:
                raise import_error
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", fake_import)
        try:
            return platform._probe_npu(), platform.npu_status()
        finally:
            monkeypatch.setattr(builtins, "__import__", real_import)
            platform._probe_npu.cache_clear()

    assert status_with(env="1") == (False, "NPU disabled by TORCHAIR_DIST_DISABLE_NPU=1")
    ok, why = status_with(import_error=ImportError("No module named 'torch_npu'"))
    assert not ok and why.startswith("torch_npu is not installed")
    ok, why = status_with(import_error=OSError("libhccl.so: cannot open shared object file"))
    assert not ok and why == ("torch_npu is installed but failed to import: libhccl.so: "
                              "cannot open shared object file")


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


def test_a_cuda_capture_owns_its_cublas_workspace_and_leaves_the_cache_alone(monkeypatch):
    """On CUDA our capture clears cuBLAS's workspaces just before ``capture_begin`` (the one
    it uses is then allocated in its own pool) and never calls ``empty_cache``; the graph is
    captured on the given stream into the given pool. Checked with a recording fake of the
    CUDA calls (runs on any build)."""
    from torchair_dist import platform as plat_mod

    calls = []

    class Graph:
        def capture_begin(self, *pool, capture_error_mode):
            calls.append(("begin", pool, capture_error_mode))

        def capture_end(self):
            calls.append(("end",))

    class StreamCtx:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            calls.append(("stream", self.stream))

        def __exit__(self, *exc):
            calls.append(("stream exit",))

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append(("sync",)))
    monkeypatch.setattr(torch.cuda, "stream", StreamCtx)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty_cache",)))
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces",
                        lambda: calls.append(("clear",)), raising=False)
    cuda = plat_mod.Platform("cuda", "cuda", "nccl", Graph, None, None)
    with cuda.graph_context(Graph(), pool=("pool", 7), stream="s1",
                            capture_error_mode="thread_local"):
        calls.append(("body",))
    assert calls == [("sync",), ("clear",), ("stream", "s1"),
                     ("begin", (("pool", 7),), "thread_local"), ("body",), ("end",),
                     ("stream exit",)]
    calls.clear()
    with cuda.graph_context(Graph(), stream="s2"):
        pass
    assert ("begin", (), "global") in calls and ("empty_cache",) not in calls
