"""Run PyTorch's inductor end-to-end tests unmodified, with the backend swapped for ours, and
print the counts per failure category.

    python tests/clients/run_torch_inductor.py --mode max-autotune              # dynamic shapes
    python tests/clients/run_torch_inductor.py --mode npugraph_ex --file static
    python tests/clients/run_torch_inductor.py --mode torch -k "test_abs or test_cat"
    python tests/clients/run_torch_inductor.py --mode max-autotune --json out.json --md out.md
    python tests/clients/run_torch_inductor.py --mode torch --only-failed out.json  # inductor

The files are ``test/inductor/test_torchinductor.py`` (class ``CpuTests``: every program of its
``CommonTemplate``, compiled with static shapes) and ``test/inductor/
test_torchinductor_dynamic_shapes.py`` (``DynamicShapesCpuTests``: the same programs with
``assume_static_by_default=False``, so the backend sees symbolic sizes). Like the DTensor runner
(:mod:`run_torch_dtensor`) it reads them from a PyTorch source tree (``--tests-root``,
``TORCHAIR_DIST_TORCH_TESTS`` or ``.torchair_dist_cache/torch_tests``; they are not in the wheel)
and skips, saying so, without one. The tests compare as they always do (``check_model``: the
compiled result against eager with the file's tolerances); :mod:`inductor_suite_plugin` swaps
the backend (``--mode torch``: none, inductor itself), marks the tests that inspect inductor
itself not applicable, classifies each failure and writes every outcome.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_torch_dtensor import CACHE, REPO, ROOT_ENV  # noqa: E402

FILES = {"static": ("test/inductor/test_torchinductor.py", "CpuTests"),
         "dynamic": ("test/inductor/test_torchinductor_dynamic_shapes.py",
                     "DynamicShapesCpuTests")}
MODES = ("npugraph_ex", "max-autotune", "torch")
HOW_TO_GET = (
    "PyTorch's test files are not in the torch wheel and no registry this project's CI reaches "
    "ships them (see run_torch_dtensor.HOW_TO_GET). Put a PyTorch source tree (at least "
    f"{' and '.join(f for f, _ in FILES.values())}) under {CACHE} or point {ROOT_ENV} at one.")


def find_tests_root(given: str | None = None) -> Path | None:
    for candidate in (given, os.environ.get(ROOT_ENV), CACHE):
        if candidate and all((Path(candidate) / f).is_file() for f, _ in FILES.values()):
            return Path(candidate)
    return None


def run(root: Path, which: str, mode: str, keyword: str | None, timeout_s: int,
        partial: str | None = None, names: list | None = None) -> dict:
    """One pytest process over one file's CPU class with the swap for ``mode``; its outcomes
    so far are in ``partial`` (JSON, rewritten every 10 tests) while it runs."""
    path, cls = FILES[which]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # a PYTHONPATH given by the caller comes before this checkout: it picks the torchair_dist
    paths = [str(HERE), *[p for p in [env.get("PYTHONPATH")] if p], str(REPO)]
    env.pop("TORCHAIR_DIST_SWAP_MODE", None)
    if mode != "torch":
        paths.insert(0, str(HERE / "swap_site"))
        env["TORCHAIR_DIST_SWAP_MODE"] = mode
    env["PYTHONPATH"] = os.pathsep.join(paths)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(partial or Path(tmp) / "report.json")
        env["TORCHAIR_DIST_SUITE_REPORT"] = str(report)
        ids = [f"{root / path}::{n}" for n in names if n.startswith(cls + "::")] \
            if names is not None else [f"{root / path}::{cls}"]
        if not ids:
            return {}
        cmd = [sys.executable, "-m", "pytest", *ids, "-q", "-p",
               "inductor_suite_plugin", "-p", "no:cacheprovider", "--rootdir", str(root),
               "-c", os.devnull, "--timeout", str(timeout_s), "-o", "console_output_style=count"]
        if keyword:
            cmd += ["-k", keyword]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode not in (0, 1) or not report.is_file():  # 1: some test failed
            raise RuntimeError(f"{which}/{mode}: pytest did not run the file (exit "
                               f"{proc.returncode}):\n" + (proc.stdout + proc.stderr)[-4000:])
        return json.loads(report.read_text())


def summarize(outcomes: dict) -> dict:
    from torch_suite_plugin import NA_PREFIX

    counts = collections.Counter()
    for rec in outcomes.values():
        if rec["outcome"] == "skipped":
            counts["not applicable" if rec.get("reason", "").startswith(NA_PREFIX) else
                   "xfail (expected by the file)" if rec.get("xfail") else "skipped"] += 1
        elif rec["outcome"] == "passed":
            counts["ok" if rec.get("backend_calls", 1) or rec.get("xfail") else
                   "ok (backend never called)"] += 1
        else:
            counts["failed"] += 1
            counts[rec.get("category", "?")] += 1
    counts["total"] = len(outcomes)
    return dict(counts)


def markdown(title: str, outcomes: dict, counts: dict) -> str:
    from inductor_suite_plugin import CATEGORIES

    lines = [f"## {title}", "", "| count | n |", "| --- | --- |"]
    for key in ("ok", "ok (backend never called)", "failed", *CATEGORIES, "not applicable",
                "xfail (expected by the file)", "skipped", "total"):
        if key in counts:
            lines.append(f"| {key} | {counts[key]} |")
    for cat in CATEGORIES:
        bad = sorted((n, r) for n, r in outcomes.items() if r.get("category") == cat)
        if bad:
            lines += ["", f"### {cat} ({len(bad)})", ""]
            lines += [f"- `{n}` — {r.get('detail', '')}: {r.get('error', '')[:400]}"
                      for n, r in bad]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="max-autotune",
                        help="our backend's mode, or 'torch' for inductor itself")
    parser.add_argument("--file", choices=("dynamic", "static", "both"), default="dynamic",
                        help="which test file (default: the dynamic-shapes one)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--tests-root", help="a PyTorch source tree holding the test files")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test")
    parser.add_argument("--json", help="write every test's outcome here")
    parser.add_argument("--md", help="write the counts and failure lists as markdown here")
    parser.add_argument("--only-failed", metavar="JSON",
                        help="run only the tests that failed in this earlier --json or "
                        "--partial file (before/after a fix; which fail under inductor too)")
    parser.add_argument("--partial", help="keep the outcomes so far in this JSON file while "
                        "a file runs (for a long run; see --summarize)")
    parser.add_argument("--summarize", metavar="JSON",
                        help="print the markdown summary of a --partial file and exit")
    parser.add_argument("--require", action="store_true",
                        help="exit 2 when the test files cannot be found (default: exit 0)")
    args = parser.parse_args(argv)
    if args.summarize:
        outcomes = json.loads(Path(args.summarize).read_text())
        print(markdown(f"{args.summarize} (partial)", outcomes, summarize(outcomes)))
        return 0
    root = find_tests_root(args.tests_root)
    if root is None:
        print(f"SKIPPED: the test files were not found. {HOW_TO_GET}")
        return 2 if args.require else 0
    import torch

    names = None
    if args.only_failed:
        earlier = json.loads(Path(args.only_failed).read_text())
        tests = {n: r for v in earlier.values() if "tests" in v for n, r in v["tests"].items()} \
            if all(isinstance(v, dict) and "tests" in v for v in earlier.values()) else earlier
        names = sorted(n for n, r in tests.items() if r["outcome"] == "failed")
        if not names:
            print(f"{args.only_failed}: no failed test")
            return 0
    results, md = {}, []
    for which in (("dynamic", "static") if args.file == "both" else (args.file,)):
        start = time.time()
        outcomes = run(root, which, args.mode, args.keyword, args.timeout, args.partial, names)
        counts = summarize(outcomes)
        key = f"{which}/{args.mode}"
        results[key] = {"counts": counts, "tests": outcomes, "torch": torch.__version__,
                        "seconds": round(time.time() - start)}
        print(f"{key}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
        for name, rec in sorted(outcomes.items()):
            if rec["outcome"] == "failed":
                print(f"    [{rec.get('category')}] {name}: {rec.get('error', '')[:160]}")
        md.append(markdown(f"{FILES[which][1]}, {args.mode}", outcomes, counts))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.md:
        Path(args.md).write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
