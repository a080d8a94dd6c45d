"""launch/serve_engine.py's harness without compiling a model: one child process per variant,
rounds interleaved in a rotated order, a failing, hung or differently built child reported in
its own row while the others run; the defaults keep the engine saturated.

The children run :class:`FakeRunner` (it stands in for ``VariantRunner``: same methods, no
model); "spawn" children import it from this module by name."""
import argparse
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "launch"))
import serve_engine  # noqa: E402


class FakeRunner:
    """A variant by name: "boom" raises in its warm-up, "crash" exits in it, "hang" never
    answers its first timed round, "odd" reports other weights; the rest answer at once. A timed round's ``rate`` is
    the time it ran at (``time.monotonic()``, one clock for every process), so the rows say
    the order the rounds really ran in."""

    def __init__(self, name, args, requests, model=None):
        self.name = name
        self.checksum = "odd weights" if name == "odd" else "same weights"

    def warm_up(self, _=None):
        if self.name == "boom":
            raise ValueError("boom in the warm-up\nsecond line")
        if self.name == "crash":
            os._exit(3)
        return dict(warm_up_s=0.01, tokens={0: [5, 6], 1: [7]})

    def timed_round(self, rnd):
        if self.name == "hang":
            time.sleep(3600)
        stamp = time.monotonic()
        time.sleep(0.02)
        return dict(rate=stamp, gaps=[0.001, 0.002], arrival_share=0.1)

    def finish(self, _=None):
        return dict(frames_after_warm_up=0, graphs=0, captures=0, max_captures_per_key=0,
                    graph_bytes=None)

    def close(self, _=None):
        pass


def _args(**kw):
    base = dict(rounds=4, threads=None, child_timeout=60.0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_rounds_rotate_and_a_failing_child_is_its_rows_error():
    names = ["eager", "a", "boom", "odd", "b"]
    log = []
    rows, schedule = serve_engine.run_interleaved(names, _args(), [], log=log.append,
                                                  runner_cls=FakeRunner)
    by = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == names
    assert by["boom"]["status"] == "error: ValueError: boom in the warm-up", by["boom"]
    assert by["odd"]["status"].startswith("error: weights differ from eager's"), by["odd"]
    for n in ["eager", "a", "b"]:
        assert by[n]["status"] == "ok" and by[n]["same_as_eager"], by[n]
        assert len(by[n]["tokens_per_s_per_round"]) == 4
    # the variants still running, rotated each round: every one starts a round in turn
    assert schedule == [["eager", "a", "b"], ["a", "b", "eager"], ["b", "eager", "a"],
                        ["eager", "a", "b"]]
    ran = sorted((stamp, n) for n in ["eager", "a", "b"]
                 for stamp in by[n]["tokens_per_s_per_round"])
    assert [n for _, n in ran] == [n for order in schedule for n in order]
    assert not multiprocessing.active_children()


def test_a_hung_child_is_killed_and_named_an_exited_one_reported_the_others_finish():
    log = []
    t0 = time.monotonic()
    rows, _ = serve_engine.run_interleaved(["eager", "hang", "crash", "a"],
                                           _args(rounds=2, child_timeout=3.0), [],
                                           log=log.append, runner_cls=FakeRunner)
    assert time.monotonic() - t0 < 60
    by = {r["variant"]: r for r in rows}
    assert by["hang"]["status"].startswith("error: hung: no answer in 3 s"), by["hang"]
    assert by["crash"]["status"] == "error: child exited (code 3)", by["crash"]
    assert by["eager"]["status"] == by["a"]["status"] == "ok"
    assert len(by["a"]["tokens_per_s_per_round"]) == 2
    assert any(m.startswith("hung") and "hang" in m for m in log), log
    assert not multiprocessing.active_children()


def test_tokens_unlike_eagers_are_named_by_request():
    row = {}
    serve_engine.check_tokens(row, {0: [5, 6], 1: [8]}, {0: [5, 6], 1: [7]})
    assert row == dict(same_as_eager=False, mismatched=[1])


def test_sequential_runs_each_variant_through_and_says_so_in_its_order():
    rows, schedule = serve_engine.run_sequential(["eager", "boom", "a"], _args(rounds=2), [],
                                                 None, log=lambda m: None,
                                                 runner_cls=FakeRunner)
    assert [r["status"] for r in rows] == ["ok", "error: ValueError: boom in the warm-up", "ok"]
    assert schedule == [["eager", "eager"], ["boom", "boom"], ["a", "a"]]


def test_defaults_interleave_and_saturate(capsys):
    args = serve_engine.parse_args([])
    assert not args.sequential and args.rounds >= 10
    # the whole default stream arrives within a few steps of wall time: far less than the
    # time any variant takes to generate its tokens (saturated, not arrival-bound)
    reqs = serve_engine.stream(args)
    assert reqs[-1].arrival * args.step_ms < 100
    rows = [dict(variant="eager", status="ok", tokens_per_s=100.0, p50_ms=1.0, p99_ms=2.0,
                 warm_up_s=1.0, graph_bytes=None, captures=0, frames_after_warm_up=0,
                 same_as_eager=True, arrival_share=0.6),
            dict(variant="inductor", status="error: hung: no answer in 900 s (killed)")]
    serve_engine.print_table(rows, args)
    out = capsys.readouterr().out
    assert "inductor                      error: hung" in out
    assert "arrival-bound" in out
