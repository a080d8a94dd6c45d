"""Issue 3 matrix: every captured torch.distributed call x 2/4 ranks x modes x dynamic.

Each item compiles one case of ``collective_cases`` (a family of calls in one function) with
``fullgraph=True`` through ``get_npu_backend`` on every rank, checks outputs and mutated inputs
against eager (two input sizes when dynamic: the symbolic graph is reused), exactly one Dynamo
graph (no graph break, no recompile), and the exact collective ops of every rank's AOT graph.
The cross-rank consistency check is on (the default) in every item.

Mode x dynamic combinations (``COMBOS``), each on 2 and 4 ranks:

* ``npugraph_ex``: static and dynamic;
* ``reduce-overhead``: static — it is a deprecated alias served by the same ACL-graph backend,
  so its dynamic column repeats npugraph_ex's; ``TORCHAIR_DIST_FULL_MATRIX=1`` adds it;
* ``max-autotune`` (GE): static; its dynamic column is added by ``TORCHAIR_DIST_FULL_MATRIX=1``
  (GE does not yet lower every symbolic-shape graph here: see the collectives report).
"""
import os

import pytest

from collective_cases import CASES, check_recorded, run_case

COMBOS = [("npugraph_ex", False), ("npugraph_ex", True), ("reduce-overhead", False),
          ("max-autotune", False)]
if os.environ.get("TORCHAIR_DIST_FULL_MATRIX") == "1":
    COMBOS += [("reduce-overhead", True), ("max-autotune", True)]


@pytest.mark.parametrize("mode,dynamic", COMBOS,
                         ids=[f"{m}-{'dynamic' if d else 'static'}" for m, d in COMBOS])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("ws", [2, 4], ids=["ws2", "ws4"])
def test_collective_matrix(request, ws, name, mode, dynamic):
    pool = request.getfixturevalue(f"ranks{ws}")
    per_rank = pool.run(run_case, name, mode, dynamic, timeout=120)
    problems = check_recorded(name, per_rank, ws)
    assert not problems, "\n".join(problems)
