"""Rank functions of the model suite (run by ``RankPool.run`` on every rank).

Each case builds a real model on every rank, runs it eagerly and compiled with
``torch.compile(backend=torchair_dist.get_npu_backend(...), fullgraph=True)`` in one mode, and
returns ``{"diff": max |compiled - eager|, "ref_diff": max |eager - unsharded reference|,
"graphs": [ops of each graph our compiler received], "dynamo_graphs": n}``.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Dict, List

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# The model zoo of the launch scripts: tiny HF Llama and its tensor-parallel plan.
_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch")
if _LAUNCH not in sys.path:
    sys.path.insert(0, _LAUNCH)

from models import LLAMA_DEFAULTS as LLAMA, llama_tp_plan, tiny_llama  # noqa: E402,F401

# ------------------------------------------------------------------------------ helpers
MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]


def check_results(results: List[Dict], atol: float, ref_atol: float, what: str) -> None:
    """The checks every model test makes on every rank: compiled == eager within ``atol``,
    eager == the unsharded reference within ``ref_atol``, and exactly one graph."""
    for rank, r in enumerate(results):
        assert r["diff"] <= atol, f"rank {rank}: compiled vs eager {r['diff']}"
        assert r["ref_diff"] <= ref_atol, f"rank {rank}: {what} vs reference {r['ref_diff']}"
        assert len(r["graphs"]) == 1, f"rank {rank} compiled {len(r['graphs'])} graphs"



@contextlib.contextmanager
def record_graphs():
    """Collect the call_function targets of every graph our compiler receives."""
    from torchair_dist.pipeline.route import record_graphs as record
    from torchair_dist.passes.graph_info import op_targets

    graphs: List[List[str]] = []
    with record() as seen:
        yield graphs
    graphs.extend(op_targets(ctx.gm) for ctx in seen)


def backend_for(mode: str, options: Dict = {}):  # noqa: B006 - read only
    """Our backend in ``mode`` with ``options`` ({"section.option": value}) set."""
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    for path, value in options.items():
        *sections, name = path.split(".")
        target = cfg
        for section in sections:
            target = getattr(target, section)
        setattr(target, name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # reduce-overhead is deprecated
        return torchair_dist.get_npu_backend(compiler_config=cfg)


def compile_and_compare(fn, inputs, mode: str, calls: int = 2, options: Dict = {},  # noqa: B006
                        dynamic=None) -> Dict:
    """Compile ``fn`` with our backend (``options`` set, see :func:`backend_for`), call it
    ``calls`` times on ``inputs``; compare with eager ``fn`` on the same inputs. ``out``:
    the last compiled output."""
    torch._dynamo.reset()
    with torch.no_grad():
        expected = fn(*inputs)
        with record_graphs() as graphs:
            compiled = torch.compile(fn, backend=backend_for(mode, options), fullgraph=True,
                                     dynamic=dynamic)
            diffs, out = [], None
            for _ in range(calls):  # each output read before the next replay overwrites it
                out = compiled(*inputs)
                diffs.append((out - expected).abs().max().item())
            out = out.clone()
    return {"diff": max(diffs), "graphs": graphs, "expected": expected, "out": out}


# ------------------------------------------------------------------------- (a) HF Llama TP
def sharded_llama(world: int, seed: int = 0, **overrides):
    """(unsharded reference model, TP-sharded model) with the same random weights."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    reference = tiny_llama(seed, **overrides)
    model = tiny_llama(seed, **overrides)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, llama_tp_plan(model.config.num_hidden_layers))
    return reference, model


def llama_logits(model):
    def forward(input_ids):
        return model(input_ids=input_ids, use_cache=False).logits
    return forward


def llama_case(rank, world, mode, batch=2, seq=8, attn="sdpa"):
    torch.set_num_threads(1)
    reference, model = sharded_llama(world, attn_implementation=attn)
    ids = torch.randint(0, LLAMA["vocab_size"], (batch, seq),
                        generator=torch.Generator().manual_seed(1))
    res = compile_and_compare(llama_logits(model), (ids,), mode)
    with torch.no_grad():
        res["ref_diff"] = (reference(input_ids=ids, use_cache=False).logits
                           - res.pop("expected")).abs().max().item()
    return res


# ------------------------------------------------------------------------ (b) MoE with EP
# tokens rank r sends to the expert on rank d (expert-choice routing: static, uneven counts)
MOE_SPLITS = [[3, 5], [6, 2]]
MOE_TOKENS, MOE_HIDDEN, MOE_FFN = 8, 32, 64


class ExpertParallelMoE(nn.Module):
    """One expert per rank; expert-choice routing: the expert on rank ``d`` takes the
    ``MOE_SPLITS[r][d]`` highest-scoring tokens of rank ``r``. Dispatch and combine are
    ``dist.all_to_all_single`` with uneven split sizes; the combine adds the weighted expert
    outputs back to their tokens (a one-hot combine matrix)."""

    def __init__(self, rank: int, world: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.rank, self.world = rank, world
        self.gate = nn.Parameter(torch.randn(world, MOE_HIDDEN, generator=g) / MOE_HIDDEN**0.5)
        experts = [(torch.randn(MOE_FFN, MOE_HIDDEN, generator=g) / MOE_HIDDEN**0.5,
                    torch.randn(MOE_HIDDEN, MOE_FFN, generator=g) / MOE_FFN**0.5)
                   for _ in range(world)]
        self.all_experts = experts  # kept for the single-process reference
        self.w1 = nn.Parameter(experts[rank][0].clone())
        self.w2 = nn.Parameter(experts[rank][1].clone())
        self.send_splits = [MOE_SPLITS[rank][d] for d in range(world)]
        self.recv_splits = [MOE_SPLITS[s][rank] for s in range(world)]

    def route(self, x):
        scores = torch.softmax(F.linear(x, self.gate), dim=-1)  # [T, world]
        idx, weights = [], []
        for d in range(self.world):
            w, i = torch.topk(scores[:, d], self.send_splits[d])
            idx.append(i)
            weights.append(w)
        return torch.cat(idx), torch.cat(weights)

    def forward(self, x):
        idx, weights = self.route(x)
        dispatched = x.index_select(0, idx)
        received = torch.empty(sum(self.recv_splits), MOE_HIDDEN, dtype=x.dtype)
        dist.all_to_all_single(received, dispatched, self.recv_splits, self.send_splits)
        y = F.linear(F.silu(F.linear(received, self.w1)), self.w2)
        back = torch.empty(sum(self.send_splits), MOE_HIDDEN, dtype=x.dtype)
        dist.all_to_all_single(back, y, self.send_splits, self.recv_splits)
        # combine matrix [tokens sent, T] (GShard-style; a scatter-add in matmul form)
        combine = (idx.unsqueeze(1) == torch.arange(x.shape[0])).to(x.dtype)
        return x + combine.t() @ (back * weights.unsqueeze(-1))

    def reference(self, x):
        """The same layer in one process (every expert local)."""
        idx, weights = self.route(x)
        out = torch.zeros_like(x)
        start = 0
        for d, n in enumerate(self.send_splits):
            w1, w2 = self.all_experts[d]
            sel = idx[start:start + n]
            y = F.linear(F.silu(F.linear(x.index_select(0, sel), w1)), w2)
            out.index_add_(0, sel, y * weights[start:start + n].unsqueeze(-1))
            start += n
        return x + out


def moe_case(rank, world, mode):
    torch.set_num_threads(1)
    moe = ExpertParallelMoE(rank, world).eval()
    x = torch.randn(MOE_TOKENS, MOE_HIDDEN, generator=torch.Generator().manual_seed(10 + rank))
    res = compile_and_compare(moe, (x,), mode)
    with torch.no_grad():
        res["ref_diff"] = (moe.reference(x) - res.pop("expected")).abs().max().item()
    return res


# ---------------------------------------------------------------- (c) 2-stage pipeline
PP_HIDDEN = 32


class PipelineStage(nn.Module):
    """Stage ``rank`` of a 2-stage pipeline of MLP blocks. Stage 0 computes its block, sends
    the activation to stage 1 and receives the final result back; stage 1 receives, computes
    its block and sends the result back. Both ranks return the pipeline's output."""

    def __init__(self, rank: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.blocks = [(torch.randn(2 * PP_HIDDEN, PP_HIDDEN, generator=g) / PP_HIDDEN**0.5,
                        torch.randn(PP_HIDDEN, 2 * PP_HIDDEN, generator=g) / PP_HIDDEN**0.5)
                       for _ in range(2)]
        self.rank = rank
        self.w1 = nn.Parameter(self.blocks[rank][0].clone())
        self.w2 = nn.Parameter(self.blocks[rank][1].clone())

    @staticmethod
    def block(x, w1, w2):
        return x + F.linear(F.gelu(F.linear(x, w1)), w2)

    def forward(self, x):
        if self.rank == 0:
            h = self.block(x, self.w1, self.w2)
            dist.send(h, dst=1)
            out = torch.empty_like(x)
            dist.recv(out, src=1)
            return out
        h = torch.empty_like(x)
        dist.recv(h, src=0)
        out = self.block(h, self.w1, self.w2)
        dist.send(out, dst=0)
        return out + 0  # a fresh output, not the buffer that was sent

    def reference(self, x):
        for w1, w2 in self.blocks:
            x = self.block(x, w1, w2)
        return x


def pipeline_case(rank, world, mode):
    torch.set_num_threads(1)
    stage = PipelineStage(rank).eval()
    x = torch.randn(4, PP_HIDDEN, generator=torch.Generator().manual_seed(3))
    if rank != 0:
        x = torch.zeros_like(x)  # stage 1's input is unused: data arrives from stage 0
    res = compile_and_compare(stage, (x,), mode)
    x0 = torch.randn(4, PP_HIDDEN, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        res["ref_diff"] = (stage.reference(x0) - res.pop("expected")).abs().max().item()
    return res


# ------------------------------------------------------------- compile cache on the TP Llama
def llama_cache_case(rank, world, mode, cache_dir, calls=2):
    """``cache_compile`` the TP Llama's forward; returns where the first call came from
    (``compiled`` / ``cache``), its seconds, the Dynamo frames compiled and the diff to eager."""
    import time

    import torchair_dist

    torch.set_num_threads(1)
    torch._dynamo.reset()
    _, model = sharded_llama(world, num_hidden_layers=1)  # 1 layer: two cold starts per test
    ids = torch.randint(0, LLAMA["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(1))
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fast = torchair_dist.cache_compile(model.forward, config=cfg, cache_dir=cache_dir)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    dist.barrier()
    t0 = time.perf_counter()
    out = fast(input_ids=ids, use_cache=False)
    first_s = time.perf_counter() - t0
    source = fast.last_source
    for _ in range(calls - 1):
        out = fast(input_ids=ids, use_cache=False)
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=False).logits
    return {"source": source, "first_s": first_s, "type": type(out).__name__,
            "dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames,
            "diff": (out.logits - expected).abs().max().item(), "dir": fast.directory()}


def llama_cache_flat_call_case(rank, world, mode, cache_dir, calls=3):
    """The TP Llama behind a positional ``forward(input_ids) -> logits`` through
    ``cache_compile``: saved by one ``cache_compile``, loaded by a second one in this process.
    Returns whether the warm calls took the entry's generated call and the largest diff to
    eager over ``calls`` calls with new token ids."""
    import torchair_dist

    torch.set_num_threads(1)
    torch._dynamo.reset()
    _, model = sharded_llama(world, num_hidden_layers=1)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    wrapper = Logits()
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    gen = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, LLAMA["vocab_size"], (2, 8), generator=gen) for _ in range(calls)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torchair_dist.cache_compile(wrapper.forward, config=cfg, cache_dir=cache_dir)(ids[0])
        warm = torchair_dist.cache_compile(wrapper.forward, config=cfg, cache_dir=cache_dir)
    diff, sources = 0.0, []
    for t in ids:
        out = warm(t).clone()
        sources.append(warm.last_source)
        with torch.no_grad():
            diff = max(diff, (out - wrapper(t)).abs().max().item())
    (entry,) = warm.loaded.values()
    return {"sources": sources, "generated_call": getattr(entry, "fast", None) is not None,
            "fast_keyed": len(warm._by_fast_key), "diff": diff}


# ------------------------------------------------- (d) MoE top-1 router, fixed capacity
ROUTER_TOKENS, ROUTER_HIDDEN, ROUTER_FFN, ROUTER_CAP = 12, 16, 32, 4


class CapacityRouterMoE(nn.Module):
    """Top-1 routing into a fixed-capacity buffer (Switch-Transformer style), one expert per
    rank: ``one_hot`` of each token's expert, ``cumsum`` over tokens gives its slot in that
    expert's buffer, tokens past ``ROUTER_CAP`` are dropped (they keep the residual only).
    The [world, CAP, H] buffer goes to the experts with one equal-split
    ``all_to_all_single`` and comes back with another."""

    def __init__(self, rank: int, world: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.rank, self.world = rank, world
        self.gate = nn.Parameter(torch.randn(world, ROUTER_HIDDEN, generator=g))
        experts = [(torch.randn(ROUTER_FFN, ROUTER_HIDDEN, generator=g) / ROUTER_HIDDEN**0.5,
                    torch.randn(ROUTER_HIDDEN, ROUTER_FFN, generator=g) / ROUTER_FFN**0.5)
                   for _ in range(world)]
        self.all_experts = experts
        self.w1 = nn.Parameter(experts[rank][0].clone())
        self.w2 = nn.Parameter(experts[rank][1].clone())

    def route(self, x):
        """(dispatch mask [T, E, CAP] in x's dtype, gate weight [T])."""
        scores = torch.softmax(F.linear(x, self.gate), dim=-1)      # [T, E]
        weight, expert = scores.max(dim=-1)                         # top-1
        mask = F.one_hot(expert, num_classes=self.world)            # [T, E] int64
        slot = torch.cumsum(mask, dim=0) * mask - 1                  # slot in the buffer
        keep = (slot >= 0) & (slot < ROUTER_CAP)
        slot_mask = F.one_hot(slot.clamp(0, ROUTER_CAP - 1), num_classes=ROUTER_CAP)
        dispatch = (slot_mask * keep.unsqueeze(-1)).to(x.dtype)      # [T, E, CAP]
        return dispatch, weight

    @staticmethod
    def expert(h, w1, w2):
        return F.linear(F.silu(F.linear(h, w1)), w2)

    def forward(self, x):
        dispatch, weight = self.route(x)
        buffer = torch.einsum("tec,th->ech", dispatch, x).reshape(-1, ROUTER_HIDDEN)
        received = torch.empty_like(buffer)
        dist.all_to_all_single(received, buffer)                     # [src rank * CAP, H]
        y = self.expert(received, self.w1, self.w2)
        back = torch.empty_like(y)
        dist.all_to_all_single(back, y)                              # [expert * CAP, H]
        back = back.reshape(self.world, ROUTER_CAP, ROUTER_HIDDEN)
        return x + torch.einsum("tec,ech->th", dispatch * weight[:, None, None], back)

    def reference(self, x):
        """Token by token in one process: every expert local, the same capacity rule."""
        scores = torch.softmax(F.linear(x, self.gate), dim=-1)
        out = x.clone()
        used = [0] * self.world
        for t in range(x.shape[0]):
            e = int(scores[t].argmax())
            if used[e] < ROUTER_CAP:
                w1, w2 = self.all_experts[e]
                out[t] += scores[t, e] * self.expert(x[t:t + 1], w1, w2)[0]
            used[e] += 1
        return out


def router_case(rank, world, mode):
    torch.set_num_threads(1)
    moe = CapacityRouterMoE(rank, world).eval()
    x = torch.randn(ROUTER_TOKENS, ROUTER_HIDDEN,
                    generator=torch.Generator().manual_seed(20 + rank))
    res = compile_and_compare(moe, (x,), mode)
    with torch.no_grad():
        res["ref_diff"] = (moe.reference(x) - res.pop("expected")).abs().max().item()
        dispatch, _ = moe.route(x)
        res["dropped"] = int(ROUTER_TOKENS - dispatch.sum().item())
    return res
