"""Chaos sweep: many seeded rank-divergent programs on 2 and 4 gloo ranks, in every mode.

Runs the generator of ``tests/multicard/chaos.py`` (compile-time divergences and legal ones,
batched into one rank pool per world size; runtime faults — a rank dies or stops — in a fresh
pool each, with a short process-group timeout) and prints, per world size and mode, the count
of programs by outcome class, the worst time to error per class (compile-time kinds: from the
first rank's error; faults: from the fault), the programs whose outcome was wrong, and hangs.

Usage (several processes: hold the multi-rank lock)::

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python benchmarks/chaos_sweep.py [-n 300] [--faults 8] \
        [--seed 0] [--pg-timeout 10] [--ws 2 4]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("", "tests", os.path.join("tests", "multicard")):
    if os.path.join(_ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(_ROOT, _sub))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("TORCHAIR_DIST_GE_VALIDATE", "1")

import chaos  # noqa: E402
import chaos_rank  # noqa: E402
from harness import RankFailure, RankPool  # noqa: E402

BATCH = 16  # programs per pool round trip


def _record(stats, prog, outcomes, problems):
    key = (prog.ws, prog.mode)
    times = chaos.time_to_error(prog, outcomes)
    got = chaos.classify(prog, outcomes)
    for r in range(prog.ws):
        cls = got.get(r, "missing")
        s = stats[key][cls]
        s[0] += 1
        if r in times:
            s[1] = max(s[1], times[r])
    stats[key]["programs"][0] += 1
    if problems:
        print(f"WRONG {prog.describe()}:\n  " + "\n  ".join(problems), flush=True)
    return bool(problems)


def _compile_time(ws, progs, stats, slack):
    pool, wrong, hangs = RankPool(ws), 0, 0
    try:
        for i in range(0, len(progs), BATCH):
            batch = progs[i:i + BATCH]
            try:
                results = pool.run(chaos_rank.run_programs, batch,
                                   timeout=60 + 20 * len(batch))
            except RankFailure as failure:  # a hang or a crash: every rank's traceback
                hangs += sum(1 for s in failure.per_rank.values() if s == "hung")
                wrong += len(batch)
                print(f"FAILED batch {[p.uid for p in batch]}:\n{failure}", flush=True)
                continue
            for j, prog in enumerate(batch):
                outcomes = {r: results[r][j] for r in range(ws)}
                wrong += _record(stats, prog, outcomes,
                                 chaos.check(prog, outcomes, slack_s=slack))
    finally:
        pool.shutdown()
    return wrong, hangs


def _faults(progs, stats, pg_timeout, slack):
    wrong, hangs = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for prog in progs:
            pool = RankPool(prog.ws, pg_timeout_s=pg_timeout)
            outcomes = chaos.run_fault(pool, prog, os.path.join(tmp, f"f{prog.uid}"),
                                       pg_timeout)
            hangs += sum(1 for o in outcomes.values() if o.cls == "hung")
            wrong += _record(stats, prog, outcomes,
                             chaos.check(prog, outcomes, pg_timeout_s=pg_timeout,
                                         slack_s=slack))
    return wrong, hangs


def _print(stats):
    print(f"\n{'ws':>3} {'mode':<16} {'programs':>8}  outcomes per rank: class count "
          f"(worst time to error)")
    for (ws, mode) in sorted(stats):
        row = stats[(ws, mode)]
        parts = [f"{cls} {n}" + (f" ({t:.2f}s)" if t else "")
                 for cls, (n, t) in sorted(row.items()) if cls != "programs"]
        print(f"{ws:>3} {mode:<16} {row['programs'][0]:>8}  " + ", ".join(parts))
    worst = collections.defaultdict(float)
    for row in stats.values():
        for cls, (_, t) in row.items():
            worst[cls] = max(worst[cls], t)
    print("worst time to error per class (s): "
          + ", ".join(f"{c} {t:.2f}" for c, t in sorted(worst.items()) if t))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=300, help="compile-time / legal programs")
    ap.add_argument("--faults", type=int, default=6, help="runtime-fault programs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pg-timeout", type=float, default=10.0)
    ap.add_argument("--slack", type=float, default=3.0, help="seconds added to each bound")
    ap.add_argument("--ws", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args()
    stats = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0]))
    progs = chaos.suite(args.n, seed=args.seed, world_sizes=tuple(args.ws))
    faults = chaos.suite(args.faults, seed=args.seed + 1, world_sizes=tuple(args.ws),
                         kinds=chaos.FAULT_KINDS)
    for i, p in enumerate(faults):
        p.uid = 100000 + i
    t0 = time.monotonic()
    wrong = hangs = 0
    for ws in args.ws:
        w, h = _compile_time(ws, [p for p in progs if p.ws == ws], stats, args.slack)
        wrong, hangs = wrong + w, hangs + h
    w, h = _faults(faults, stats, args.pg_timeout, args.slack)
    wrong, hangs = wrong + w, hangs + h
    _print(stats)
    print(f"programs: {len(progs) + len(faults)} ({len(faults)} runtime faults), wrong: {wrong}, "
          f"hangs: {hangs}, {time.monotonic() - t0:.0f}s")
    return 1 if wrong or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
