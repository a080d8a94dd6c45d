"""Events the ``stream_order`` stage adds, per stream program (issue 39).

  python benchmarks/stream_events.py

Compiles every program of ``tests/stream_programs.py`` in npugraph_ex (static shapes), runs it
twice, and prints the ``stream_events_added`` the capture report gives for its graphs. On a
device each event is a record and a wait launched inside the captured graph (and events are a
scarce resource on NPUs). The "before" column is the count the stage added before it read the
one order model (commit 8c4c6d3: one event per (producer, reading stream), whatever the program
ordered itself), measured with the same programs.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import torch

import torchair_dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEFORE = {"side_reads_main": 2, "side_matmul": 2, "side_output": 2, "two_side_streams": 3,
          "moe_shared_expert": 1, "nested_scopes": 4, "tagged_event_two_graphs": 2,
          "user_streams_ordered": 2, "user_streams_racy": 3}


def _programs():
    spec = importlib.util.spec_from_file_location(
        "torchair_dist_stream_programs", os.path.join(ROOT, "tests", "stream_programs.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.PROGRAMS


def events_added(program) -> int:
    torch._dynamo.reset()
    torchair_dist.reset_capture_report()
    parts = [torch.compile(f, backend="npugraph_ex", fullgraph=True, dynamic=False)
             for f in program.build("cpu")]
    for call in range(2):
        program.call(parts, *program.inputs(16, "cpu", call))
    return sum(next(iter(keys.values())).get("stream_events_added", 0)
               for keys in torchair_dist.capture_report().values())


def main() -> None:
    rows = [(name, BEFORE.get(name), events_added(p)) for name, p in _programs().items()]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'program':{width}}  before  now")
    for name, before, now in rows:
        print(f"{name:{width}}  {before if before is not None else '-':>6}  {now:>3}")
    known = [(b, n) for _, b, n in rows if b is not None]
    print(f"{'total':{width}}  {sum(b for b, _ in known):>6}  {sum(n for _, n in known):>3}")


if __name__ == "__main__":
    main()
