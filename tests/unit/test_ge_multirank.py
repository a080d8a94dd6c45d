"""max-autotune (GE reference executor) on 2 gloo ranks: the collectives matrix, torchair_dist
p2p/list ops and a tensor-parallel MLP, each compared with eager on every rank.

Uses the rank harness of tests/multicard (harness.RankPool); each case is a module-level
function run on every rank as ``fn(rank, world_size, case)``.
"""
import os

import pytest


def _cases():
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import torchair_dist.collectives.collective_ops  # noqa: F401

    td = torch.ops.torchair_dist

    def all_reduce_inplace(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    def all_reduce_max(x):
        return funcol.all_reduce(x, "max", dist.group.WORLD) - 1

    def all_reduce_avg(x):
        return funcol.all_reduce(x, "avg", dist.group.WORLD)

    def all_reduce_input_mutation(x):
        dist.all_reduce(x)
        return x.sum()

    def all_gather(x):
        out = x.new_empty((x.shape[0] * dist.get_world_size(),) + tuple(x.shape[1:]))
        dist.all_gather_into_tensor(out, x)
        return out * 1

    def reduce_scatter(x):
        out = x.new_empty((x.shape[0] // dist.get_world_size(),) + tuple(x.shape[1:]))
        dist.reduce_scatter_tensor(out, x)
        return out + 0

    def all_to_all_even(x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out

    def all_to_all_uneven(x):
        r = dist.get_rank()
        inp = x[: 3 + r]                      # rank0 sends 3 rows, rank1 sends 4
        in_splits = [1, 2] if r == 0 else [2, 2]
        out_splits = [1, 2] if r == 0 else [2, 2]
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        return out * 2

    def broadcast(x):
        return funcol.broadcast(x, 1, dist.group.WORLD) + 1

    def a2a_v(x):
        r = dist.get_rank()
        inner = x.shape[1]
        send = [1 * inner, 3 * inner] if r == 0 else [2 * inner, 2 * inner]
        recv = [1 * inner, 2 * inner] if r == 0 else [3 * inner, 2 * inner]
        sd = [0, send[0]]
        rd = [0, recv[0]]
        y = td.all_to_all_v(x, send, sd, recv, rd, "tag=;ranks=0,1")
        # eager all_to_all_v may run asynchronously (packed pieces): wait as for any collective
        return torch.ops._c10d_functional.wait_tensor(y) + 1

    def send_recv(x):
        r = dist.get_rank()
        peer = 1 - r
        token = td.send(x * 2, peer, 0, "tag=;ranks=0,1")
        got = td.recv(x, peer, 0, "tag=;ranks=0,1")
        got = torch.ops._c10d_functional.wait_tensor(got)
        torch.ops._c10d_functional.wait_tensor(token)
        return got + x

    def list_all_gather_unequal(x):
        like = [x.new_empty((2, 3)), x.new_empty((1, 3))]
        mine = x[:2] if dist.get_rank() == 0 else x[:1]
        a, b = td.all_gather(like, mine, "tag=;ranks=0,1")
        return torch.cat([a, b]) * 3

    def list_all_gather_equal(x):
        like = [torch.empty_like(x), torch.empty_like(x)]
        a, b = td.all_gather(like, x, "tag=;ranks=0,1")
        return a - b

    return {f.__name__: f for f in [
        all_reduce_inplace, all_reduce_max, all_reduce_avg, all_reduce_input_mutation,
        all_gather, reduce_scatter, all_to_all_even, all_to_all_uneven, broadcast, a2a_v,
        send_recv, list_all_gather_unequal, list_all_gather_equal]}


def _run_case(rank, world_size, name):
    import torch
    import torch.distributed as dist

    from test_ge_common import aot_compile, convert

    os.environ["TORCHAIR_DIST_GE_VALIDATE"] = "1"
    fn = _cases()[name]
    torch.manual_seed(100 + rank)
    x = torch.randn(4, 3)
    x_eager, x_comp = x.clone(), x.clone()
    if name == "all_reduce_avg":  # gloo has no AVG: eager reference is sum / world size
        y = x.clone()
        dist.all_reduce(y)
        expected = y / world_size
    else:
        expected = fn(x_eager)
    torch._dynamo.reset()
    graphs = []
    with torch.no_grad():
        actual = aot_compile(fn, graphs=graphs)(x_comp)
        again = aot_compile(fn)(x.clone()) \
            if name != "all_reduce_input_mutation" else actual
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(x_comp, x_eager)  # mutated inputs written back like eager
    assert len(graphs) == 1, f"{len(graphs)} graphs (graph break?)"
    del again
    vals = [n.meta["val"] for n in graphs[0].graph.nodes if n.op == "placeholder"]
    model = convert(graphs[0], vals, rank=rank, world_size=world_size).model
    return sorted({op.type for op in model.graph[0].op if op.type.startswith("Hcom")}), \
        sorted({op.attr["group"].s.decode() for op in model.graph[0].op if "group" in op.attr})


CASE_NAMES = ["all_reduce_inplace", "all_reduce_max", "all_reduce_avg",
              "all_reduce_input_mutation", "all_gather", "reduce_scatter", "all_to_all_even",
              "all_to_all_uneven", "broadcast", "a2a_v", "send_recv", "list_all_gather_unequal",
              "list_all_gather_equal"]


EXPECTED_HCOM = {
    "all_reduce_inplace": ["HcomAllReduce"], "all_reduce_max": ["HcomAllReduce"],
    "all_reduce_avg": ["HcomAllReduce"], "all_reduce_input_mutation": ["HcomAllReduce"],
    "all_gather": ["HcomAllGather"], "reduce_scatter": ["HcomReduceScatter"],
    # explicit split lists (the remap records them even for a split-less call) always lower to
    # HcomAllToAllV: the choice follows what every rank shares, never one rank's sizes
    "all_to_all_even": ["HcomAllToAllV"], "all_to_all_uneven": ["HcomAllToAllV"],
    "broadcast": ["HcomBroadcast"], "a2a_v": ["HcomAllToAllV"],
    "send_recv": ["HcomReceive", "HcomSend"], "list_all_gather_unequal": ["HcomBroadcast"],
    "list_all_gather_equal": ["HcomAllGather"],
}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_collective_matches_eager_on_2_ranks(ranks2, name):
    results = ranks2.run(_run_case, name, timeout=180)
    for rank, (hcom, group_names) in enumerate(results):
        assert hcom == EXPECTED_HCOM[name], f"rank {rank}"  # the same lowering on every rank
        assert group_names == ["tag=;ranks=0,1"]  # the stable name, identical on both ranks


def _tp_mlp(rank, world_size):
    import torch
    import torch.distributed as dist

    from test_ge_common import aot_compile

    torch.manual_seed(0)
    hidden, ffn = 16, 32
    w1, w2 = torch.randn(ffn, hidden), torch.randn(hidden, ffn)
    x = torch.randn(4, hidden)
    full = torch.nn.functional.gelu(x @ w1.t()) @ w2.t()
    shard = ffn // world_size
    w1s, w2s = w1[rank * shard:(rank + 1) * shard], w2[:, rank * shard:(rank + 1) * shard]

    def mlp(x, a, b):
        y = torch.nn.functional.gelu(x @ a.t()) @ b.t()
        dist.all_reduce(y)
        return y

    torch._dynamo.reset()
    with torch.no_grad():
        out = aot_compile(mlp)(x, w1s, w2s)
    torch.testing.assert_close(out, full, rtol=1e-4, atol=1e-4)
    return True


def test_tp_mlp_matches_unsharded_model(ranks2):
    assert ranks2.run(_tp_mlp, timeout=180) == [True, True]


def _export(rank, world_size, path):
    import torch
    import torch.distributed as dist

    from test_ge_common import aot_compile, stand_in_config

    def fn(x, w):
        y = x @ w
        dist.all_reduce(y)
        return y

    cfg = stand_in_config(export__export_mode=True, export__export_path_dir=path,
                          export__export_name="tp",
                          export__experimental__auto_atc_config_generated=True)
    torch._dynamo.reset()
    x, w = torch.ones(2, 3), torch.full((3, 4), float(rank + 1))
    with torch.no_grad():
        out = aot_compile(fn, cfg, static=[1])(x, w)
    torch.testing.assert_close(out, torch.full((2, 4), 9.0))
    return sorted(os.listdir(os.path.join(path, f"rank_{rank}")))


def test_export_on_2_ranks(ranks2, tmp_path):
    import json

    from torchair_dist.backends.ge.proto import ModelDef
    from torchair_dist.backends.ge.registry_check import validate

    listings = ranks2.run(_export, str(tmp_path), timeout=180)
    assert listings == [["dynamo.pbtxt", "tp0.air"], ["dynamo.pbtxt", "tp1.air"]]
    for rank in range(2):
        model = ModelDef()
        model.ParseFromString((tmp_path / f"rank_{rank}" / f"tp{rank}.air").read_bytes())
        validate(model)
        types = [op.type for op in model.graph[0].op]
        assert "HcomAllReduce" in types and types.count("Data") == 1 and "Const" in types
    relation = json.loads((tmp_path / "model_relation_config.json").read_text())
    assert relation["comm_group"][0]["group_name"] == "tag=;ranks=0,1"
    assert (tmp_path / "numa_config.json").exists()


def _moe(x, wr, w_local):
    """Expert parallel MoE step: 2 experts (one per rank), data-dependent all_to_all splits."""
    import torch
    import torch.distributed as dist

    expert = (x @ wr).argmax(-1)
    m0 = expert == 0
    send = torch.cat([x[m0], x[~m0]])
    send_counts = torch.stack([m0.sum(), (~m0).sum()])
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    s, r = send_counts.tolist(), recv_counts.tolist()
    out = x.new_empty((sum(r), x.shape[1]))
    dist.all_to_all_single(out, send, r, s)
    y = torch.nn.functional.silu(out @ w_local)
    back = y.new_empty((sum(s), y.shape[1]))
    dist.all_to_all_single(back, y, s, r)
    result = torch.zeros_like(x)
    result[m0] = back[: s[0]]
    result[~m0] = back[s[0]:]
    return result


def _run_moe(rank, world_size):
    import torch

    from test_ge_common import aot_compile, convert

    os.environ["TORCHAIR_DIST_GE_VALIDATE"] = "1"
    torch.manual_seed(rank)
    x, wr = torch.randn(8, 16), torch.randn(16, 2)
    w = torch.randn(16, 16)
    expected = _moe(x, wr, w)
    torch._dynamo.reset()
    saved = torch._dynamo.config.capture_scalar_outputs
    torch._dynamo.config.capture_scalar_outputs = True
    graphs = []
    try:
        with torch.no_grad():
            actual = aot_compile(_moe, graphs=graphs)(x, wr, w)
    finally:
        torch._dynamo.config.capture_scalar_outputs = saved
    torch.testing.assert_close(actual, expected)
    vals = [n.meta["val"] for n in graphs[0].graph.nodes if n.op == "placeholder"]
    model = convert(graphs[0], vals, rank=rank, world_size=world_size).model
    return len(graphs), [op.type for op in model.graph[0].op if op.type.startswith("Hcom")]


def test_moe_all_to_all_with_data_dependent_splits(ranks2):
    for n_graphs, hcom in ranks2.run(_run_moe, timeout=180):
        assert n_graphs == 1
        assert hcom == ["HcomAllToAllV", "HcomAllToAllV", "HcomAllToAllV"]


def _tp_llama(rank, world_size):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from transformers import LlamaConfig, LlamaForCausalLM

    from test_ge_common import aot_compile

    os.environ["TORCHAIR_DIST_GE_VALIDATE"] = "1"
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        expected = model(ids).logits
    mesh = init_device_mesh("cpu", (world_size,))
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan)
    torch._dynamo.reset()
    graphs = []
    with torch.no_grad():
        actual = aot_compile(model, graphs=graphs)(ids).logits
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    return len(graphs)


def test_tensor_parallel_hf_llama_matches_eager(ranks2):
    pytest.importorskip("transformers")
    assert ranks2.run(_tp_llama, timeout=300) == [1, 1]


GENERIC_CASES = ["all_reduce_inplace", "all_reduce_max", "all_reduce_avg",
                 "all_reduce_input_mutation", "all_gather", "reduce_scatter", "all_to_all_even",
                 "broadcast"]


def _run_4_ranks(rank, world_size):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from test_ge_common import aot_compile, convert

    for name in GENERIC_CASES:
        _run_case(rank, world_size, name)
    # a subgroup: ranks {0, 2} and {1, 3}, created in the same order on every rank
    pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    mine = pairs[rank % 2]

    def sub(x):
        return funcol.all_reduce(x * 2, "sum", mine) + 1

    x = torch.full((3,), float(rank))
    torch._dynamo.reset()
    graphs = []
    with torch.no_grad():
        out = aot_compile(sub, graphs=graphs)(x)
    peer = (rank + 2) % 4
    torch.testing.assert_close(out, torch.full((3,), 2.0 * (rank + peer) + 1))
    vals = [n.meta["val"] for n in graphs[0].graph.nodes if n.op == "placeholder"]
    model = convert(graphs[0], vals, rank=rank, world_size=world_size).model
    return sorted({op.attr["group"].s.decode() for op in model.graph[0].op if "group" in op.attr})


def test_collectives_and_subgroups_on_4_ranks(ranks4):
    groups = ranks4.run(_run_4_ranks, timeout=400)
    assert groups == [["tag=;ranks=0,2"], ["tag=;ranks=1,3"], ["tag=;ranks=0,2"], ["tag=;ranks=1,3"]]


# -------------------------------------------------- asynchronous collectives in the executor
def _generated_code(run):
    """(result of ``run()``, the reference executor's code of every graph loaded during it)."""
    from torchair_dist.cpu.ge_reference import executor as reference

    codes, original = [], reference.ReferenceRuntime.load

    def load(self, model_bytes):
        original(self, model_bytes)
        codes.append(self.code)
    reference.ReferenceRuntime.load = load
    try:
        return run(), codes
    finally:
        reference.ReferenceRuntime.load = original


def _line_of(lines, *needles):
    """Index of the first line holding every needle."""
    return next(i for i, line in enumerate(lines) if all(n in line for n in needles))


def _moe_overlap(rank, world_size, overlap):
    """Dispatch all_to_all, a TP shared expert with its all_reduce, experts, combine
    all_to_all: the dispatch is finished only where the experts read it, after the shared
    expert's matmuls (with overlap on), and every rank equals eager."""
    import torch
    import torch.distributed as dist

    from test_ge_common import stand_in_config
    from torchair_dist import get_npu_backend

    torch.manual_seed(rank)
    x, ws, we = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)

    def moe(x, ws, we):
        recv = torch.empty_like(x)
        dist.all_to_all_single(recv, x * 2)
        shared = torch.relu(x @ ws) @ ws
        dist.all_reduce(shared)
        back = torch.empty_like(x)
        dist.all_to_all_single(back, torch.relu(recv @ we))
        return back + shared

    expected = moe(x, ws, we)
    cfg = stand_in_config()
    cfg.distributed_config.overlap_collectives = overlap
    torch._dynamo.reset()
    compiled = torch.compile(moe, backend=get_npu_backend(compiler_config=cfg), fullgraph=True)
    with torch.no_grad():
        out, codes = _generated_code(lambda: [compiled(x, ws, we) for _ in range(2)])
    for o in out:
        torch.testing.assert_close(o, expected)
    lines = codes[0].splitlines()
    issue = _line_of(lines, "p_all_to_all", "= k_")
    done = _line_of(lines, "_0 = p_")  # the first finish: the dispatch (all_reduce: at the end)
    matmuls = [i for i, line in enumerate(lines) if "MatMulV2_0 = k_" in line]
    expert_mm = _line_of(lines, "MatMulV2_0 = k_", "wait_tensor")  # reads the dispatched data
    return {"issue": issue, "done": done, "matmuls": matmuls, "expert": expert_mm}


@pytest.mark.parametrize("overlap", [True, False])
def test_ge_collectives_finish_at_their_first_reader(ranks2, overlap):
    for rank, at in enumerate(ranks2.run(_moe_overlap, overlap, timeout=180)):
        assert at["issue"] < at["done"] < at["expert"], (rank, at)
        between = [i for i in at["matmuls"] if at["issue"] < i < at["done"]]
        # overlap on: both shared-expert matmuls run while the dispatch is in flight;
        # off: the collective is finished on the line after its issue
        assert len(between) == (2 if overlap else 0), (rank, at)
        assert overlap or at["done"] == at["issue"] + 1, (rank, at)


def _gather_then_write(rank, world_size):
    """A collective reading a buffer the graph then writes in place (``enable_ref_data``: GE
    ``Assign`` into the caller's tensor) is finished before the write: the gather sees the
    old values. (The converter orders Assign after the wait with a control edge, and the
    executor finishes every pending collective before an op that writes an input.) Eager
    funcol on gloo races here, so the expectation is written out."""
    import torch
    import torch.distributed._functional_collectives as funcol
    import torch.distributed as dist

    from test_ge_common import aot_compile, stand_in_config

    def fn(cache, x):
        gathered = funcol.all_gather_tensor(cache, 0, dist.group.WORLD)
        cache.add_(x)
        return gathered

    cache, x = torch.full((4, 3), float(rank)), torch.ones(4, 3)
    torch._dynamo.reset()
    with torch.no_grad():
        out, codes = _generated_code(lambda: aot_compile(
            fn, stand_in_config(experimental_config__enable_ref_data=True))(cache, x))
    torch.testing.assert_close(out, torch.cat([torch.full((4, 3), float(r))
                                               for r in range(world_size)]))
    torch.testing.assert_close(cache, torch.full((4, 3), rank + 1.0))
    lines = codes[0].splitlines()
    return _line_of(lines, "_0 = p_") < _line_of(lines, "Assign")  # finish, then write


def test_ge_collective_finishes_before_an_in_place_write(ranks2):
    assert ranks2.run(_gather_then_write, timeout=180) == [True, True]
