"""Chaos suite (issue 10, item 7): seeded rank-divergent programs on 2 and 4 gloo ranks, in every
mode; every rank must end with the right outcome class within its bound, never hang, never
return a wrong result (see ``chaos.py`` for the generator, the kinds and their outcomes).

* compile-time kinds (extra / missing / reordered collective, another shape / dtype / group /
  src on one rank, a compile failure on one rank) and legal divergences: batched into the
  module's rank pools; every rank's error within ``chaos.COMPILE_BOUND_S`` of the first one;
* runtime faults (a rank dies, or stops past the process-group timeout, between the two graphs
  of a step): a fresh pool with a short process-group timeout each; every survivor's error
  within that timeout of the fault.

``TORCHAIR_DIST_CHAOS=<n>`` runs ``n`` compile-time programs (and ``n // 25`` faults) instead of
the normal suite's; ``benchmarks/chaos_sweep.py`` prints the counts and worst times per class.
"""
import os

import pytest

import chaos
import chaos_rank

PG_TIMEOUT_S = 10  # the fault pools' process-group timeout
SLACK_S = float(os.environ.get("TORCHAIR_DIST_CHAOS_SLACK", "3"))  # a loaded 2-core host
_N = int(os.environ.get("TORCHAIR_DIST_CHAOS", "0"))
_PROGRAMS = chaos.suite(_N or 54, seed=10)
_FAULTS = (chaos.suite(_N // 25, seed=11, kinds=chaos.FAULT_KINDS) if _N else
           chaos.suite(1, seed=11, world_sizes=(4,), modes=("npugraph_ex",), kinds=("die",))
           + chaos.suite(1, seed=12, world_sizes=(2,), modes=("reduce-overhead",),
                         kinds=("stop",)))
for _i, _p in enumerate(_FAULTS):
    _p.uid = 100000 + _i


def _ids(progs):
    return [f"ws{p.ws}-{p.mode}-{p.divergence}-s{p.seed % 10000}" for p in progs]


def _report(prog, outcomes, problems):
    times = chaos.time_to_error(prog, outcomes)
    print(f"\n{prog.describe()}: " + ", ".join(
        f"rank {r}: {o.cls}" + (f" +{times[r]:.2f}s" if r in times else "")
        for r, o in sorted(outcomes.items())))
    assert not problems, prog.describe() + "\n" + "\n".join(problems)


@pytest.mark.parametrize("prog", _PROGRAMS, ids=_ids(_PROGRAMS))
def test_chaos_program(request, prog):
    pool = request.getfixturevalue(f"ranks{prog.ws}")
    results = pool.run(chaos_rank.run_program, prog, timeout=120)
    outcomes = dict(enumerate(results))
    _report(prog, outcomes, chaos.check(prog, outcomes, slack_s=SLACK_S))


@pytest.mark.parametrize("prog", _FAULTS, ids=_ids(_FAULTS))
def test_chaos_runtime_fault(rank_pool, tmp_path, prog):
    pool = rank_pool(prog.ws, pg_timeout_s=PG_TIMEOUT_S)
    outcomes = chaos.run_fault(pool, prog, str(tmp_path / "fault"), PG_TIMEOUT_S)
    _report(prog, outcomes, chaos.check(prog, outcomes, pg_timeout_s=PG_TIMEOUT_S,
                                        slack_s=SLACK_S))
