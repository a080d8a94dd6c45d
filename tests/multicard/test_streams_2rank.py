"""Issue 29 on 2 ranks (and 4 in npugraph_ex): a collective on a side stream
(``tests/stream_programs.py`` COLLECTIVE_PROGRAMS) in npugraph_ex, reduce-overhead and
max-autotune, sizes 16 and 1024: on every rank call 0 and replays 1, 2 (new inputs each) equal the
program-order result, and every cross-stream read of the compiled graph is ordered after its
producer (an event, or what the program orders itself)."""
import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import pytest

PROGRAM_NAMES = ["collective_on_side", "moe_shared_expert_all_reduce"]


def _programs():
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import stream_programs

    return stream_programs


def _run(rank, world_size, name, mode):
    import torch

    import torchair_dist
    from torchair_dist.pipeline.route import record_graphs

    sp = _programs()
    program = sp.COLLECTIVE_PROGRAMS[name]
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    torch._dynamo.reset()
    try:
        with record_graphs() as graphs:
            parts = [torch.compile(f, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                                   fullgraph=True, dynamic=False)
                     for f in program.build("cpu")]
            worst = 0.0
            for size in sp.SIZES:
                for call in range(3):  # call 0, replays 1 and 2
                    args = program.inputs(size, "cpu", 1000 * rank + 10 * size + call)
                    got = program.call(parts, *args)
                    want = program.reference("cpu", *args)
                    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                    worst = max(worst, float((got - want).abs().max()))
        pairs = set()
        for ctx in graphs:
            for _, _, s, t in sp.assert_every_cross_read_is_ordered(ctx.gm):
                pairs.add((s, t))
    finally:
        torch._dynamo.reset()
    return sorted(pairs), worst


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_collective_on_a_side_stream_equals_program_order_on_every_rank(ranks2, name, mode):
    expected = set(_programs().COLLECTIVE_PROGRAMS[name].cross)
    for pairs, worst in ranks2.run(_run, name, mode):
        assert expected <= set(pairs), pairs
        assert worst <= 1e-5


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_collective_on_a_side_stream_on_4_ranks(ranks4, name):
    expected = set(_programs().COLLECTIVE_PROGRAMS[name].cross)
    for pairs, worst in ranks4.run(_run, name, "npugraph_ex"):
        assert expected <= set(pairs), pairs
        assert worst <= 1e-5
