"""Chaos programs: seeded, rank-divergent collective programs and the outcome each must have.

:func:`generate` builds a :class:`Program` from a seed: a short sequence of collectives drawn
from a small vocabulary (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast,
all_to_all_single, a send/recv pair) with seeded sizes and dtype, and one *divergence* — what one
rank (``Program.rank``) does differently:

=============  ===========================================================  ================
divergence     what the divergent rank does                                  expected outcome
=============  ===========================================================  ================
none           nothing                                                       ok, == eager
local          extra local (non-collective) compute                          ok, == eager
recv_shape     receives the p2p message into another shape, same bytes       ok, == eager
extra          one collective more                                           mismatch
missing        one collective less                                           mismatch
reorder        two (different) collectives swapped                           mismatch
shape          one collective on another shape                               mismatch
dtype          one collective in another dtype                               mismatch
group          one collective on a subgroup instead of the world             mismatch
src            a broadcast from another root                                 mismatch
compile_fail   an op its backend cannot lower (or a fullgraph trace break)   own error there,
                                                                             PeerFailedError
                                                                             on the others
die            ``os._exit`` between the two graphs of step 2                 died there,
                                                                             CollectiveFaultError
                                                                             on the others
stop           sleeps past the process-group timeout between the graphs      CollectiveFaultError
                                                                             on every rank
=============  ===========================================================  ================

Fault programs: the faulty rank must fail (a stopped rank once it wakes: its peers gave up on
the step, issue 33); a survivor may instead finish the step only with the right value (its
last collectives did not need the faulty rank: gloo's broadcast from a live root), and at least
one survivor must fail; every rank's step before the fault must equal eager. A survivor's
"rank N never reached it" must name the faulty rank, and the stopped rank's "gave up" a peer.

:func:`chaos_rank.run_program` runs one on a rank (a :class:`harness.RankPool` worker): a
barrier, ``torch._dynamo.reset()`` and a fresh consistency epoch, the compiled program (and, for
legal programs, the eager one), and an :class:`Outcome` with the error class, its message and
the wall time it was raised. :func:`check` compares the outcomes of every rank with
:func:`expected` and the time bounds. Values stay small integers (``% 41`` after each op), so
compiled == eager is exact.
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
from typing import Dict, List, Optional, Tuple

MODES = ("max-autotune", "npugraph_ex", "reduce-overhead")
VOCAB = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p")
MISMATCH_KINDS = ("extra", "missing", "reorder", "shape", "dtype", "group", "src")
LEGAL_KINDS = ("none", "local", "recv_shape")
COMPILE_KINDS = MISMATCH_KINDS + ("compile_fail",)
FAULT_KINDS = ("die", "stop")
DTYPES = ("float32", "int32", "float16")
OTHER_DTYPE = {"float32": "int32", "int32": "float16", "float16": "float32"}
COMPILE_BOUND_S = 5.0  # compile-time divergence: every rank's error within this of the first
SETTLE_S = 1.0  # a stopped rank sleeps the pg timeout plus this


@dataclasses.dataclass
class Op:
    kind: str
    rows: int
    cols: int
    dtype: str
    src: int = 0  # broadcast root / p2p sender
    dst: int = 1  # p2p receiver
    group: str = "world"  # "world" or "sub" (a subgroup holding the divergent rank)
    recv_shape: Optional[Tuple[int, ...]] = None  # receiver's buffer shape (same numel)
    local: int = 0  # extra local compute (+local) before the collective


@dataclasses.dataclass
class Program:
    uid: int
    seed: int
    ws: int
    mode: str
    ops: List[Op]
    divergence: str
    rank: int  # the divergent rank
    at: int = 0  # which op diverges
    split: int = 0  # graph A = ops[:split], graph B = ops[split:] (fault programs only)
    diverged: Optional[List[Op]] = None  # the divergent rank's ops (compile-time kinds)
    fail_how: str = ""  # compile_fail: "convert" (max-autotune only) or "trace"

    def ops_for(self, rank: int) -> List[Op]:
        return self.diverged if (rank == self.rank and self.diverged is not None) else self.ops

    def describe(self) -> str:
        ops = ",".join(o.kind + (f"@{o.group}" if o.group != "world" else "") for o in self.ops)
        return (f"#{self.uid} seed={self.seed} ws={self.ws} {self.mode} {self.divergence}"
                f"{'' if self.divergence == 'none' else f'@rank{self.rank}/op{self.at}'} "
                f"[{ops}]{' ' + self.fail_how if self.fail_how else ''}")


# ---------------------------------------------------------------------------------- generator
def _op(rng: random.Random, ws: int, kind: str, dtype: str) -> Op:
    op = Op(kind, rng.choice((1, 2, 3)), rng.choice((2, 3, 4)), dtype)
    if kind == "broadcast":
        op.src = rng.randrange(ws)
    if kind == "p2p":
        op.src = rng.randrange(ws)
        op.dst = rng.choice([r for r in range(ws) if r != op.src])
    return op


def generate(seed: int, ws: int, mode: str, divergence: str, uid: int = 0) -> Program:
    """The program of ``seed`` with the given divergence (see the module docstring)."""
    rng = random.Random(f"{seed}/{ws}/{mode}/{divergence}")
    dtype = rng.choice(DTYPES)
    n_ops = rng.randint(2, 4)
    kinds = [rng.choice(VOCAB) for _ in range(n_ops)]
    if divergence == "src" and "broadcast" not in kinds:
        kinds[rng.randrange(n_ops)] = "broadcast"
    if divergence == "recv_shape" and "p2p" not in kinds:
        kinds[rng.randrange(n_ops)] = "p2p"
    if divergence == "reorder" and len(set(kinds)) < 2:
        kinds[0], kinds[-1] = "all_reduce", "all_gather"
    if divergence in FAULT_KINDS:  # every rank takes part in the graphs around the fault
        kinds = [k if k != "p2p" else "all_reduce" for k in kinds]
    if all(k == "p2p" for k in kinds):  # every rank shares at least one world collective
        kinds[rng.randrange(n_ops)] = rng.choice(VOCAB[:-1])
    ops = [_op(rng, ws, k, dtype) for k in kinds]
    prog = Program(uid, seed, ws, mode, ops, divergence, rank=rng.randrange(ws))
    prog.split = rng.randint(1, n_ops - 1)
    if divergence == "none":
        return prog
    _diverge(prog, rng)
    return prog


def _candidates(prog: Program, ok) -> List[int]:
    found = [i for i, op in enumerate(prog.ops) if ok(op)]
    return found


def _diverge(prog: Program, rng: random.Random) -> None:
    ops, ws, k = prog.ops, prog.ws, prog.divergence
    mine = [dataclasses.replace(o) for o in ops]
    involved = lambda o: o.kind != "p2p" or prog.rank in (o.src, o.dst)  # noqa: E731
    if k == "local":
        prog.at = rng.randrange(len(ops))
        mine[prog.at].local = rng.randint(1, 5)
    elif k == "recv_shape":
        prog.at = rng.choice(_candidates(prog, lambda o: o.kind == "p2p"))
        prog.rank = ops[prog.at].dst
        o = mine[prog.at]
        o.recv_shape = (o.cols, o.rows) if o.rows != o.cols else (o.rows * o.cols,)
    elif k == "extra":
        prog.at = rng.randrange(len(ops) + 1)
        mine.insert(prog.at, _op(rng, ws, rng.choice(VOCAB[:-1]), ops[0].dtype))
    elif k == "missing":
        # keep at least one collective this rank shares with a peer, so it reaches the check
        cands = [i for i in range(len(ops)) if involved(ops[i])]
        if len([i for i in cands]) < 2:
            mine.append(_op(rng, ws, "all_reduce", ops[0].dtype))
            prog.ops = ops = ops + [dataclasses.replace(mine[-1])]
            cands = [i for i in range(len(ops)) if involved(ops[i])]
        prog.at = rng.choice(cands)
        del mine[prog.at]
    elif k == "reorder":
        # two collectives of the world group: each scope's sequence changes (a p2p moved
        # across a world collective would keep every scope's sequence; not generated)
        pairs = [(i, j) for i in range(len(ops)) for j in range(i + 1, len(ops))
                 if ops[i].kind != ops[j].kind and "p2p" not in (ops[i].kind, ops[j].kind)]
        if not pairs:  # put two different world collectives in front
            prog.ops = ops = [_op(rng, ws, "all_reduce", ops[0].dtype),
                              _op(rng, ws, "all_gather", ops[0].dtype)] + ops
            mine = [dataclasses.replace(o) for o in ops]
            pairs = [(0, 1)]
        i, j = rng.choice(pairs)
        mine[i], mine[j] = mine[j], mine[i]
        prog.at = i
    elif k in ("shape", "dtype"):
        prog.at = rng.choice([i for i in range(len(ops)) if involved(ops[i])])
        o = mine[prog.at]
        if k == "dtype":
            o.dtype = OTHER_DTYPE[o.dtype]
        elif o.kind == "all_to_all":
            o.cols += 1  # all_to_all's first dim may differ between ranks; the others not
        else:
            o.rows += 1
    elif k == "group":
        prog.at = rng.choice([i for i in range(len(ops)) if ops[i].kind != "p2p"])
        mine[prog.at].group = "sub"
        if mine[prog.at].kind == "broadcast":
            mine[prog.at].src = prog.rank
    elif k == "src":
        prog.at = rng.choice(_candidates(prog, lambda o: o.kind == "broadcast"))
        mine[prog.at].src = (ops[prog.at].src + rng.randint(1, ws - 1)) % ws
    elif k == "compile_fail":
        prog.at = rng.randrange(len(ops))
        mine[prog.at].local = -1  # marks the failing point
        prog.fail_how = rng.choice(("convert", "trace")) if prog.mode == "max-autotune" \
            else "trace"
    elif k in FAULT_KINDS:
        prog.diverged = None
        return
    prog.diverged = mine


def suite(n: int, seed: int = 0, world_sizes=(2, 4), modes=MODES,
          kinds=LEGAL_KINDS + COMPILE_KINDS) -> List[Program]:
    """``n`` programs cycling through world sizes, modes and divergence kinds (seeded)."""
    rng = random.Random(seed)
    combos = [(ws, m, k) for ws in world_sizes for m in modes for k in kinds
              if not (k == "group" and ws < 4)]  # a subgroup of 2 ranks needs 4
    rng.shuffle(combos)
    progs = []
    for i in range(n):
        ws, mode, kind = combos[i % len(combos)]
        progs.append(generate(rng.randrange(1 << 30), ws, mode, kind, uid=i))
    return progs


# --------------------------------------------------------------------------- expected outcome
def expected(prog: Program) -> Dict[int, str]:
    """Each rank's outcome class: ``ok``, an error class name, ``own`` (the rank's own compile
    error, whatever its class) or ``died``."""
    k, ws = prog.divergence, prog.ws
    if k in LEGAL_KINDS:
        return {r: "ok" for r in range(ws)}
    if k in MISMATCH_KINDS:
        return {r: "CollectiveMismatchError" for r in range(ws)}
    if k == "compile_fail":
        return {r: "own" if r == prog.rank else "PeerFailedError" for r in range(ws)}
    if k == "die":
        return {r: "died" if r == prog.rank else "CollectiveFaultError" for r in range(ws)}
    return {r: "CollectiveFaultError" for r in range(ws)}  # stop


# ------------------------------------------------------------------------------ outcome
@dataclasses.dataclass
class Outcome:
    cls: str  # "ok", an exception class name, or "died" (set by the parent)
    message: str = ""
    t_error: float = 0.0  # time.time() when the error reached this rank's program
    t_start: float = 0.0  # time.time() when the program's first compiled call began
    equal: Optional[bool] = None  # legal programs: compiled == eager on this rank
    t_fault: float = 0.0  # fault programs, the faulty rank: when it died / began its stop
    t_resume: float = 0.0  # ... and when its stop ended
    step0_equal: Optional[bool] = None  # fault programs: the step before the fault == eager


# ------------------------------------------------------------------------------ parent side


def classify(prog: Program, outcomes: Dict[int, Outcome]) -> Dict[int, str]:
    """Each rank's outcome class in the vocabulary of :func:`expected`."""
    got = {}
    for r, o in outcomes.items():
        cls = o.cls
        if prog.divergence == "compile_fail" and r == prog.rank and cls not in (
                "ok", "PeerFailedError", "CollectiveMismatchError", "CollectiveFaultError"):
            cls = "own"
        got[r] = cls
    return got


def time_to_error(prog: Program, outcomes: Dict[int, Outcome]) -> Dict[int, float]:
    """Seconds from the event a rank's error answers to that error, per failed rank: the first
    error of any rank (compile-time kinds); the fault (die: the death; stop: the start of the
    stop for the others, its end for the stopped rank)."""
    errs = {r: o for r, o in outcomes.items() if o.t_error}
    if not errs:
        return {}
    if prog.divergence in FAULT_KINDS:
        fault = outcomes.get(prog.rank)
        t0 = fault.t_fault if fault and fault.t_fault else min(o.t_error for o in errs.values())
        return {r: o.t_error - (o.t_resume if r == prog.rank and o.t_resume else t0)
                for r, o in errs.items()}
    first = min(o.t_error for o in errs.values())
    return {r: o.t_error - first for r, o in errs.items()}


def bound(prog: Program, pg_timeout_s: float) -> float:
    return pg_timeout_s if prog.divergence in FAULT_KINDS else COMPILE_BOUND_S


def check(prog: Program, outcomes: Dict[int, Outcome], pg_timeout_s: float = 0.0,
          slack_s: float = 0.0) -> List[str]:
    """Problems with ``outcomes`` (every rank's): wrong class, the failing rank not named,
    a legal program unequal to eager, an error later than its bound (+ ``slack_s``)."""
    want, got = expected(prog), classify(prog, outcomes)
    problems = []
    for r in range(prog.ws):
        o = outcomes.get(r)
        if o is None:
            problems.append(f"rank {r}: no outcome")
            continue
        if prog.divergence in FAULT_KINDS and r != prog.rank and got[r] == "ok":
            # a survivor whose last collectives did not need the faulty rank (gloo's broadcast
            # from a live root) may finish the step, with the right value only
            if o.equal is not True:
                problems.append(f"rank {r}: finished the step of the fault with a value "
                                f"{'!= eager' if o.equal is False else 'not compared'}")
        elif got[r] != want[r]:
            problems.append(f"rank {r}: {got[r]} (want {want[r]}): {o.message[:600]}")
        elif want[r] == "ok" and o.equal is not True:
            problems.append(f"rank {r}: compiled != eager")
        elif want[r] == "PeerFailedError" and f"rank {prog.rank} failed" not in o.message:
            problems.append(f"rank {r}: PeerFailedError does not name rank {prog.rank}: "
                            f"{o.message[:600]}")
        if prog.divergence in FAULT_KINDS and got[r] != "died" and o.step0_equal is not True:
            problems.append(f"rank {r}: the step before the fault: compiled "
                            f"{'!= eager' if o.step0_equal is False else 'did not finish'}")
        if prog.divergence in FAULT_KINDS and got[r] == "CollectiveFaultError":
            problems += _names_the_right_rank(prog, r, o.message)
    if prog.divergence in FAULT_KINDS and all(
            got.get(r) == "ok" for r in range(prog.ws) if r != prog.rank):
        problems.append(f"no rank noticed the fault of rank {prog.rank}")
    limit = bound(prog, pg_timeout_s) + slack_s
    for r, seconds in time_to_error(prog, outcomes).items():
        if seconds > limit:
            problems.append(f"rank {r}: error {seconds:.1f}s after its cause (bound {limit:g}s)")
    return problems


def _names_the_right_rank(prog: Program, r: int, message: str) -> List[str]:
    """The shared-memory transport's fault messages name the rank at fault: a survivor's
    "rank N never reached it" names the stopped or dead rank; the stopped rank's "rank N gave
    up on exchange" names a peer (a late arrival, issue 33)."""
    if r != prog.rank:
        blamed = re.findall(r"rank (\d+) never reached it", message)
        if blamed and str(prog.rank) not in blamed:
            return [f"rank {r}: blames rank(s) {blamed}, not rank {prog.rank}: {message[:600]}"]
        return []
    if "gave up on exchange" in message:
        gave_up = [int(q) for q in re.findall(r"rank (\d+) gave up", message)]
        if not [q for q in gave_up if q != r]:
            return [f"rank {r} (stopped): names no peer that gave up: {message[:600]}"]
    return []


def died_outcomes(prog: Program, failure) -> Dict[int, Outcome]:
    """Outcomes from a :class:`harness.RankFailure` of a run in which a rank died."""
    outs = dict(failure.results)
    for r, status in failure.per_rank.items():
        if status.startswith("died"):
            outs[r] = Outcome("died", status)
        elif r not in outs:
            outs[r] = Outcome(status, failure.errors.get(r, "")[-1500:])
    return outs


def run_fault(pool, prog: Program, fault_file: str, pg_timeout_s: float) -> Dict[int, Outcome]:
    """Run a fault program on ``pool`` (its process group timeout ``pg_timeout_s``); the pool
    is shut down afterwards (its process group is broken). Every rank's outcome."""
    from harness import RankFailure

    from chaos_rank import run_program

    try:
        results = pool.run(run_program, prog, fault_file, pg_timeout_s,
                           timeout=4 * pg_timeout_s + 60, failure_grace=3 * pg_timeout_s)
        outcomes = dict(enumerate(results))
    except RankFailure as failure:
        outcomes = died_outcomes(prog, failure)
    finally:
        pool.shutdown(kill=True)
    dead = outcomes.get(prog.rank)
    if dead is not None and dead.cls == "died" and os.path.exists(fault_file):
        with open(fault_file) as f:
            dead.t_fault = float(f.read())
    return outcomes
