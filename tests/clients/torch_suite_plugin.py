"""pytest plugin for a swapped run of PyTorch's own tests (loaded by ``run_torch_dtensor.py``
with ``-p torch_suite_plugin``; the backend swap itself is ``backend_swap.py``).

* Tests that check another backend's internals are skipped as *not applicable*, each with its
  reason (:data:`NOT_APPLICABLE`); a swapped run cannot pass or fail them honestly.
* Every test's outcome (passed / failed / skipped, with the reason or the error's last line) is
  written as JSON to the file named by ``TORCHAIR_DIST_SUITE_REPORT`` at the end of the session.
"""
from __future__ import annotations

import json
import os

import pytest

REPORT_ENV = "TORCHAIR_DIST_SUITE_REPORT"
NA_PREFIX = "not applicable with another backend: "

# test function name -> why a swapped backend makes it meaningless
NOT_APPLICABLE = {
    "test_graph_input_is_async":
        "asserts the forward graph that its own aot_autograd compiler (aot_eager_graph) "
        "extracted; with our backend that compiler never runs",
    "test_make_fx_with_invoke_subgraph_dtensor":
        "checks the graph of the 'invoke_subgraph' backend (a higher-order-op tracer under "
        "make_fx), which the test is about; no compile backend of ours is involved",
    "test_aot_autograd_over_dynamo_dtensor_requires_grad":
        "counts compiles of the 'invoke_subgraph' backend under an outer aot_function; no "
        "compile backend of ours is involved",
    "test_tp_compile_comm_reordering":
        "reads inductor's generated Triton code (run_and_get_triton_code)",
    "test_tp_compile_comm_reordering_graph_partition":
        "reads inductor's generated Triton code (run_and_get_triton_code)",
}

_outcomes: dict = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        reason = NOT_APPLICABLE.get(name)
        if reason:
            item.add_marker(pytest.mark.skip(reason=NA_PREFIX + reason))


def _last_line(report) -> str:
    """The exception's own line: the first ``E`` line naming an error, else the last line."""
    text = str(report.longrepr or "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    named = [ln for ln in errors if "Error" in ln or "Exception" in ln or "Unsupported" in ln]
    return (named[0] if named else errors[-1] if errors else
            lines[-1] if lines else "")[:300]


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::", 1)[-1]
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed") or \
            (report.when == "teardown" and report.outcome == "failed"):
        if report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            _outcomes[name] = {"outcome": "skipped", "reason": reason.replace("Skipped: ", "")}
        elif report.outcome == "failed" or name not in _outcomes:
            _outcomes[name] = {"outcome": report.outcome,
                               "error": _last_line(report) if report.failed else ""}


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(_outcomes, f, indent=1, sort_keys=True)
