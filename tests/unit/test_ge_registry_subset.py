"""The bundled GE registry subset: present, covering every emitted op, and current."""
import json
import os

import pytest

from torchair_dist.backends.ge import registry_check, registry_subset


def test_subset_covers_every_emitted_op():
    ops = json.loads(registry_subset.SUBSET_PATH.read_text())["ops"]
    missing = sorted(t for t in registry_subset.emitted_op_types()
                     if t not in ops and t not in registry_check.BUILTIN_OPS)
    assert not missing, f"regenerate with `make registry`: {missing}"


def test_validation_uses_the_subset_without_the_full_registry(monkeypatch, tmp_path):
    monkeypatch.setattr(registry_check.Path, "exists", lambda self: False)
    monkeypatch.delenv(registry_check.ENV_REGISTRY, raising=False)
    path = registry_check.default_registry_path()
    assert path == registry_subset.SUBSET_PATH
    assert "MatMulV2" in registry_check.load_registry(path)


def test_subset_is_current_with_the_full_registry():
    full = registry_check.default_registry_path(allow_subset=False)
    if not os.path.exists(full):
        pytest.skip(f"the full registry is not at {full} (it is shipped beside the repo in CI)")
    expected = registry_subset.render(registry_subset.build_subset(str(full)))
    assert registry_subset.SUBSET_PATH.read_text() == expected, "run `make registry`"
