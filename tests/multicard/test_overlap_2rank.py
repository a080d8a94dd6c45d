"""2-rank tests of the overlap scheduling pass: compute overlaps a collective, compiled == eager.

Each case runs on 2 gloo ranks (harness.RankPool). The scheduled AOT graph is recorded after the
overlap stage of the real pipeline (compiler.record_graphs(after="overlap")), so the test asserts
both numerics and the order the pass chose
(the collective issued before the independent compute, its wait after it).
"""
import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import pytest



def _copied(out):
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)

def _targets_of(gms):
    return [[str(n.target) for n in gm.graph.nodes if n.op == "call_function"] for gm in gms]


def _block(x, w1, w2, ws):
    """all_reduce of a TP partial beside an independent 'shared' MLP, then all_to_all."""
    import torch
    import torch.distributed as dist

    h = x @ w1
    dist.all_reduce(h)
    shared = torch.relu(x @ ws) @ ws      # independent of the all_reduce
    y = torch.tanh(h) @ w2
    out = torch.empty_like(y)
    dist.all_to_all_single(out, y)
    return out + shared, h


def _run_block(rank, world_size, mode, overlap_on):
    import torch
    import torch.distributed as dist

    import torchair_dist
    import torchair_dist.pipeline.route as compiler

    torch.manual_seed(1234 + rank)
    x = torch.randn(8, 16)
    w1, w2, ws = torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16)
    eager = _block(x, w1, w2, ws)
    try:
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        cfg.distributed_config.overlap_collectives = overlap_on
        torch._dynamo.reset()
        fn = torch.compile(_block, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                           fullgraph=True)
        # off, the overlap stage does not run: the graph as the stage before it left it
        with compiler.record_graphs(after="overlap" if overlap_on else "scope_attrs") as graphs:
            # each call's outputs are kept past the next replay: copies (the captured ones
            # raise once the next replay overwrote them)
            outs = [_copied(fn(x, w1, w2, ws)) for _ in range(3)]
        record = _targets_of(graphs)
    finally:
        torch._dynamo.reset()
    for out in outs:
        for a, b in zip(out, eager):
            torch.testing.assert_close(a, b)
    dist.barrier()
    return record[0]


def _index(order, name, nth=0):
    hits = [i for i, t in enumerate(order) if name in t]
    return hits[nth]


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead"])
def test_compute_overlaps_collective_compiled_equals_eager(ranks2, mode):
    orders = ranks2.run(_run_block, mode, True)
    for order in orders:
        ar, a2a = _index(order, "all_reduce"), _index(order, "all_to_all")
        wait_ar = _index(order, "wait_tensor", 0)
        mms = [i for i, t in enumerate(order) if t == "aten.mm.default"]
        # all_reduce issued right after its producer, before the shared MLP's matmuls;
        assert ar < mms[1]
        # its wait comes after the shared MLP (independent compute overlaps the collective);
        assert wait_ar > mms[2]
        # collective order kept.
        assert ar < a2a
    assert orders[0] == orders[1]  # same schedule on both ranks


def test_overlap_off_keeps_traced_order(ranks2):
    orders = ranks2.run(_run_block, "npugraph_ex", False)
    for order in orders:
        # traced order: the wait follows its all_reduce directly (after the copy-back setup)
        assert _index(order, "wait_tensor", 0) < [i for i, t in enumerate(order)
                                                  if t == "aten.mm.default"][1]


# -- a side stream computes while a collective runs ----------------------------------------------
def _side_stream_block(x, w1, w2):
    import torch
    import torch.distributed as dist

    from torchair_dist.streams import npu_stream_switch, npu_stream_wait_stream, npu_wait_tensor

    h = x @ w1
    with npu_stream_switch("comm"):
        npu_wait_tensor(h, h)
        dist.all_reduce(h)
    y = torch.relu(x @ w2) @ w2          # main stream, while the all_reduce runs on "comm"
    npu_stream_wait_stream(None, "comm")
    return h + y


def _side_stream_block_ref(x, w1, w2):
    import torch
    import torch.distributed as dist

    h = x @ w1
    dist.all_reduce(h)
    return h + torch.relu(x @ w2) @ w2


def _torch_stream_block(x, w1, w2):
    import torch
    import torch.distributed as dist

    side = torch.Stream(device="cpu")
    h = x @ w1
    with side:
        y = torch.relu(x @ w2) @ w2      # side stream compute
    dist.all_reduce(h)                   # main stream collective
    torch.Stream(device="cpu")           # an unused stream object is harmless
    side.synchronize()
    return h + y


def _run_streams(rank, world_size, mode, which):
    import torch
    import torch.distributed as dist

    import torchair_dist
    import torchair_dist.pipeline.route as compiler

    program = {"switch": _side_stream_block, "torch": _torch_stream_block}[which]
    torch.manual_seed(7 + rank)
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)
    eager = _side_stream_block_ref(x, w1, w2)
    try:
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        torch._dynamo.reset()
        fn = torch.compile(program, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                           fullgraph=True)
        with compiler.record_graphs(after="overlap") as graphs:
            outs = [_copied(fn(x, w1, w2)) for _ in range(3)]
        record = _targets_of(graphs)
    finally:
        torch._dynamo.reset()
    for out in outs:
        torch.testing.assert_close(out, eager)
    dist.barrier()
    return record[0]


@pytest.mark.parametrize("mode", ["npugraph_ex", "reduce-overhead"])
@pytest.mark.parametrize("which", ["switch", "torch"])
def test_side_stream_beside_collective_compiled_equals_eager(ranks2, mode, which):
    orders = ranks2.run(_run_streams, mode, which)
    for order in orders:
        assert any("all_reduce" in t for t in order)
        assert any(t.startswith("torchair_dist_streams.stream_enter") for t in order)
        assert not any(t.startswith("streams.") for t in order)
    assert orders[0] == orders[1]
