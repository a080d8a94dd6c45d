"""The collective-capture matrix: one case per torch.distributed call, run on every rank.

A case builds ``(fn, make_args, ref)``: ``fn(*args)`` is compiled with ``fullgraph=True`` through
``get_npu_backend``; ``make_args(n)`` makes this rank's inputs for size ``n``; ``ref`` (default
``fn``) computes the eager reference — it differs only where gloo's eager API itself cannot do
the call (AVG, stacked outputs, unequal list collectives). ``expect(rank, ws)`` gives the
collective ops the rank's AOT graph must hold, with counts. :func:`run_case` runs on a rank,
checks outputs and mutated inputs against eager for each size (two sizes when dynamic, to prove
the symbolic graph is reused), and returns what it recorded.
"""
from __future__ import annotations

import collections
import time

import torch
import torch.distributed as dist
import torch.fx.experimental._config
import torch.distributed._functional_collectives as fc

AR, AG, RS, A2A, BC = ("_c10d_functional::all_reduce", "_c10d_functional::all_gather_into_tensor",
                       "_c10d_functional::reduce_scatter_tensor",
                       "torchair_dist::all_to_all_v", "_c10d_functional::broadcast")
SEND, RECV = "torchair_dist::send", "torchair_dist::recv"
COLLECTIVES = {AR, AG, RS, A2A, BC, SEND, RECV, "torchair_dist::all_gather",
               "_c10d_functional::all_to_all_single", "_c10d_functional::isend",
               "_c10d_functional::irecv", "_c10d_functional::batch_p2p_ops"}

CASES = {}


def case(name, expect, **kw):
    def register(build):
        CASES[name] = dict(build=build, expect=expect, **kw)
        return build
    return register


def _x(rank, n, cols=3, dtype=torch.float32):
    return (torch.arange(n * cols, dtype=dtype).reshape(n, cols) + 10 * rank + 1)


_SUBGROUPS = {}


def subgroup_ranks(ws):
    return [0, 1] if ws == 2 else [1, 3]


def subgroup(ws):
    """[0, 1] on 2 ranks (a second PG over the world), [1, 3] on 4 ranks; made on every rank."""
    if ws not in _SUBGROUPS:
        _SUBGROUPS[ws] = (subgroup_ranks(ws), dist.new_group(subgroup_ranks(ws)))
    return _SUBGROUPS[ws]


# Calls of one family share a graph (one compile per family keeps the 4-rank matrix cheap);
# the expected op counts still pin down every call.

# ---------------------------------------------------------------------------------- all_reduce
_REDUCE_OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
               dist.ReduceOp.MAX]


@case("all_reduce", lambda r, ws: {AR: len(_REDUCE_OPS) + 1})
def _b(rank, ws):
    def fn(x, p):
        outs = []
        for op in _REDUCE_OPS:
            y = (p if op == dist.ReduceOp.PRODUCT else x) * 2
            dist.all_reduce(y, op=op)
            outs.append(y + 1)
        dist.all_reduce(x)  # in place on a graph input
        return outs

    def ref(x, p):  # gloo has no AVG: SUM / world
        outs = []
        for op in _REDUCE_OPS:
            y = (p if op == dist.ReduceOp.PRODUCT else x) * 2
            dist.all_reduce(y, op=dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op)
            outs.append((y / ws if op == dist.ReduceOp.AVG else y) + 1)
        dist.all_reduce(x)
        return outs
    return fn, lambda n: (_x(rank, n), _x(rank, n) % 3 + 1), ref


# ---------------------------------------------------------------------------------- all_gather
@case("all_gather_list", lambda r, ws: {AG: 1, BC: ws})
def _b(rank, ws):
    def fn(x, u):
        outs = [torch.empty_like(x) for _ in range(ws)]
        dist.all_gather(outs, x)  # equal sizes
        uneven = [u.new_empty((i + 1, u.shape[1])) for i in range(ws)]
        dist.all_gather(uneven, u)  # rank i contributes i + 1 rows
        return torch.cat(outs) + 1, torch.cat(uneven) * 2

    def ref(x, u):  # gloo's eager all_gather needs equal sizes: broadcast the uneven pieces
        outs = [torch.empty_like(x) for _ in range(ws)]
        dist.all_gather(outs, x)
        uneven = [u.new_empty((i + 1, u.shape[1])) for i in range(ws)]
        for i, out in enumerate(uneven):
            if i == rank:
                out.copy_(u)
            dist.broadcast(out, src=i)
        return torch.cat(outs) + 1, torch.cat(uneven) * 2
    return fn, lambda n: (_x(rank, n + 8), _x(rank, rank + 1, cols=n + 5)), ref


@case("all_gather_into_tensor", lambda r, ws: {AG: 3})
def _b(rank, ws):
    def fn(x):
        cat = x.new_empty((ws * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(cat, x)
        stacked = x.new_empty((ws, *x.shape))
        dist.all_gather_into_tensor(stacked, x * 2)
        base = x.new_empty((ws * x.shape[0], *x.shape[1:]))
        torch.distributed.distributed_c10d._all_gather_base(base, x + 1)
        return cat, stacked, base

    def ref(x):  # gloo rejects a stacked output: gather concatenated, then view
        cat = x.new_empty((ws * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(cat, x)
        stacked = x.new_empty((ws * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(stacked, x * 2)
        base = x.new_empty((ws * x.shape[0], *x.shape[1:]))
        torch.distributed.distributed_c10d._all_gather_base(base, x + 1)
        return cat, stacked.view(ws, *x.shape), base
    return fn, lambda n: (_x(rank, n),), ref


@case("reduce_scatter_tensor", lambda r, ws: {RS: 2})
def _b(rank, ws):
    def fn(x):
        out = x.new_empty((x.shape[0] // ws, *x.shape[1:]))
        dist.reduce_scatter_tensor(out, x * 3)
        base = x.new_empty((x.shape[0] // ws, *x.shape[1:]))
        torch.distributed.distributed_c10d._reduce_scatter_base(base, x, op=dist.ReduceOp.MAX)
        return out - 1, base
    return fn, lambda n: (_x(rank, n * ws),), None


# -------------------------------------------------------------------------------- all_to_all
def _split(src, dst):
    return src + 2 * dst + 1  # rows rank src sends to rank dst


@case("all_to_all_single", lambda r, ws: {A2A: 3})
def _b(rank, ws):
    ins = [_split(rank, j) for j in range(ws)]
    outs = [_split(j, rank) for j in range(ws)]

    def fn(x, u, m):
        even = torch.empty_like(x)
        dist.all_to_all_single(even, x + 1)
        uneven = u.new_empty((sum(outs), u.shape[1]))
        dist.all_to_all_single(uneven, u * 2, outs, ins)
        multidim = torch.empty_like(m)
        dist.all_to_all_single(multidim, m)
        return even, uneven, multidim.sum(dim=-1)
    return fn, lambda n: (_x(rank, n * ws), _x(rank, sum(ins), cols=n + 5),
                          _x(rank, n * ws * 2, cols=4).reshape(n * ws, 2, 4)), None


@case("all_to_all_single_tensor_splits", lambda r, ws: {A2A: 1}, scalar_outputs=True)
def _b(rank, ws):
    ins = [_split(rank, j) for j in range(ws)]
    outs = [_split(j, rank) for j in range(ws)]

    def fn(x, in_splits, out_splits):
        i_list, o_list = in_splits.tolist(), out_splits.tolist()
        for s in i_list + o_list:
            torch._check(s >= 0)
        torch._check(sum(i_list) == x.shape[0])
        out = x.new_empty((sum(o_list), x.shape[1]))
        dist.all_to_all_single(out, x, o_list, i_list)
        return out + 1
    return fn, lambda n: (_x(rank, sum(ins), cols=n + 5), torch.tensor(ins),
                          torch.tensor(outs)), None


_A2A_LIST_SIZES = [lambda s, d: 2, _split, lambda s, d: 0 if (s + d) % 2 else s + d + 1]


@case("all_to_all_list", lambda r, ws: {A2A: len(_A2A_LIST_SIZES)})
def _b(rank, ws):
    """Equal, different and zero-size pieces; the list form flattens any sizes."""
    def fn(*xs):
        results = []
        for x, sizes in zip(xs, _A2A_LIST_SIZES):
            ins = list(torch.split(x, [sizes(rank, j) for j in range(ws)]))
            outs = [x.new_empty((sizes(j, rank), x.shape[1])) for j in range(ws)]
            dist.all_to_all(outs, [t * 2 for t in ins])
            results.append(torch.cat(outs))
        return results

    def ref(*xs):  # gloo's list all_to_all needs equal sizes: use the single form
        results = []
        for x, sizes in zip(xs, _A2A_LIST_SIZES):
            outs = [sizes(j, rank) for j in range(ws)]
            out = x.new_empty((sum(outs), x.shape[1]))
            dist.all_to_all_single(out, x * 2, outs, [sizes(rank, j) for j in range(ws)])
            results.append(out)
        return results

    def make(n):
        return tuple(_x(rank, sum(sizes(rank, j) for j in range(ws)), cols=n + 5)
                     for sizes in _A2A_LIST_SIZES)
    return fn, make, ref


# --------------------------------------------------------------------------------- broadcast
def _in_sub(rank, ws):
    return rank in subgroup_ranks(ws)


@case("broadcast", lambda r, ws: {BC: ws + (2 if _in_sub(r, ws) else 0)})
def _b(rank, ws):
    """Every src of the world, then a new_group subgroup by global src and by group_src."""
    ranks, group = subgroup(ws)

    def fn(x):
        outs = []
        for src in range(ws):
            t = x + src
            dist.broadcast(t, src=src)
            outs.append(t)
        a, b = x * 2, x * 3
        if rank in ranks:
            dist.broadcast(a, src=ranks[-1], group=group)
            dist.broadcast(b, group=group, group_src=0)
        return torch.stack(outs), a, b
    return fn, lambda n: (_x(rank, n),), None


# ------------------------------------------------------------------------------------- p2p
@case("send_recv_pairs", lambda r, ws: {SEND: 1, RECV: 1})
def _b(rank, ws):
    peer = rank ^ 1

    def fn(x):
        buf = torch.empty_like(x)
        if rank % 2 == 0:
            dist.send(x * 2, dst=peer)
            dist.recv(buf, src=peer)
        else:
            dist.recv(buf, src=peer)
            dist.send(x * 2, dst=peer)
        return buf + 1  # reads the receive buffer: must see the received data
    return fn, lambda n: (_x(rank, n),), None


@case("p2p_ring", lambda r, ws: {SEND: 2, RECV: 2})
def _b(rank, ws):
    """isend/irecv with .wait(), then batch_isend_irecv, around a ring."""
    def fn(x):
        buf = torch.zeros_like(x)
        reqs = [dist.isend(x + 1, dst=(rank + 1) % ws), dist.irecv(buf, src=(rank - 1) % ws)]
        for req in reqs:
            req.wait()
        buf2 = torch.zeros_like(x)
        ops = [dist.P2POp(dist.isend, buf * 3, (rank + 1) % ws),
               dist.P2POp(dist.irecv, buf2, (rank - 1) % ws)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return buf * 2, buf2 + x
    return fn, lambda n: (_x(rank, n),), None


# ---------------------------------------------------------------------------------- async_op
@case("async_op_wait_in_graph", lambda r, ws: {AR: 1, AG: 1, BC: 1})
def _b(rank, ws):
    def fn(x):
        y = x * 2
        w1 = dist.all_reduce(y, async_op=True)
        out = x.new_empty((ws * x.shape[0], x.shape[1]))
        w2 = dist.all_gather_into_tensor(out, x, async_op=True)
        z = x + 1
        w3 = dist.broadcast(z, src=0, async_op=True)
        w1.wait()
        w2.wait()
        w3.wait()
        return y + z, out
    return fn, lambda n: (_x(rank, n),), None


# ----------------------------------------------------------------------------- functional API
@case("functional_collectives", lambda r, ws: {AR: 1, AG: 1, RS: 1, A2A: 1, BC: 1})
def _b(rank, ws):
    def fn(x):
        a = fc.all_reduce(x, "sum", dist.group.WORLD)
        g = fc.all_gather_tensor(x, 0, dist.group.WORLD)
        s = fc.reduce_scatter_tensor(g, "sum", 0, dist.group.WORLD)
        t = fc.all_to_all_single(g, None, None, dist.group.WORLD)
        b = fc.broadcast(x, 0, dist.group.WORLD)
        return a + 1, s * 2, t - 1, b + 0
    return fn, lambda n: (_x(rank, n),), None


# --------------------------------------------------------------------- rooted collectives
@case("rooted_collectives", lambda r, ws: {AR: 1, AG: 1, A2A: 1, RS: 1})
def _b(rank, ws):
    """reduce / gather / scatter to or from the last rank, and the list reduce_scatter."""
    root = ws - 1

    def fn(x):
        red = x * 2
        dist.reduce(red, dst=root, op=dist.ReduceOp.MAX)
        gathered = [torch.empty_like(x) for _ in range(ws)] if rank == root else None
        dist.gather(x + 1, gathered, dst=root)
        piece = torch.empty_like(x)
        dist.scatter(piece, [x * (i + 1) for i in range(ws)] if rank == root else None, src=root)
        rs = torch.empty_like(x)
        dist.reduce_scatter(rs, [x + i for i in range(ws)])
        kept = (red, torch.cat(gathered)) if rank == root else (x,)
        return kept, piece, rs

    def ref(x):  # gloo: reduce may scribble on non-root tensors, no list reduce_scatter
        red = x * 2
        dist.reduce(red, dst=root, op=dist.ReduceOp.MAX)
        gathered = [torch.empty_like(x) for _ in range(ws)] if rank == root else None
        dist.gather(x + 1, gathered, dst=root)
        piece = torch.empty_like(x)
        dist.scatter(piece, [x * (i + 1) for i in range(ws)] if rank == root else None, src=root)
        rs = torch.empty_like(x)
        dist.reduce_scatter_tensor(rs, torch.cat([x + i for i in range(ws)]))
        kept = (red, torch.cat(gathered)) if rank == root else (x,)
        return kept, piece, rs
    return fn, lambda n: (_x(rank, n),), ref


# ------------------------------------------------------------------------------ DTensor TP
_MESH = {}


def _tp_module(ws, sequence_parallel):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    if ws not in _MESH:
        _MESH[ws] = init_device_mesh("cpu", (ws,), mesh_dim_names=("tp",))

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Linear(16, 8 * ws)
            self.w2 = torch.nn.Linear(8 * ws, 16)

        def forward(self, x):
            return self.w2(torch.nn.functional.gelu(self.w1(x)))

    torch.manual_seed(0)
    plan = ({"w1": ColwiseParallel(input_layouts=Shard(0)),
             "w2": RowwiseParallel(output_layouts=Shard(0))} if sequence_parallel else
            {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    return parallelize_module(MLP(), _MESH[ws], plan).requires_grad_(False)  # inference


def _tp_case(sequence_parallel):
    def build(rank, ws):
        model = _tp_module(ws, sequence_parallel)

        def fn(x):
            return model(x) * 1  # * 1 waits an AsyncCollectiveTensor in eager

        def make(n):
            torch.manual_seed(1)
            full = torch.randn(n * ws, 16)
            return (full.chunk(ws)[rank].contiguous() if sequence_parallel else full,)
        return fn, make, None
    return build


case("dtensor_tp_colwise_rowwise", lambda r, ws: {AR: 1})(_tp_case(False))
case("dtensor_tp_sequence_parallel", lambda r, ws: {AG: 1, RS: 1})(_tp_case(True))


# --------------------------------------------------------------------------------- runner
def _clone(args):
    return tuple(a.clone() for a in args)


def _collective_ops(graph):
    found = []
    for node in graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            name = target._schema.name
            if name in COLLECTIVES:
                found.append(name)
    return found


def compile_for(fn, mode, dynamic, graphs, aot_ops, **config_fields):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.post_grad_custom_post_pass = lambda gm, example_inputs, config: aot_ops.append(
        _collective_ops(gm.graph))  # TorchAir's calling convention
    for path, value in config_fields.items():
        obj = cfg
        *parents, leaf = path.split(".")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, leaf, value)
    backend = torchair_dist.get_npu_backend(compiler_config=cfg)

    def recording(gm, example_inputs, **kwargs):
        graphs.append(gm)
        return backend(gm, example_inputs, **kwargs)

    return torch.compile(fn, backend=recording, fullgraph=True, dynamic=dynamic)


def run_case(rank, ws, name, mode, dynamic, config=None, tolerance=None):
    """On one rank: compile case ``name``, compare with eager, return what was recorded.
    ``config``: ``{"section.option": value}`` set on the CompilerConfig; ``tolerance``:
    ``(rtol, atol)`` of the comparisons (default: ``assert_close``'s for the dtype)."""
    import warnings

    spec = CASES[name]
    fn, make, ref = spec["build"](rank, ws)
    ref = ref or fn
    torch._dynamo.reset()
    graphs, aot_ops = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        compiled = compile_for(fn, mode, dynamic, graphs, aot_ops, **(config or {}))
    tol = {} if tolerance is None else dict(rtol=tolerance[0], atol=tolerance[1])
    sizes = [2, 4] if dynamic else [2]
    t0 = time.perf_counter()
    # no duck sizing: rank-dependent sizes that happen to be equal must not share a symbol
    # (that would specialise the graph and recompile at the second size)
    with torch._dynamo.config.patch(capture_scalar_outputs=spec.get("scalar_outputs", False)), \
            torch.fx.experimental._config.patch(use_duck_shape=False):
        for n in sizes:
            args = make(n)
            eager_args, compiled_args = _clone(args), _clone(args)
            expected = ref(*eager_args)
            got = compiled(*compiled_args)
            torch.testing.assert_close(got, expected, msg=lambda m: f"{name} n={n}: {m}", **tol)
            torch.testing.assert_close(compiled_args, eager_args, **tol,
                                       msg=lambda m: f"{name} n={n} mutated inputs: {m}")
    return {"dynamo_graphs": len(graphs), "aot_ops": aot_ops,
            "seconds": time.perf_counter() - t0}


def run_cases(rank, ws, names, mode, dynamic, config=None, tolerance=None):
    """Several cases in one call (one round trip to the ranks); ``{name: result or error}``."""
    import traceback

    out = {}
    for name in names:
        try:
            out[name] = run_case(rank, ws, name, mode, dynamic, config, tolerance)
        except Exception:
            out[name] = traceback.format_exc()
    return out


def check_recorded(name, per_rank, ws, graphs=1):
    """Parent side: ``graphs`` Dynamo graphs (1: no recompile) and the expected collectives
    on every rank."""
    expect = CASES[name]["expect"]
    problems = []
    for rank, rec in enumerate(per_rank):
        if isinstance(rec, str):
            problems.append(f"rank {rank} raised:\n{rec}")
            continue
        if rec["dynamo_graphs"] != graphs:
            problems.append(f"rank {rank}: {rec['dynamo_graphs']} Dynamo graphs (want {graphs})")
        wanted = {k: v for k, v in expect(rank, ws).items() if v}
        for ops in rec["aot_ops"]:
            if dict(collections.Counter(ops)) != wanted:
                problems.append(f"rank {rank}: AOT graph collectives {ops}, want {wanted}")
        if not rec["aot_ops"]:
            problems.append(f"rank {rank}: no AOT graph recorded")
    return problems
