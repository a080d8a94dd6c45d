"""PyTorch's inductor end-to-end tests with the backend swapped (``run_torch_inductor.py``): the
failure classification and the not-applicable rule, and (with PyTorch's test files, which CI
cannot download: those cases skip and say why) that the swap really compiles with ours."""
import os

import pytest

import inductor_suite_plugin as plugin
import run_torch_inductor as runner
from torchair_dist.errors import GeRuntimeError, UnsupportedOpError


def _raise_from(path: str, exc: BaseException):
    """Raise ``exc`` from a frame whose file is ``path`` (as if raised in that module)."""
    code = compile("def f(exc):\n    raise exc\n", path, "exec")
    scope: dict = {}
    exec(code, scope)
    try:
        scope["f"](exc)
    except BaseException as caught:  # noqa: BLE001 - handed back to the test
        return caught
    raise AssertionError("not raised")


LIB = os.path.join(os.sep, "x", "torchair_dist")


def _wrapped(inner: BaseException) -> BaseException:
    """As Dynamo hands a backend's error to the test: wrapped, the original as the cause."""
    try:
        raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc, category", [
    (_wrapped(_raise_from(os.path.join(LIB, "backends", "ge", "fx2ge.py"),
                          UnsupportedOpError("aten.foo"))), "refusal"),
    (_wrapped(_raise_from(os.path.join(LIB, "cpu", "ge_reference", "kernels.py"),
                          IndexError("shape"))), plugin.GE_ERROR),
    (_raise_from(os.path.join(os.sep, "y", "torch", "x.py"), GeRuntimeError("run")),
     plugin.GE_ERROR),
    (_wrapped(_raise_from(os.path.join(LIB, "pipeline", "stages.py"), KeyError("k"))),
     "crash inside torchair_dist"),
    (_raise_from(os.path.join(os.sep, "y", "test_x.py"),
                 AssertionError("Tensor-likes are not close!")), "wrong result"),
    (_raise_from(os.path.join(os.sep, "y", "torch", "_dynamo", "x.py"), TypeError("t")),
     "error outside torchair_dist"),
])
def test_classify_names_where_a_failure_comes_from(exc, category):
    got, detail = plugin.classify(exc)
    assert got == category, (got, detail)
    assert type(exc.__cause__ or exc).__name__ in detail


def test_an_assertion_raised_in_our_library_is_a_crash_not_a_wrong_result():
    exc = _raise_from(os.path.join(LIB, "cpu", "record.py"), AssertionError("invariant"))
    assert plugin.classify(exc)[0] == "crash inside torchair_dist"


def test_an_error_raised_in_torch_code_our_executor_called_is_ours():
    scope: dict = {}
    exec(compile("def op(e):\n    raise e\n", os.path.join(os.sep, "y", "torch", "_ops.py"),
                 "exec"), scope)
    exec(compile("def run(e):\n    op(e)\n",  # the reference executor calling an aten op
                 os.path.join(LIB, "cpu", "ge_reference", "executor.py"), "exec"), scope)
    try:
        scope["run"](RuntimeError("numel: integer multiplication overflow"))
    except RuntimeError as exc:
        category, detail = plugin.classify(exc)
    assert category == plugin.GE_ERROR and "under torchair_dist" in detail, detail


def test_tests_that_read_inductors_code_are_not_applicable_and_others_are():
    def reads_code(self):
        return run_and_get_code(self)  # noqa: F821 - only its source is read

    def compares(self):
        return self.common(abs, ())

    assert "run_and_get_code" in plugin.inductor_only_reason(reads_code)
    assert plugin.inductor_only_reason(compares) is None

    def copied(self, value=reads_code):  # as the files' copy_tests makes each class's test
        return value(self)

    copied.__dict__ = {}  # copy_tests replaces __dict__: no __wrapped__ left
    assert "run_and_get_code" in plugin.inductor_only_reason(copied)


def test_summary_counts_categories_and_backend_never_called():
    outcomes = {"a": {"outcome": "passed", "backend_calls": 2},
                "b": {"outcome": "passed", "backend_calls": 0},
                "c": {"outcome": "failed", "category": "refusal", "error": "E"},
                "d": {"outcome": "skipped", "reason": plugin.NA_PREFIX + "x"}}
    counts = runner.summarize(outcomes)
    assert counts == {"ok": 1, "ok (backend never called)": 1, "failed": 1, "refusal": 1,
                      "not applicable": 1, "total": 4}
    assert "### refusal (1)" in runner.markdown("t", outcomes, counts)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode, compiler", [("max-autotune", "torchair_dist max-autotune"),
                                            ("torch", "inductor")])
def test_check_model_compiles_with_our_backend_when_swapped(mode, compiler):
    """``check_model`` calls ``compile_fx``: swapped, that is ours; else inductor's own (each
    compile counted per test, with who compiled it)."""
    root = runner.find_tests_root()
    if root is None:
        pytest.skip(f"{runner.FILES['dynamic'][0]} not found: {runner.HOW_TO_GET}")
    outcomes = runner.run(root, "dynamic", mode, "test_abs_dynamic_shapes_cpu", 300)
    assert outcomes == {"DynamicShapesCpuTests::test_abs_dynamic_shapes_cpu":
                        {"outcome": "passed", "backend_calls": 1, "compiler": compiler}}
