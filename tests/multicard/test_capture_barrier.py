"""dist.barrier inside a captured graph, under the recording CPU stand-in (device-graph rules).

A host-side ``dist.barrier`` cannot be captured (it synchronizes the host); the barrier must be
an all-reduce of a device token, captured once and re-issued by every replay.
"""
import pytest


def _barrier_record_case(rank, world, mode, marker_dir):
    import os
    import time
    import warnings

    import torch
    import torch.distributed as dist

    import torchair_dist

    os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = "record"
    try:
        torch._dynamo.reset()

        def step(x):
            y = x * 2
            dist.barrier()
            return y + 1

        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        compiled = torch.compile(step, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                                 fullgraph=True)
        equal = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.arange(4.0)
            equal.append(torch.equal(compiled(x), step(x)))  # capture
            arrived = []
            for i in range(2):  # replays: rank 0 may only leave once rank 1 wrote the marker
                marker = os.path.join(marker_dir, f"{mode}-{i}-rank1-arrived")
                if rank == 1:
                    time.sleep(0.5)
                    open(marker, "w").close()
                x = torch.randn(4)
                equal.append(torch.equal(compiled(x), x * 2 + 1))
                arrived.append(os.path.exists(marker))
        skipped = [str(w.message) for w in caught if "not captured" in str(w.message)]
        report = torchair_dist.capture_report()
        return {"equal": equal, "arrived": arrived, "skipped": skipped, "report": report}
    finally:
        os.environ.pop("TORCHAIR_DIST_CPU_CAPTURE", None)


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead"])
def test_barrier_is_captured_and_replayed_as_a_device_all_reduce(ranks2, mode, tmp_path):
    results = ranks2.run(_barrier_record_case, mode, str(tmp_path))
    for rank, r in enumerate(results):
        assert all(r["equal"]), f"rank {rank}: {r['equal']}"
        assert not r["skipped"], f"rank {rank}: barrier made the graph uncapturable: {r['skipped']}"
        (keys,) = r["report"].values()
        (counts,) = keys.values()
        assert counts["captures"] == 1 and counts["replays"] == 2, f"rank {rank}: {counts}"
    assert all(results[0]["arrived"]), "rank 0 left a replayed barrier before rank 1 reached it"
