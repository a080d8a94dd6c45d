"""pytest plugin for a swapped run of PyTorch's inductor end-to-end tests (loaded by
``run_torch_inductor.py`` with ``-p inductor_suite_plugin``).

* Swap: with ``TORCHAIR_DIST_SWAP_MODE`` set, ``torch.compile`` is swapped by
  :mod:`backend_swap` (``swap_site``), and ``torch._inductor.compile_fx.compile_fx`` is replaced,
  before the test files import it, by a function that compiles with our backend in that mode.
  That is what the tests' ``check_model`` calls (``torch._dynamo.optimize(compile_fx_wrapper)``),
  what ``torch._dynamo.optimize("inductor")`` and ``CompileCounterWithBackend("inductor")`` call
  and what ``optimize_assert(compile_fx)`` is given. Every call is counted per test.
* Tests that inspect inductor itself (its generated code, kernel counts, metrics, IR,
  ``compile_fx_inner``, AOTInductor) are skipped as not applicable, each with the construct
  that makes it so (:data:`INDUCTOR_ONLY`), found in the test's own source.
* Each failure is classified (:func:`classify`) from the exception itself (the original one,
  under Dynamo's wrapping); every test's outcome, category, error (type and first lines) and
  backend call count is written as JSON to the file named by ``TORCHAIR_DIST_SUITE_REPORT``.
* The test files are of an older PyTorch than the installed one: the one name they import that
  torch 2.13 removed (``complex_memory_overlap``) is provided as a stub that raises, so the
  files import; the only test that calls it is not applicable anyway.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import re

import pytest
from torch_suite_plugin import NA_PREFIX, REPORT_ENV, _last_line

SWAP_ENV = "TORCHAIR_DIST_SWAP_MODE"
LIB = os.sep + "torchair_dist" + os.sep
GE_PATHS = (os.sep + os.path.join("torchair_dist", "cpu", "ge_reference") + os.sep,
            os.sep + os.path.join("torchair_dist", "backends", "ge") + os.sep)
# source construct -> why a test using it checks inductor itself, not the compiled results
INDUCTOR_ONLY = {
    "run_and_get_code": "reads inductor's generated code (run_and_get_code)",
    "run_and_get_cpp_code": "reads inductor's generated C++ (run_and_get_cpp_code)",
    "run_and_get_triton_code": "reads inductor's generated Triton (run_and_get_triton_code)",
    "run_fw_bw_and_get_code": "reads inductor's generated code (run_fw_bw_and_get_code)",
    "_run_and_assert_no_indirect_indexing": "reads inductor's generated indexing code",
    "FileCheck": "FileCheck of inductor's generated kernels",
    "assertGeneratedKernelCountEqual": "counts inductor's generated kernels",
    "generated_kernel_count": "reads inductor's kernel-count metric",
    "ir_nodes_pre_fusion": "reads inductor's IR-node metric",
    "add_scheduler_init_hook": "hooks inductor's scheduler",
    "compile_fx_inner": "calls inductor's compile_fx_inner on an aten graph directly",
    "GraphLowering": "drives inductor's GraphLowering directly",
    "aoti_": "AOTInductor (ahead-of-time compile and its eager cache)",
    "complex_memory_overlap": "calls an inductor helper that torch 2.13 removed",
    "should_pad_bench": "calls inductor's pad_mm heuristic",
    "inner_fn_str": "reads inductor IR's inner_fn_str",
    "inductor_wrapper_call": "looks for inductor's profiler mark (profiler_mark_wrapper_call)",
}
REFUSALS = ("UnsupportedOpError", "UnsupportedModeError", "BackendUnavailableError",
            "UnsupportedTorchError")
VALUE_MISMATCH = re.compile(r"not close|not equal|Mismatched elements|mismatch|The values for "
                            r"attribute|False is not true|True is not false")
GE_ERROR = "error in the GE path (converter / reference executor)"
CATEGORIES = ("wrong result", "refusal", GE_ERROR,
              "crash inside torchair_dist", "error outside torchair_dist", "timeout")

_calls = [0]
_compiler = [None]  # who the counted compiles went to: "torchair_dist <mode>" or "inductor"
_outcomes: dict = {}
_per_test_calls: dict = {}


def _removed_in_torch_2_13(*args, **kwargs):
    raise NotImplementedError("torch._inductor.compile_fx.complex_memory_overlap was removed "
                              "in torch 2.13; stub provided by inductor_suite_plugin")


def _install() -> None:
    import torch._inductor.compile_fx as cfx

    if not hasattr(cfx, "complex_memory_overlap"):
        cfx.complex_memory_overlap = _removed_in_torch_2_13
    if getattr(cfx.compile_fx, "_torchair_dist_counted", False):
        return
    mode = os.environ.get(SWAP_ENV)
    real = cfx.compile_fx
    if mode:  # every compile by ours is counted, whether via torch.compile or compile_fx
        import backend_swap

        backend_swap.install(mode)
        ours = backend_swap.our_backend

        @functools.lru_cache(maxsize=None)
        def counted(mode_):
            backend = ours(mode_)

            def compile_with_ours(gm, example_inputs, **kwargs):
                _calls[0] += 1
                _compiler[0] = f"torchair_dist {mode_}"
                return backend(gm, example_inputs, **kwargs)

            return compile_with_ours

        backend_swap.our_backend = counted

    @functools.wraps(real)
    def compile_fx(model_, example_inputs_, *args, **kwargs):
        if mode:  # inner_compile / config_patches / decompositions are inductor's: not ours
            return backend_swap.our_backend(mode)(model_, example_inputs_)
        _calls[0] += 1  # --mode torch: inductor's own compiles are counted
        _compiler[0] = "inductor"
        return real(model_, example_inputs_, *args, **kwargs)

    compile_fx._torchair_dist_counted = True
    cfx.compile_fx = compile_fx


_install()


def _sources(func, depth: int = 8) -> str:
    """The source of a test function and of what it wraps: ``__wrapped__``, and the functions in
    its defaults and closure (the files' ``copy_tests`` passes the template's test as a default
    argument and replaces ``__dict__``, which drops ``__wrapped__``)."""
    seen, todo, out = set(), [func], []
    while todo and depth:
        depth -= 1
        nxt = []
        for f in todo:
            if not callable(f) or id(f) in seen:
                continue
            seen.add(id(f))
            f = getattr(f, "__func__", f)
            try:
                out.append(inspect.getsource(f))
            except (OSError, TypeError):
                pass
            cells = [c.cell_contents for c in (getattr(f, "__closure__", None) or ())
                     if c.cell_contents is not None]
            nxt += [getattr(f, "__wrapped__", None), *(getattr(f, "__defaults__", None) or ()),
                    *cells]
        todo = [f for f in nxt if inspect.isfunction(f) or inspect.ismethod(f)]
    return "\n".join(out)


def inductor_only_reason(func) -> str | None:
    """Why the test function checks inductor itself (None when it checks results)."""
    src = _sources(func)
    for token, why in INDUCTOR_ONLY.items():
        if token in src:
            return why
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = inductor_only_reason(getattr(item, "function", None))
        if reason:
            item.add_marker(pytest.mark.skip(reason=NA_PREFIX + reason))


def _chain(exc):
    """The exception and what caused it, outermost first (Dynamo wraps backend errors)."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = (getattr(exc, "inner_exception", None) or exc.__cause__ or
               (None if exc.__suppress_context__ else exc.__context__))
    return seen


def _frames(exc):
    tb, out = exc.__traceback__, []
    while tb is not None:
        out.append(f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}")
        tb = tb.tb_next
    return out


def _short(frame: str) -> str:
    for cut in (os.sep + "site-packages" + os.sep, LIB):
        if cut in frame:
            return ("torchair_dist" + os.sep if cut == LIB else "") + frame.split(cut)[-1]
    return frame


def classify(exc) -> tuple[str, str]:
    """(category, detail) of a test's exception, from the original exception (Dynamo wraps a
    backend's): its type, and where it was raised. An error raised in torch code that our
    library called (an aten op run by the reference executor, say) counts as ours, by our
    innermost frame; the detail names the innermost frame and ours."""
    chain = _chain(exc)
    root = chain[-1]
    names = [type(e).__name__ for e in chain]
    frames = _frames(root)
    inner = frames[-1] if frames else ""
    own = [f for f in frames if LIB in f]
    detail = f"{type(root).__name__} at {_short(inner)}"
    if own and own[-1] != inner:
        detail += f" (under {_short(own[-1])})"
    if any("Timeout" in n for n in names) or "Timeout" in str(exc)[:200]:
        return "timeout", detail
    if any(n in REFUSALS for n in names):
        return "refusal", detail
    if any(n == "GeRuntimeError" for n in names) or (own and any(p in own[-1] for p in GE_PATHS)):
        return GE_ERROR, detail
    if own:
        return "crash inside torchair_dist", detail
    if isinstance(root, AssertionError):
        kind = "values" if VALUE_MISMATCH.search(str(root)) or not str(root) else "other check"
        return "wrong result", f"{detail} ({kind})"
    return "error outside torchair_dist", detail


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = _calls[0]
    yield
    _per_test_calls[item.nodeid] = _calls[0] - before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        report.torchair_category = classify(call.excinfo.value)
        root = _chain(call.excinfo.value)[-1]
        lines = [ln.strip() for ln in str(root).splitlines() if ln.strip() and not
                 ln.startswith(("To execute this test", "python test/"))][:3]
        report.torchair_error = f"{type(root).__name__}: {' | '.join(lines)}"[:400]


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::", 1)[-1]
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed") or \
            (report.when == "teardown" and report.outcome == "failed"):
        rec = {"outcome": report.outcome,
               "backend_calls": _per_test_calls.get(report.nodeid, 0)}
        if rec["backend_calls"]:
            rec["compiler"] = _compiler[0]
        if hasattr(report, "wasxfail"):
            rec["xfail"] = True
        if report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            rec["reason"] = reason.replace("Skipped: ", "")
        elif report.failed:
            rec["error"] = getattr(report, "torchair_error", None) or _last_line(report)
            cat = getattr(report, "torchair_category", None)
            if cat is None and "Timeout" in rec["error"]:
                cat = ("timeout", "pytest-timeout")
            rec["category"], rec["detail"] = cat or ("error outside torchair_dist", "")
        if report.outcome == "failed" or name not in _outcomes or report.when == "call":
            _outcomes[name] = rec
            if len(_outcomes) % 10 == 0:  # a long run's partial results can be read meanwhile
                pytest_sessionfinish(None, None)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(_outcomes, f, indent=1, sort_keys=True)
