"""PyTorch's DTensor compile tests with the backend swapped (``run_torch_dtensor.py``), and the
swap's own rules. The suite needs PyTorch's test file, which CI cannot download (the runner's
``HOW_TO_GET``): without it those cases skip and say why."""
import re

import pytest

import backend_swap
import run_torch_dtensor as runner
from torch_suite_plugin import NA_PREFIX, NOT_APPLICABLE


def test_swap_replaces_torchs_backends_and_keeps_counters_and_kept_names():
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend

    ours = backend_swap.our_backend("npugraph_ex")
    assert backend_swap.swapped("inductor", "npugraph_ex") is ours
    assert backend_swap.swapped("aot_eager", "npugraph_ex") is ours
    assert backend_swap.swapped("invoke_subgraph", "npugraph_ex") == "invoke_subgraph"
    counter = CompileCounterWithBackend("aot_eager")
    assert backend_swap.swapped(counter, "npugraph_ex") is counter and counter.backend is ours
    plain = CompileCounter()
    assert backend_swap.swapped(plain, "npugraph_ex") is plain
    assert backend_swap.swapped(aot_autograd(fw_compiler=lambda g, _: g), "npugraph_ex") is ours
    assert backend_swap.our_backend("max-autotune") is not ours
    with pytest.raises(ValueError, match="TORCHAIR_DIST_SWAP_MODE"):
        backend_swap.install("default")


def _root():
    root = runner.find_tests_root()
    if root is None:
        pytest.skip(f"{runner.TEST_FILE} not found: {runner.HOW_TO_GET}")
    return root


def test_not_applicable_names_are_tests_of_the_file():
    """The table names tests that exist (a renamed test must not slip through unchecked)."""
    source = (_root() / runner.TEST_FILE).read_text()
    defined = set(re.findall(r"^\s+def (test_\w+)\(", source, flags=re.M))
    assert set(NOT_APPLICABLE) <= defined, set(NOT_APPLICABLE) - defined


@pytest.fixture(scope="module")
def torch_baseline():
    """The file's outcomes with torch's own backends on this torch (what no backend can beat)."""
    return runner.run_mode(_root(), "torch", [], 600)


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("mode", runner.MODES)
def test_torch_dtensor_compile_tests_pass_with_our_backend(mode, torch_baseline):
    """Every test of the file that passes with torch's own backends passes with ours, or is
    skipped with a reason (the test's own, e.g. no GPU, or not applicable: it checks another
    backend's internals)."""
    outcomes = runner.run_mode(_root(), mode, [], 600)
    assert set(outcomes) == set(torch_baseline)
    failed = {n: r["error"] for n, r in outcomes.items() if r["outcome"] == "failed"
              and torch_baseline[n]["outcome"] != "failed"}
    assert not failed, failed
    for name, rec in outcomes.items():
        if rec["outcome"] == "skipped":
            assert rec["reason"], name
            if name.split("[")[0].split("::")[-1] in NOT_APPLICABLE:
                assert rec["reason"].startswith(NA_PREFIX)
    assert sum(r["outcome"] == "passed" for r in outcomes.values()) > 0
