"""Rank side of the chaos programs (``chaos.py``): build a rank's program from its ops, run it
compiled (and eagerly for legal programs), and return its :class:`chaos.Outcome`.

Each op turns the (4, 3) float32 state into the op's input (cycled elements, the op's shape and
dtype), runs the collective, and folds the result back into the state (``% 41``, from ops every
backend lowers), so values stay small integers and compiled == eager is exact.
"""
from __future__ import annotations

import os
import time
from typing import Dict, List

from chaos import FAULT_KINDS, LEGAL_KINDS, SETTLE_S, Op, Outcome, Program

_SUBGROUPS: Dict[int, object] = {}


def _dtype(name):
    import torch

    return getattr(torch, name)


def _subgroup(rank: int, ws: int):
    """The 2-rank subgroup holding ``rank`` ([0, 1] or [2, 3]); created on every rank."""
    import torch.distributed as dist

    if ws < 4:
        return None
    if not _SUBGROUPS:
        for ranks in ([0, 1], [2, 3]):
            _SUBGROUPS[tuple(ranks)] = dist.new_group(ranks)
    return _SUBGROUPS[(0, 1) if rank < 2 else (2, 3)]


def _fit(v, rows: int, cols: int):
    """``v``'s elements, cycled, as a (rows, cols) tensor."""
    flat = v.reshape(-1)
    reps = -(-rows * cols // flat.numel())
    return (flat.repeat(reps) if reps > 1 else flat)[:rows * cols].reshape(rows, cols)


def _apply(op: Op, y, rank: int, ws: int, prog: Program):
    import torch
    import torch.distributed as dist

    sub = op.group == "sub"
    g = _subgroup(prog.rank, ws) if sub else None
    gsize = 2 if sub else ws
    rows = gsize * op.rows if op.kind in ("reduce_scatter", "all_to_all") else op.rows
    t = _fit(y, rows, op.cols).to(_dtype(op.dtype))
    if op.local > 0:
        t = t + op.local
    elif op.local < 0:  # compile_fail: only the divergent rank's ops carry this
        if prog.fail_how == "convert":  # no GE converter: max-autotune cannot lower it
            t = torch.special.bessel_y0(t.float()).to(t.dtype)
        elif t.sum() > 0:  # data-dependent branch: a fullgraph trace fails
            t = t - 1
    if op.kind == "all_reduce":
        dist.all_reduce(t, group=g)
        out = t
    elif op.kind == "all_gather":
        out = t.new_empty((gsize * op.rows, op.cols))
        dist.all_gather_into_tensor(out, t, group=g)
    elif op.kind == "reduce_scatter":
        out = t.new_empty((op.rows, op.cols))
        dist.reduce_scatter_tensor(out, t, group=g)
    elif op.kind == "broadcast":
        dist.broadcast(t, src=op.src, group=g)
        out = t
    elif op.kind == "all_to_all":
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=g)
    elif rank == op.src:  # p2p
        dist.send(t, dst=op.dst)
        out = t + 1
    elif rank == op.dst:
        out = t.new_zeros(op.recv_shape or (op.rows, op.cols))
        dist.recv(out, src=op.src)
    else:
        out = t
    return _mod(_fit(out.float(), *y.shape) + y)


def _mod(v, m: int = 41):
    """``v % m`` for integer-valued floats, from ops every backend lowers (GE has no remainder):
    values stay small, so sums of 4 ranks stay exact even in float16."""
    import torch

    return v - m * torch.floor(v / m)


def _program_fn(prog: Program, rank: int, ws: int, ops: List[Op]):
    def fn(x):
        for op in ops:
            x = _apply(op, x, rank, ws, prog)
        return x
    return fn


def _root_error(exc: BaseException) -> BaseException:
    """Our error inside Dynamo's wrappers when there is one, else the outermost error."""
    from torchair_dist.errors import TorchairDistError

    seen, err = set(), exc
    while err is not None and id(err) not in seen:
        if isinstance(err, TorchairDistError):
            return err
        seen.add(id(err))
        err = err.__cause__ or getattr(err, "inner_exception", None) or err.__context__
    return exc


def _input(rank: int):
    import torch

    return _mod(torch.arange(12, dtype=torch.float32).reshape(4, 3) * (rank + 2))


def run_program(rank: int, ws: int, prog: Program, fault_file: str = "",
                pg_timeout_s: float = 0.0) -> Outcome:
    """Run ``prog`` on this rank (a pool worker) and return its :class:`Outcome`."""
    import torch
    import torch.distributed as dist

    from collective_cases import compile_for
    from torchair_dist.collectives import consistency

    _subgroup(rank, ws)  # every rank creates the subgroups, in the same order
    dist.barrier()
    torch._dynamo.reset()
    consistency.reset_check_sequence(epoch=1000 + prog.uid)
    ops = prog.ops_for(rank)
    fault = prog.divergence in FAULT_KINDS
    # fault programs: every rank runs the program eagerly first (the process group still
    # whole), so the step before the fault is checked against it on every rank
    want0 = _program_fn(prog, rank, ws, ops)(_input(rank)) if fault else None
    parts = [ops[:prog.split], ops[prog.split:]] if fault else [ops]
    compiled = [compile_for(_program_fn(prog, rank, ws, p), prog.mode, False, [], [])
                for p in parts]
    outcome = Outcome("ok", t_start=time.time())
    try:
        for step in range(2 if fault else 1):
            y = _input(rank)
            for i, fn in enumerate(compiled):
                if step == 1 and i == 1 and rank == prog.rank:
                    outcome.t_fault = time.time()
                    outcome.t_resume = _fault(prog, fault_file, pg_timeout_s)
                y = fn(y)
            if fault and step == 0:
                outcome.step0_equal = bool(torch.equal(y, want0))
        got = y
    except Exception as exc:  # noqa: BLE001 - classified
        if prog.divergence in LEGAL_KINDS:  # unexpected: free the peers waiting to compare
            dist.all_reduce(torch.zeros(1), op=dist.ReduceOp.MIN)
        err = _root_error(exc)
        outcome.cls, outcome.message = type(err).__name__, f"{err}"[:1500]
        outcome.t_error = time.time()
        return outcome
    finally:
        if fault and rank != prog.rank:
            _step_over(prog)
    if fault:  # a survivor that finished the faulty step: the value of an unfaulted step
        outcome.equal = bool(torch.equal(got, want0))
        return outcome
    if prog.divergence in LEGAL_KINDS:
        flag = torch.ones(1)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # run eager only where every rank ran
        if flag.item() == 0:
            return outcome
        torch._dynamo.reset()
        want = _program_fn(prog, rank, ws, ops)(_input(rank))
        outcome.equal = bool(torch.equal(got, want))
    return outcome


def _done_key(prog: Program, rank: int) -> str:
    return f"torchair_dist_chaos/{prog.uid}/step_over/{rank}"


def _step_over(prog: Program) -> None:
    """A survivor of a fault program is done with the step of the fault (failed or not)."""
    import torch.distributed as dist

    try:
        dist.distributed_c10d._get_default_store().set(
            _done_key(prog, dist.get_rank()), "1")
    except Exception:  # noqa: BLE001 - the stopped rank then only sleeps
        pass


def _fault(prog: Program, fault_file: str, pg_timeout_s: float) -> float:
    """Die, or stop: sleep past the process-group timeout and until every peer is done with
    the step (a peer slowed by a loaded host may reach its wait late: the stop must outlast
    the wait, or it is no fault); return when the stop ended."""
    import datetime

    import torch.distributed as dist

    with open(fault_file, "w") as f:
        f.write(repr(time.time()))
    if prog.divergence == "die":
        os._exit(17)
    time.sleep(pg_timeout_s + SETTLE_S)
    others = [_done_key(prog, r) for r in range(prog.ws) if r != prog.rank]
    try:
        dist.distributed_c10d._get_default_store().wait(
            others, datetime.timedelta(seconds=3 * pg_timeout_s + 30))
    except Exception:  # noqa: BLE001 - a peer that never finishes: the parent reports it
        pass
    return time.time()  # the stop ends: this rank's own error is bounded from here


def run_programs(rank: int, ws: int, progs: List[Program]) -> List[Outcome]:
    """A batch of compile-time / legal programs on one rank (one pool round trip)."""
    return [run_program(rank, ws, p) for p in progs]


