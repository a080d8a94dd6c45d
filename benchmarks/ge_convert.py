"""GE backend (max-autotune) costs: conversion time against graph size, and step latency.

  python benchmarks/ge_convert.py [--layers 1,2,4,8,16,32] [--steps 200] [--world 2]

1. Conversion: an L-layer Llama-style decoder (RMSNorm, rotary attention with a causal mask,
   SiLU MLP) is captured once per L as its AOT forward graph; then FX -> GE conversion,
   ModelDef serialization and reference-executor load (parse + code generation) are timed
   separately (median of 3). Prints per-layer cost and whether it grows linearly.
2. Step latency, single process: the 4-layer decoder under eager, aot_eager and max-autotune
   (reference executor), median per call, interleaved.
3. Step latency on ``--world`` gloo ranks: a 2-layer tensor-parallel decoder MLP stack
   (column/row-parallel with ``dist.all_reduce``), same variants, per rank.

Part 1 calls the GE backend's internals (``convert_graph``, ``ReferenceRuntime``) to isolate
conversion from Dynamo/AOT time; parts 2 and 3 use the public API only.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import compile_variants, interleaved_medians, print_table  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchair_dist  # noqa: E402


class Layer(torch.nn.Module):
    def __init__(self, dim=64, heads=4, ffn=128):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(dim)), torch.nn.Parameter(torch.ones(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.up = torch.nn.Linear(dim, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, dim, bias=False)

    @staticmethod
    def norm(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def forward(self, x, cos, sin, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x, self.n1)).split(d, -1)
        q, k, v = (t.view(b, s, self.heads, self.hd).transpose(1, 2) for t in (q, k, v))

        def rot(t):
            t1, t2 = t[..., : self.hd // 2], t[..., self.hd // 2:]
            return t * cos + torch.cat((-t2, t1), -1) * sin
        att = torch.softmax(rot(q) @ rot(k).transpose(-1, -2) / math.sqrt(self.hd) + mask, -1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, s, d))
        gate, up = self.up(self.norm(x, self.n2)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Decoder(torch.nn.Module):
    def __init__(self, layers, dim=64):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(dim) for _ in range(layers))
        self.hd = dim // 4

    def forward(self, x):
        s = x.shape[1]
        pos = torch.arange(s, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        freqs = torch.cat([pos[:, None] * inv[None, :]] * 2, -1)
        cos, sin = freqs.cos(), freqs.sin()
        mask = torch.full((s, s), float("-inf")).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return x


def capture(model, x):
    """The AOT forward graph and its example inputs (public torch APIs only)."""
    from torch._functorch.aot_autograd import aot_module_simplified

    got = {}

    def backend(gm, example_inputs):
        def fw(g, ex):
            got["gm"], got["ex"] = g, ex
            return g
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, fullgraph=True)(x)
    return got["gm"], got["ex"]


def median_s(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def conversion(layer_counts):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from torchair_dist.backends.ge.fx2ge import convert_graph
    from torchair_dist.cpu.ge_reference import ReferenceRuntime

    print("\n1. FX -> GE conversion against graph size (median of 3)")
    print(f"{'layers':>6} {'FX nodes':>9} {'GE ops':>7} {'convert ms':>11} {'serialize ms':>13} "
          f"{'load ms':>8} {'total ms':>9} {'ms/layer':>9}")
    rows = []
    for n in layer_counts:
        torch.manual_seed(0)
        gm, ex = capture(Decoder(n).eval(), torch.randn(2, 16, 64))
        with unset_fake_temporarily():
            conv = convert_graph(gm, ex, f"decoder_{n}")
            t_conv = median_s(lambda: convert_graph(gm, ex, f"decoder_{n}"))
            data = conv.model.SerializeToString()
            t_ser = median_s(conv.model.SerializeToString)
            t_load = median_s(lambda: ReferenceRuntime().load(data))
        total = t_conv + t_ser + t_load
        nodes = sum(1 for _ in gm.graph.nodes)
        rows.append((n, total))
        print(f"{n:>6} {nodes:>9} {len(conv.model.graph[0].op):>7} {t_conv * 1e3:>11.1f} "
              f"{t_ser * 1e3:>13.2f} {t_load * 1e3:>8.1f} {total * 1e3:>9.1f} "
              f"{total / n * 1e3:>9.2f}")
    (n0, t0), (n1, t1) = rows[min(1, len(rows) - 1)], rows[-1]
    growth = (t1 / n1) / (t0 / n0)
    print(f"per-layer cost at {n1} layers / at {n0} layers = {growth:.2f} "
          f"({'linear' if growth < 1.5 else 'SUPERLINEAR'})")


def variants():
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "max-autotune"
    return {"eager": None, "aot_eager": "aot_eager",
            "ours:max-autotune": torchair_dist.get_npu_backend(compiler_config=cfg)}


def single_process(steps):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Decoder(4).eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        compiled = compile_variants(model, (x,), variants())
        med = interleaved_medians({k: (lambda f=f: f(x)) for k, (f, _) in compiled.items()}, steps)
    print_table("2. 4-layer decoder (dim 64, seq 16), single process", med,
                {k: c for k, (_, c) in compiled.items()})


def _tp_rank(rank, world, port, steps):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    hidden, ffn, layers = 256, 1024, 2
    ws = [(torch.randn(ffn, hidden, generator=g).chunk(world, 0)[rank].contiguous(),
           torch.randn(hidden, ffn, generator=g).chunk(world, 1)[rank].contiguous())
          for _ in range(layers)]
    x = torch.randn(4, hidden, generator=g)

    def mlp(t):
        for w1, w2 in ws:
            h = F.linear(F.silu(F.linear(t, w1)), w2)
            dist.all_reduce(h)
            t = t + h
        return t

    with torch.no_grad():
        compiled = compile_variants(mlp, (x,), variants(), barrier=dist.barrier)
        med = interleaved_medians({k: (lambda f=f: f(x)) for k, (f, _) in compiled.items()},
                                  steps, barrier=dist.barrier)
    rows = [None] * world
    dist.all_gather_object(rows, (med, {k: c for k, (_, c) in compiled.items()}))
    if rank == 0:
        for r, (m, c) in enumerate(rows):
            print_table(f"3. TP decoder MLP x{layers} (256x1024), {world} gloo ranks: rank {r}", m, c)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="1,2,4,8,16,32")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--world", type=int, default=2, help="0 skips the multi-rank part")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} cpus")
    conversion([int(n) for n in args.layers.split(",")])
    single_process(args.steps)
    if args.world > 1:
        from torch.distributed.elastic.utils.distributed import get_free_port

        mp.spawn(_tp_rank, args=(args.world, get_free_port(), args.steps), nprocs=args.world)


if __name__ == "__main__":
    main()
