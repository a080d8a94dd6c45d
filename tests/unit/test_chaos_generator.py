"""The chaos generator (tests/multicard/chaos.py) in one process: seeded programs are
reproducible, each divergence changes what it says on the divergent rank only, and the expected
outcome follows the divergence. (The programs themselves run in tests/multicard/test_chaos.py.)"""
import dataclasses

import chaos


def _key(prog):
    return [dataclasses.astuple(o) for o in prog.ops], \
        [dataclasses.astuple(o) for o in prog.ops_for(prog.rank)]


def test_same_seed_same_program_and_every_kind_is_drawn():
    a, b = chaos.suite(300, seed=5), chaos.suite(300, seed=5)
    assert [p.describe() for p in a] == [p.describe() for p in b]
    assert [_key(p) for p in a] == [_key(p) for p in b]
    assert {p.divergence for p in a} == set(chaos.LEGAL_KINDS + chaos.COMPILE_KINDS)
    assert {(p.ws, p.mode) for p in a} == {(ws, m) for ws in (2, 4) for m in chaos.MODES}
    assert chaos.suite(300, seed=6)[0].describe() != a[0].describe()


def test_divergences_change_only_the_divergent_rank():
    for prog in chaos.suite(400, seed=1):
        base, mine = _key(prog)
        others = [r for r in range(prog.ws) if r != prog.rank]
        assert all(prog.ops_for(r) is prog.ops for r in others)
        assert any(o.kind != "p2p" for o in prog.ops), prog.describe()  # a world collective
        if prog.divergence == "none":
            assert mine == base
            continue
        assert mine != base, prog.describe()
        if prog.divergence == "group":
            assert prog.ws == 4 and any(o.group == "sub" for o in prog.ops_for(prog.rank))
        if prog.divergence == "src":
            assert [o.src for o in prog.ops if o.kind == "broadcast"] != \
                [o.src for o in prog.ops_for(prog.rank) if o.kind == "broadcast"]
        if prog.divergence == "recv_shape":
            op = prog.ops_for(prog.rank)[prog.at]
            assert op.kind == "p2p" and prog.rank == op.dst
            numel = 1
            for d in op.recv_shape:
                numel *= d
            assert numel == op.rows * op.cols  # same bytes, another shape: legal


def test_expected_outcomes():
    for prog in chaos.suite(200, seed=2, kinds=chaos.LEGAL_KINDS + chaos.COMPILE_KINDS
                            + chaos.FAULT_KINDS):
        want = chaos.expected(prog)
        assert sorted(want) == list(range(prog.ws))
        k, r = prog.divergence, prog.rank
        if k in chaos.LEGAL_KINDS:
            assert set(want.values()) == {"ok"}
        elif k in chaos.MISMATCH_KINDS:
            assert set(want.values()) == {"CollectiveMismatchError"}
        elif k == "compile_fail":
            assert want[r] == "own" and {want[o] for o in want if o != r} == {"PeerFailedError"}
        elif k == "die":
            assert want[r] == "died" and \
                {want[o] for o in want if o != r} == {"CollectiveFaultError"}
        else:
            assert set(want.values()) == {"CollectiveFaultError"}


def test_check_flags_wrong_class_unnamed_peer_and_late_errors():
    prog = chaos.generate(3, 2, "npugraph_ex", "compile_fail")
    r, other = prog.rank, 1 - prog.rank
    good = {r: chaos.Outcome("UnsupportedOpError", "x", t_error=10.0),
            other: chaos.Outcome("PeerFailedError", f"rank {r} failed in compile", t_error=10.5)}
    assert chaos.check(prog, good) == []
    unnamed = {**good, other: chaos.Outcome("PeerFailedError", "?", t_error=10.5)}
    assert "does not name" in chaos.check(prog, unnamed)[0]
    late = {**good, other: chaos.Outcome("PeerFailedError", f"rank {r} failed",
                                         t_error=10.0 + chaos.COMPILE_BOUND_S + 1)}
    assert "after its cause" in chaos.check(prog, late)[0]
    hung = {**good, other: chaos.Outcome("hung")}
    assert "hung (want PeerFailedError)" in chaos.check(prog, hung)[0]
    legal = chaos.generate(3, 2, "npugraph_ex", "none")
    assert "compiled != eager" in chaos.check(
        legal, {0: chaos.Outcome("ok", equal=True), 1: chaos.Outcome("ok", equal=False)})[0]


def test_check_of_fault_programs_wants_every_rank_failed_or_right():
    """Issue 33: the stopped rank must fail once it wakes; a survivor may finish only with the
    right value; every rank's step before the fault must equal eager; names are checked."""
    prog = chaos.generate(7, 2, "npugraph_ex", "stop")
    r, other = prog.rank, 1 - prog.rank
    fault = dict(t_error=20.0, step0_equal=True)
    good = {r: chaos.Outcome("CollectiveFaultError", f"rank {other} gave up on exchange #3",
                             **fault),
            other: chaos.Outcome("CollectiveFaultError", f"rank {r} never reached it", **fault)}
    assert chaos.check(prog, good) == []
    late_ok = {**good, r: chaos.Outcome("ok", equal=True, step0_equal=True)}
    assert "ok (want CollectiveFaultError)" in chaos.check(prog, late_ok)[0]
    survivor_ok = {**good, other: chaos.Outcome("ok", equal=True, step0_equal=True)}
    assert chaos.check(prog, survivor_ok) == ["no rank noticed the fault of rank %d" % r]
    wrong = {**good, other: chaos.Outcome("ok", equal=False, step0_equal=True)}
    assert "value != eager" in chaos.check(prog, wrong)[0]
    step0 = {**good, other: chaos.Outcome("CollectiveFaultError", f"rank {r} never reached it",
                                          t_error=20.0, step0_equal=False)}
    assert "step before the fault: compiled != eager" in chaos.check(prog, step0)[0]
    blames = {**good, other: chaos.Outcome("CollectiveFaultError",
                                           f"rank {other} never reached it", **fault)}
    assert "not rank %d" % r in chaos.check(prog, blames)[0]
    self_only = {**good, r: chaos.Outcome("CollectiveFaultError",
                                          f"rank {r} gave up on exchange #3", **fault)}
    assert "names no peer that gave up" in chaos.check(prog, self_only)[0]
