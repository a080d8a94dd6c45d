"""The torch version range and the list of private torch APIs (torchair_dist.base.torch_support)."""
import ast
import os
import subprocess
import sys

import pytest

import torchair_dist
from torchair_dist.base import torch_support as torch_compat

ROOT = os.path.dirname(torchair_dist.__file__)


def _private_key(parts):
    """The dotted path cut one component after the first private one (None: all public)."""
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[:i + 2])
    return None


def _module_aliases(tree):
    """{local name: dotted torch path} of the module's imports."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torch"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                        a.name.split(".")[0]
    return aliases


def private_uses():
    """{private key: {module}} of every private torch name the package source uses: imports,
    and attribute chains rooted at ``torch`` or at an imported torch name."""
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py") or f.endswith("_pb2.py"):
                continue
            path = os.path.join(dirpath, f)
            module = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
            tree = ast.parse(open(path).read())
            aliases = _module_aliases(tree)
            for node in ast.walk(tree):
                chains = []
                if isinstance(node, ast.ImportFrom) and node.module and \
                        node.module.startswith("torch"):
                    chains = [node.module.split(".") + [a.name] for a in node.names]
                elif isinstance(node, ast.Import):
                    chains = [a.name.split(".") for a in node.names if a.name.startswith("torch")]
                elif isinstance(node, ast.Attribute):
                    parts, n = [], node
                    while isinstance(n, ast.Attribute):
                        parts.append(n.attr)
                        n = n.value
                    if isinstance(n, ast.Name) and n.id in aliases:
                        chains = [aliases[n.id].split(".") + parts[::-1]]
                for chain in chains:
                    key = _private_key(chain)
                    if key and key.split(".")[0] == "torch":
                        found.setdefault(key, set()).add(module)
    return found


def test_every_private_torch_api_used_is_listed():
    unlisted = {k: sorted(v) for k, v in private_uses().items()
                if k not in torch_compat.PRIVATE_APIS}
    assert not unlisted, (f"private torch APIs used but not listed in "
                          f"torchair_dist/base/torch_support.py PRIVATE_APIS: {unlisted}")


def test_every_listed_private_api_resolves_on_this_torch():
    from torchair_dist.base.util import resolve_dotted

    missing = [key for key in torch_compat.PRIVATE_APIS
               if resolve_dotted(key) is None and torch_compat.built_here(key)]
    assert not missing, f"listed private APIs missing on this torch: {missing}"
    # a device-only name is absent from a build without that device (else it need not be)
    wrongly = [key for key in torch_compat.BUILD_ONLY_APIS
               if not torch_compat.built_here(key) and resolve_dotted(key) is not None]
    assert not wrongly, f"present on a build said to lack them: {wrongly}"
    assert set(torch_compat.BUILD_ONLY_APIS) <= set(torch_compat.PRIVATE_APIS)


def test_names_of_part_of_the_range_exist_exactly_where_declared():
    """VERSIONED_APIS (names the version helpers choose between) is true on this torch: each
    resolves if and only if the table says this version has it."""
    import torch

    from torchair_dist.base.util import resolve_dotted

    here = torch_compat.parse_version(torch.__version__)
    wrong = {name: (resolve_dotted(name) is not None, torch_compat.expected_on(name, here))
             for name in torch_compat.VERSIONED_APIS if name not in torch_compat.IMPORT_DEPENDENT
             and (resolve_dotted(name) is not None) != torch_compat.expected_on(name, here)}
    assert not wrong, f"torch {torch.__version__}: (exists, declared) differ: {wrong}"
    # a private versioned name is covered by a PRIVATE_APIS key (one of its prefixes)
    for name in torch_compat.VERSIONED_APIS:
        parts = name.split(".")
        assert _private_key(parts) is None or any(
            ".".join(parts[:i]) in torch_compat.PRIVATE_APIS for i in range(2, len(parts) + 1)
        ), name


def test_the_helpers_pick_what_this_torch_has():
    import torch._dynamo

    from torch._functorch._aot_autograd import runtime_wrappers

    marker = torch_compat.aot_dynamic_output_marker()
    assert marker in (getattr(runtime_wrappers, "mark_dynamo_propagated_dynamic_indices", None),
                      getattr(runtime_wrappers, "maybe_mark_dynamic_helper", None))
    t = torch.zeros(2, 3)
    marker(t, {0})
    assert {0} in (getattr(t, "_dynamo_propagated_dynamic_indices", None),
                   getattr(t, "_dynamo_weak_dynamic_indices", None))


def test_nothing_listed_that_is_no_longer_used():
    used = private_uses()
    stale = [k for k in torch_compat.PRIVATE_APIS if k not in used]
    assert not stale, f"listed in PRIVATE_APIS but no longer used: {stale}"


@pytest.mark.parametrize("version,ok", [("2.11.0+cu130", True), ("2.12.1", True),
                                        ("2.13.0+cpu", True), ("2.14.1+cu128", True),
                                        ("2.10.2", False), ("2.15.0", False), ("3.0.0", False)])
def test_the_range(version, ok):
    if ok:
        torch_compat.check_torch_version(version, environ={})
        return
    with pytest.raises(torch_compat.UnsupportedTorchError) as info:
        torch_compat.check_torch_version(version, environ={})
    assert ">=2.11,<2.15" in str(info.value) and version in str(info.value)
    assert torch_compat.ALLOW_ENV in str(info.value)
    with pytest.warns(RuntimeWarning, match=version.replace("+", r"\+")):
        torch_compat.check_torch_version(version, environ={torch_compat.ALLOW_ENV: "1"})
    with pytest.raises(torch_compat.UnsupportedTorchError, match=torch_compat.ALLOW_ENV):
        torch_compat.check_torch_version(version, environ={torch_compat.ALLOW_ENV: "yes"})


def test_import_fails_early_on_a_torch_outside_the_range():
    """``import torchair_dist`` with torch 2.99 fails at once, naming the range."""
    code = ("import torch; torch.__version__ = '2.99.0'\n"
            "try:\n    import torchair_dist\nexcept ImportError as e:\n    print('ERR', e)\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop(torch_compat.ALLOW_ENV, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.stdout.startswith("ERR torchair_dist supports torch >=2.11,<2.15"), \
        out.stdout + out.stderr
    assert "this is torch 2.99.0" in out.stdout


def test_every_environment_variable_read_is_declared():
    """The package names no TORCHAIR_* variable that envvars.VARIABLES (the docs' table)
    does not list, and every listed one is named somewhere in the package."""
    import re

    from torchair_dist.base import envvars

    named = set()
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py") and f != "envvars.py":
                named |= set(re.findall(r"\b(TORCHAIR_(?:DIST_)?[A-Z_]+)\b",
                                        open(os.path.join(dirpath, f)).read()))
    assert named - set(envvars.VARIABLES) == set(), sorted(named - set(envvars.VARIABLES))
    assert set(envvars.VARIABLES) - named == set(), sorted(set(envvars.VARIABLES) - named)


def test_import_never_fails_on_a_bad_variable():
    code = "import torchair_dist; print('imported')"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    for name in ("TORCHAIR_DIST_SHM_SLOT_BYTES", "TORCHAIR_DIST_SHM_TIMEOUT",
                 "TORCHAIR_DIST_PLATFORM", "TORCHAIR_DIST_CPU_CAPTURE",
                 "TORCHAIR_DIST_LOG_LEVEL", "TORCHAIR_DIST_GE_VALIDATE"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(env, **{name: "abc"}), timeout=120)
        assert out.stdout.strip() == "imported", (name, out.stderr[-500:])


def test_a_bad_variable_is_an_error_naming_it():
    from torchair_dist.base import envvars
    from torchair_dist.errors import ConfigError

    cases = {"TORCHAIR_DIST_SHM_SLOT_BYTES": lambda: envvars.env_int(
        "TORCHAIR_DIST_SHM_SLOT_BYTES", 1, minimum=64),
             "TORCHAIR_DIST_SHM_TIMEOUT": lambda: envvars.env_seconds("TORCHAIR_DIST_SHM_TIMEOUT"),
             "TORCHAIR_DIST_GE_VALIDATE": lambda: envvars.env_flag("TORCHAIR_DIST_GE_VALIDATE")}
    for name, read in cases.items():
        os.environ[name] = "abc"
        try:
            with pytest.raises(ConfigError, match=f"environment variable {name}='abc': "
                                                  f"expected"):
                read()
        finally:
            del os.environ[name]
