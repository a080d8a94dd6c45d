"""Many small pieces: a model that Dynamo splits into about two graphs per layer, per step and
per piece, side by side in one run: eager, inductor, ours (npugraph_ex, with inductor's kernels,
max-autotune).

  python benchmarks/pieces.py [--layers 2 8] [--tokens 16] [--steps 300] [--threads 1]

Each layer is a pre-norm block whose cache write runs outside the graph, as transformers'
paged-cache update does (``@torch.compiler.disable``): Dynamo makes one graph before the write
and one after it (norm + projections; attention-free mixing + MLP), so a model of ``L`` layers
is about ``2 L`` pieces a step. The pieces are small (``--tokens`` rows of width 64), so a step
measures what a serving engine pays per piece: the guard check, the backend's per-call path
and the replay. Printed per variant and layer count: median step time, time per piece
(step / pieces), the ratio to eager and to inductor.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _bench  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

WIDTH = 64


@torch.compiler.disable
def _write_cache(cache: torch.Tensor, k: torch.Tensor) -> None:
    """Outside the graph, like a paged-cache update: a graph break on each side."""
    cache[: k.shape[0]].copy_(k)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.RMSNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.o = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH, bias=False)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH, bias=False)

    def forward(self, x, cache):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        _write_cache(cache, k)
        h = x + self.o(torch.sigmoid(q) * v)
        return h + self.down(F.silu(self.up(h)))


class Model(torch.nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x, caches):
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache)
        return x


def variants():
    import torchair_dist

    out = {"eager": None, "inductor": "inductor"}
    for name, mode, kernels in (("ours:npugraph_ex", "npugraph_ex", False),
                                ("ours:npugraph_ex+inductor_kernels", "npugraph_ex", True),
                                ("ours:max-autotune", "max-autotune", False)):
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        cfg.experimental_config.inductor_kernels = kernels
        out[name] = torchair_dist.get_npu_backend(compiler_config=cfg)
    return out


def _own_classes(model: Model) -> Model:
    """A copy of ``model`` (same weights) whose forwards have code objects of their own:
    Dynamo keeps compiled entries per code object, so variants compiled on one code would walk
    past each other's entries on every call; with their own, all variants are timed
    interleaved in one run."""
    own_block = type("Block", (Block,), {"forward": _bench._own_code(Block.forward)})
    own_model = type("Model", (Model,), {"forward": _bench._own_code(Model.forward)})
    copy = own_model.__new__(own_model)
    torch.nn.Module.__init__(copy)
    copy.blocks = torch.nn.ModuleList()
    for block in model.blocks:
        b = own_block.__new__(own_block)
        torch.nn.Module.__init__(b)
        for name, child in block.named_children():
            setattr(b, name, child)
        copy.blocks.append(b)
    return copy.eval()


def measure(layers: int, tokens: int, steps: int):
    """(median step seconds per variant, graphs per step of each compiled variant)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = Model(layers).eval()
    x = torch.randn(tokens, WIDTH)
    caches = [torch.zeros(256, WIDTH) for _ in range(layers)]
    calls, graphs = {}, {}
    with torch.no_grad():
        expected = model(x, caches)
        for name, backend in variants().items():
            counters.clear()
            step = _own_classes(model)
            if backend is not None:
                step = torch.compile(step, backend=backend)
            torch.testing.assert_close(step(x, caches), expected, rtol=1e-5, atol=1e-5)
            graphs[name] = counters["stats"]["unique_graphs"]
            calls[name] = (lambda s=step: s(x, caches))
        medians = _bench.interleaved_medians(calls, steps)
    return medians, graphs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (1 keeps timings stable on a shared machine)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}; pieces of {args.tokens} x {WIDTH}; median of "
          f"{args.steps} steps per variant")
    for layers in args.layers:
        medians, graphs = measure(layers, args.tokens, args.steps)
        pieces = 2 * layers  # each block runs its graph before and after the cache write
        print(f"\n{layers} layers: {pieces} pieces per step ({max(graphs.values())} graphs "
              f"compiled, each called once per layer)")
        print(f"{'variant':<36} {'step us':>9} {'per piece us':>13} {'vs eager':>9} "
              f"{'vs inductor':>12}")
        for name, m in medians.items():
            print(f"{name:<36} {m * 1e6:>9.1f} {m * 1e6 / pieces:>13.1f} "
                  f"{m / medians['eager']:>9.2f} {m / medians['inductor']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
