"""Collectives under the recording stand-in: the capture records torch's _c10d_functional ops and
the torchair_dist:: ops, and every replay re-issues them in the captured order."""


def _record_case(rank, world):
    import os

    import torch
    import torch.distributed as dist

    import torchair_dist
    from torchair_dist.cpu import record

    os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = "record"
    graphs = []
    orig = record.RecordGraph.capture

    def spy(self, fn, inputs, feed):
        graphs.append(self)
        return orig(self, fn, inputs, feed)

    record.RecordGraph.capture = spy
    try:
        torch._dynamo.reset()
        peer = 1 - rank

        def step(x):
            y = x * (rank + 1)
            dist.all_reduce(y)                       # _c10d_functional.all_reduce + wait
            got = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, y.contiguous(), peer),
                   dist.P2POp(dist.irecv, got, peer)]
            for work in dist.batch_isend_irecv(ops):  # torchair_dist::send / recv
                work.wait()
            dist.barrier()                           # torchair_dist::barrier
            return y + got

        cfg = torchair_dist.CompilerConfig()
        cfg.mode = "npugraph_ex"
        # torch's own c10d ops are what this test records (the shared-memory transport would
        # replace the all_reduce with its own op; test_shm_collectives covers that)
        cfg.distributed_config.cpu_shm_collectives = False
        f = torch.compile(step, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                          fullgraph=True)
        ok = []
        for i in range(3):  # capture, then two replays with new data
            x = torch.full((4,), float(i + 1))
            total = x * sum(r + 1 for r in range(world))
            ok.append(torch.equal(f(x), total * 2))
        names = [f"{op.namespace}.{op._schema.name.split('::')[-1]}" for op in graphs[0].ops]
        comm = [n for n in names if n.split(".")[0] in ("_c10d_functional", "torchair_dist")]
        return {"ok": ok, "comm": comm, "graphs": len(graphs),
                "report": torchair_dist.capture_report()}
    finally:
        record.RecordGraph.capture = orig
        os.environ.pop("TORCHAIR_DIST_CPU_CAPTURE", None)


def test_collectives_are_recorded_and_reissued_in_order(ranks2):
    results = ranks2.run(_record_case)
    for rank, r in enumerate(results):
        assert all(r["ok"]), f"rank {rank}: {r['ok']}"
        assert r["graphs"] == 1, f"rank {rank}: {r['graphs']} captures"
        # the re-inplace pass may turn all_reduce into all_reduce_ (same collective)
        comm = [n.rstrip("_") for n in r["comm"]]
        for op in ("_c10d_functional.all_reduce", "torchair_dist.send", "torchair_dist.recv",
                   "torchair_dist.barrier"):
            assert op in comm, f"rank {rank}: {op} not recorded: {comm}"
        assert comm.index("_c10d_functional.all_reduce") < comm.index("torchair_dist.send") \
            < comm.index("torchair_dist.barrier"), f"rank {rank}: order {comm}"
        (keys,) = r["report"].values()
        (counts,) = keys.values()
        assert counts["replays"] == 2, f"rank {rank}: {counts}"
