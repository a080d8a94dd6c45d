"""``torchair_dist.install_torchair_alias()``: code that does ``import torchair`` /
``from torchair.x import y`` runs unchanged on torchair_dist, one copy of each module (class
identity kept), and a real TorchAir is never shadowed. Each case runs in a fresh interpreter
(clean ``sys.modules``)."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, extra_path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0",
               PYTHONPATH=os.pathsep.join(p for p in (extra_path, ROOT) if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_torchair_paths_resolve_to_one_copy_of_each_module():
    r = _run("""
        import sys
        import torch
        import torchair_dist
        torchair_dist.install_torchair_alias()
        # what vllm-ascend and TorchAir's smoke tests import
        from torchair.scope import super_kernel, npu_stream_switch, npu_wait_tensor
        from torchair.configs.compiler_config import CompilerConfig
        from torchair.core.utils import logger
        from torchair import patch_for_hcom
        from torchair.ops import npu_create_tagged_event
        from torchair.experimental.inference import use_internal_format_weight
        import torchair, torchair.inference, torchair.ge, torchair.ops, torchair.scope
        import torchair.configs.compiler_config as cc
        import torchair.streams.api as streams_api   # not imported before the alias
        assert torchair is torchair_dist
        assert CompilerConfig is torchair_dist.CompilerConfig
        assert super_kernel is torchair_dist.scope.super_kernel
        assert npu_stream_switch is torchair_dist.scope.npu_stream_switch
        assert logger is torchair_dist.logger
        assert torchair.inference.cache_compile is torchair_dist.inference.cache_compile
        assert cc is sys.modules["torchair_dist.configs.compiler_config"]
        assert streams_api is sys.modules["torchair_dist.streams.api"]
        assert streams_api.__spec__.name == "torchair_dist.streams.api"
        # one copy: no module is loaded twice under two names
        files = {}
        for name, m in list(sys.modules.items()):
            f = getattr(m, "__file__", None)
            if f and "torchair_dist" in f:
                files.setdefault(f, set()).add(id(m))
        assert all(len(ids) == 1 for ids in files.values()), files
        # a config made through the torchair name is accepted by the backend
        config = CompilerConfig()
        config.mode = "npugraph_ex"
        fn = torch.compile(lambda x: x * 2 + 1, fullgraph=True,
                           backend=torchair.get_npu_backend(compiler_config=config))
        x = torch.randn(4)
        assert torch.equal(fn(x), x * 2 + 1)
        assert torchair_dist.install_torchair_alias() is torchair_dist  # again: no-op
        print("ok")
        """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_a_missing_torchair_path_is_an_import_error():
    r = _run("""
        import torchair_dist
        torchair_dist.install_torchair_alias()
        try:
            import torchair.llm_datadist
        except ImportError as e:
            print("ImportError", e.name)
        """)
    assert r.returncode == 0 and r.stdout.strip() == "ImportError torchair.llm_datadist", \
        r.stderr[-3000:]


def test_a_real_torchair_is_never_shadowed(tmp_path):
    real = tmp_path / "site" / "torchair"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    r = _run("""
        import torchair_dist
        from torchair_dist.errors import ConfigError
        try:
            torchair_dist.install_torchair_alias()
        except ConfigError as e:
            print("refused:", e)
        import torchair
        print("REAL" if getattr(torchair, "REAL", False) else "ALIAS")
        """, extra_path=str(tmp_path / "site"))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("refused: install_torchair_alias: a real TorchAir is installed")
    assert str(real) in lines[0]
    assert lines[1] == "REAL"
