"""``experimental_config.inductor_kernels``: inductor generates the compute kernels of the
post-pass graph while the collectives stay ours, on 2 ranks.

Workload: an MoE-style block (``all_to_all_single`` dispatch, routed expert, combine) beside a
tensor-parallel shared expert (``all_reduce``), compiled with ``fullgraph=True`` in
``npugraph_ex`` with overlap on and the emulated CPU capture (so the ACL runner replays the
inductor forward). Tolerance: compiled vs eager ``ATOL = 1e-5`` (inductor's fused C++ kernels
round differently from aten's; 0 to ~1e-6 observed).
"""

ATOL = 1e-5


def _moe_tp_case(rank, world, inductor_kernels, shm=False):
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import torchair_dist
    from torch._inductor import metrics
    from torchair_dist.pipeline.route import record_graphs
    from torchair_dist.passes.graph_info import op_targets

    os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = "emulate"
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(rank)
    d, f, t = 32, 48, 8
    ws1, ws2 = torch.randn(f, d, generator=g) / d, torch.randn(d, f, generator=g) / f
    we1, we2 = torch.randn(f, d, generator=g) / d, torch.randn(d, f, generator=g) / f

    def block(x):
        dispatched = torch.empty_like(x)
        dist.all_to_all_single(dispatched, x)
        shared = F.linear(F.gelu(F.linear(x, ws1)), ws2)
        dist.all_reduce(shared)
        routed = F.linear(torch.relu(F.linear(dispatched, we1)), we2)
        combined = torch.empty_like(routed)
        dist.all_to_all_single(combined, routed)
        return torch.softmax(combined + shared, -1) * 2

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.experimental_config.inductor_kernels = inductor_kernels
    cfg.distributed_config.cpu_shm_collectives = shm
    from torchair_dist.collectives import groups
    from torchair_dist.cpu import shm as transport

    before = transport.exchanges(groups.stable_name_of(None)) or 0
    compiled = torch.compile(block, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                             fullgraph=True)
    metrics.reset()
    diffs = []
    with record_graphs() as graphs, torch.no_grad():
        for _ in range(3):
            x = torch.randn(t * world, d, generator=g)
            diffs.append((compiled(x) - block(x)).abs().max().item())
    return {"diffs": diffs, "graphs": [op_targets(ctx.gm) for ctx in graphs],
            "kernels": metrics.generated_kernel_count,
            "exchanges": (transport.exchanges(groups.stable_name_of(None)) or 0) - before}


def test_inductor_kernels_two_ranks_equal_eager_and_keep_our_collectives(ranks2):
    results = ranks2.run(_moe_tp_case, True, timeout=300)
    for rank, r in enumerate(results):
        assert max(r["diffs"]) <= ATOL, f"rank {rank}: {r['diffs']}"
        assert len(r["graphs"]) == 1, f"rank {rank} compiled {len(r['graphs'])} graphs"
        ops = r["graphs"][0]
        assert ops.count("torchair_dist.all_to_all_v.default") == 2, ops
        assert "_c10d_functional.all_reduce_.default" in ops, ops
        assert ops.count("_c10d_functional.wait_tensor.default") == 3, ops
        assert r["kernels"] > 0, f"rank {rank}: inductor generated no kernel"


def test_inductor_kernels_off_generates_no_kernel(ranks2):
    results = ranks2.run(_moe_tp_case, False, timeout=300)
    for rank, r in enumerate(results):
        assert r["diffs"] == [0.0] * 3, f"rank {rank}: {r['diffs']}"
        assert r["kernels"] == 0, f"rank {rank}: {r['kernels']} kernels without the option"


def test_inductor_kernels_with_shared_memory_collectives(ranks2):
    """Both options: inductor compiles the runner's copy of the graph, whose all_reduce is the
    functional shared-memory op (inductor cannot call one that returns its mutated input)."""
    results = ranks2.run(_moe_tp_case, True, True, timeout=300)
    for rank, r in enumerate(results):
        assert max(r["diffs"]) <= ATOL, f"rank {rank}: {r['diffs']}"
        assert r["kernels"] > 0, f"rank {rank}: inductor generated no kernel"
        assert r["exchanges"] == 9, f"rank {rank}: {r['exchanges']} exchanges (3 calls x 3)"
