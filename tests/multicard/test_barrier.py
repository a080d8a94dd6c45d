"""dist.barrier inside a compiled region: one graph, really blocks, in every mode."""
import pytest

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]


def _barrier_case(rank, world, mode, marker_dir):
    import os
    import time
    import warnings

    import torch
    import torch.distributed as dist

    import torchair_dist
    from torchair_dist.pipeline.route import record_graphs
    from torchair_dist.passes.graph_info import op_targets

    torch._dynamo.reset()
    marker = os.path.join(marker_dir, f"{mode}-rank1-arrived")

    def step(x):
        y = x * 2
        dist.barrier()
        return y + 1

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        backend = torchair_dist.get_npu_backend(compiler_config=cfg)
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    x = torch.arange(4.0)
    with record_graphs() as graphs:
        compiled(x)  # compile + first run (both ranks meet at the barrier)
    if rank == 1:
        time.sleep(1.0)
        open(marker, "w").close()  # written before rank 1 reaches the barrier
    out = compiled(x)
    arrived = os.path.exists(marker)  # rank 0 may only pass once rank 1 wrote the marker
    return {"equal": torch.equal(out, step(x)), "arrived": arrived,
            "graphs": [op_targets(ctx.gm) for ctx in graphs]}


@pytest.mark.parametrize("mode", MODES)
def test_barrier_is_captured_and_blocks(ranks2, mode, tmp_path):
    results = ranks2.run(_barrier_case, mode, str(tmp_path))
    for rank, r in enumerate(results):
        assert r["equal"], f"rank {rank}"
        assert len(r["graphs"]) == 1, f"rank {rank}: {len(r['graphs'])} graphs"
        assert r["graphs"][0].count("torchair_dist.barrier.default") == 1
    assert results[0]["arrived"], "rank 0 left the barrier before rank 1 reached it"
