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


def test_the_platform_is_chosen_again_after_dynamo_reset(monkeypatch):
    """``current()`` is kept until ``torch._dynamo.reset()``; then a changed
    TORCHAIR_DIST_PLATFORM takes effect (the reset hook of base.util clears the choice)."""
    import torchair_dist

    monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cpu")
    platform.current.cache_clear()
    try:
        assert platform.current().name == "cpu"
        fn = torch.compile(lambda x: x + 1, backend=torchair_dist.get_npu_backend(),
                           fullgraph=True)
        assert torch.equal(fn(torch.ones(2)), torch.full((2,), 2.0))
        monkeypatch.setenv("TORCHAIR_DIST_PLATFORM", "cuda")
        assert platform.current().name == "cpu"  # kept while the compiled code lives
        torch._dynamo.reset()
        chosen = platform.current()
        assert chosen.name == "cuda" and chosen.dist_backend == "nccl"
    finally:
        monkeypatch.delenv("TORCHAIR_DIST_PLATFORM")
        platform.current.cache_clear()


def test_capabilities_are_methods_not_name_tests():
    """No module outside torchair_dist/platform compares a platform's name; each platform
    class answers for itself."""
    import pathlib
    import re

    root = pathlib.Path(platform.__file__).parents[1]
    found = []
    for path in root.rglob("*.py"):
        if "platform" in path.relative_to(root).parts[:1]:
            continue
        text = path.read_text()
        for m in re.finditer(r"(current\(\)|plat|platform)\.name\s*[!=]=\s*[\"'](npu|cuda|cpu)",
                             text):
            found.append(f"{path.relative_to(root)}: {m.group(0)}")
    assert not found, found
    plat_src = pathlib.Path(platform.__file__).read_text()
    assert not re.search(r"self\.name\s*[!=]=", plat_src)
    cpu = platform.CpuPlatform("cpu", "cpu", "gloo", None, None, None)
    npu = platform.NpuPlatform("npu", "npu", "hccl", None, None, None)
    assert cpu.uses_stand_ins and cpu.runs_on_host and not cpu.runs_ge_natively
    assert npu.runs_ge_natively and not npu.uses_stand_ins
    assert cpu.device(3) == torch.device("cpu") and cpu.vendor_function("npu_x") is None


def test_cpu_capture_variable_is_named_once():
    import pathlib
    import re

    root = pathlib.Path(platform.__file__).parents[1]
    defined = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if re.search(r"=\s*[\"']TORCHAIR_DIST_CPU_CAPTURE[\"']", p.read_text())]
    assert defined == ["base/envvars.py"], defined


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
