"""Run PyTorch's DTensor compile tests unmodified, with torch.compile's backend swapped for
torchair_dist's, in each mode; print the counts per mode.

    python tests/clients/run_torch_dtensor.py                      # npugraph_ex and max-autotune
    python tests/clients/run_torch_dtensor.py --mode torch         # torch's own backends (baseline)
    python tests/clients/run_torch_dtensor.py --check --json out.json

The test file (``test/distributed/tensor/test_dtensor_compile.py`` of PyTorch's source) is not
in the torch wheel, and no package registry this project's CI reaches ships it for the
installed torch (see :data:`HOW_TO_GET`); the runner reads it from a PyTorch source tree's root
given by ``--tests-root``, ``TORCHAIR_DIST_TORCH_TESTS``, or ``.torchair_dist_cache/torch_tests``
(gitignored). Without one it says so and exits 0 (``--require``: exit 2).

Each mode runs the file in its own pytest process with ``swap_site`` on ``PYTHONPATH``
(:mod:`backend_swap`: every process of the run, the ranks a test spawns included, compiles
with our backend) and :mod:`torch_suite_plugin` (tests that check another backend's internals
skipped as not applicable, with the reason; outcomes written as JSON). The file is first run
with torch's own backends (mode "torch"): a test that fails there too is counted apart
("failed(torch too)": the file is not of this torch's version, or this machine lacks what it
needs), since no backend can pass it. ``--check`` exits 1 when a test failed with our backend
in any mode and passes with torch's.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEST_FILE = Path("test/distributed/tensor/test_dtensor_compile.py")
ROOT_ENV = "TORCHAIR_DIST_TORCH_TESTS"
CACHE = REPO / ".torchair_dist_cache" / "torch_tests"
MODES = ("npugraph_ex", "max-autotune")
HOW_TO_GET = (
    "PyTorch's test files are not in the torch wheel, and no registry this project's CI "
    "reaches ships them for torch 2.13: PyPI has wheels only (no torch sdist); Debian's "
    "'pytorch' source package is 2.14.1 in sid (its archive was not served) and 2.6.0 in "
    "trixie, 1.13.1 in bookworm. Put a PyTorch source tree of the installed version (at "
    f"least its {TEST_FILE}) under {CACHE} or point {ROOT_ENV} at one.")


def find_tests_root(given: str | None = None) -> Path | None:
    for candidate in (given, os.environ.get(ROOT_ENV), CACHE):
        if candidate and (Path(candidate) / TEST_FILE).is_file():
            return Path(candidate)
    return None


def run_mode(root: Path, mode: str, extra: list, timeout_s: int) -> dict:
    """One pytest process over the test file with the swap for ``mode`` ("torch": none)."""
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    paths = [str(HERE), str(REPO)]
    if mode != "torch":
        paths.insert(0, str(HERE / "swap_site"))
        env["TORCHAIR_DIST_SWAP_MODE"] = mode
    else:
        env.pop("TORCHAIR_DIST_SWAP_MODE", None)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env["TORCHAIR_DIST_SUITE_REPORT"] = str(report)
        cmd = [sys.executable, "-m", "pytest", str(root / TEST_FILE), "-q", "-p",
               "torch_suite_plugin", "-p", "no:cacheprovider", "--rootdir", str(root),
               "-c", os.devnull, "--timeout", str(timeout_s), *extra]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode not in (0, 1) or not report.is_file():  # 1: some test failed
            raise RuntimeError(f"mode {mode}: pytest did not run the file (exit "
                               f"{proc.returncode}; torch's test utilities need the 'expecttest' "
                               f"package, in this project's test extras):\n"
                               + (proc.stdout + proc.stderr)[-4000:])
        return json.loads(report.read_text())


def summarize(outcomes: dict, baseline: dict | None = None) -> dict:
    """Counts of one mode. A test that fails with torch's own backends too (``baseline``: the
    run of mode "torch") is counted apart: the file or this torch fails it, not the backend."""
    from torch_suite_plugin import NA_PREFIX

    counts = {"passed": 0, "failed": 0, "failed with torch too": 0, "skipped": 0,
              "not applicable": 0}
    for name, rec in outcomes.items():
        if rec["outcome"] == "skipped" and rec.get("reason", "").startswith(NA_PREFIX):
            counts["not applicable"] += 1
        elif rec["outcome"] == "failed" and baseline is not None and \
                baseline.get(name, {}).get("outcome") == "failed":
            counts["failed with torch too"] += 1
        else:
            counts[rec["outcome"]] = counts.get(rec["outcome"], 0) + 1
    counts["total"] = len(outcomes)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", action="append", choices=MODES + ("torch",),
                        help="a mode to run (repeatable; default: npugraph_ex and max-autotune)")
    parser.add_argument("--tests-root", help=f"a PyTorch source tree holding {TEST_FILE}")
    parser.add_argument("--check", action="store_true", help="exit 1 when a test failed")
    parser.add_argument("--require", action="store_true",
                        help="exit 2 when the test file cannot be found (default: skip, exit 0)")
    parser.add_argument("--json", help="write every test's outcome per mode here")
    parser.add_argument("--no-baseline", action="store_true",
                        help="do not run torch's own backends first (then every failure counts)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    args = parser.parse_args(argv)
    root = find_tests_root(args.tests_root)
    if root is None:
        print(f"SKIPPED: {TEST_FILE} not found. {HOW_TO_GET}")
        return 2 if args.require else 0
    sys.path.insert(0, str(HERE))
    import torch

    digest = hashlib.sha256((root / TEST_FILE).read_bytes()).hexdigest()[:16]
    print(f"{root / TEST_FILE} (sha256 {digest}...), torch {torch.__version__}")
    extra = ["-k", args.keyword] if args.keyword else []
    results, failed = {}, False
    modes = list(args.mode or MODES)
    baseline = None
    if not args.no_baseline and "torch" not in modes:
        modes.insert(0, "torch")
    print(f"{'mode':<14}{'passed':>8}{'failed':>8}{'failed(torch too)':>19}{'skipped':>9}"
          f"{'n/a':>6}{'total':>7}")
    for mode in modes:
        outcomes = run_mode(root, mode, extra, args.timeout)
        results[mode] = outcomes
        if mode == "torch":
            baseline = outcomes
        counts = summarize(outcomes, None if mode == "torch" else baseline)
        print(f"{mode:<14}{counts['passed']:>8}{counts['failed']:>8}"
              f"{counts['failed with torch too']:>19}{counts['skipped']:>9}"
              f"{counts['not applicable']:>6}{counts['total']:>7}", flush=True)
        for name, rec in sorted(outcomes.items()):
            if rec["outcome"] != "failed":
                continue
            also = baseline is not None and mode != "torch" and \
                baseline.get(name, {}).get("outcome") == "failed"
            if mode != "torch" and not also:
                failed = True
            print(f"    FAILED{' (torch too)' if also else ''} {name}: {rec.get('error', '')}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    return 1 if (failed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
