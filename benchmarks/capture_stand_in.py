"""CPU capture stand-ins side by side: per-call latency of the ACL runner with
``TORCHAIR_DIST_CPU_CAPTURE`` = off (the generated forward runs directly), emulate (replay
re-runs the forward) and record (replay re-issues the recorded ops), beside eager.

  python benchmarks/capture_stand_in.py [--steps 300]

1. a trivial graph (``x + 1`` on 16 floats): pure per-call overhead;
2. a 4-layer Llama-like decoder block stack (RMSNorm, attention with SDPA, SwiGLU MLP; dim 64,
   seq 8): about 120 aten ops per call, one static KV-free step.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import interleaved_medians  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchair_dist  # noqa: E402

STAND_INS = ("off", "emulate", "record")


def _variants(fn, args, mode="npugraph_ex"):
    out = {"eager": fn}
    for stand_in in STAND_INS:
        os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = stand_in
        torch._dynamo.reset()
        cfg = torchair_dist.CompilerConfig()
        cfg.mode = mode
        f = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                          fullgraph=True)
        with torch.no_grad():
            f(*args)
            torch.testing.assert_close(f(*args), fn(*args))
        out[f"ours:{stand_in}"] = f
    return out


def _decoder(layers=4, dim=64, heads=4, seq=8):
    g = torch.Generator().manual_seed(0)
    ws = [[torch.randn(dim, dim, generator=g) / dim ** 0.5 for _ in range(4)] +
          [torch.randn(4 * dim, dim, generator=g) / dim ** 0.5,
           torch.randn(4 * dim, dim, generator=g) / dim ** 0.5,
           torch.randn(dim, 4 * dim, generator=g) / (4 * dim) ** 0.5] for _ in range(layers)]

    def rms(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def fn(x):
        b, s, _ = x.shape
        for wq, wk, wv, wo, w1, w3, w2 in ws:
            h = rms(x)
            q, k, v = (F.linear(h, w).view(b, s, heads, -1).transpose(1, 2) for w in (wq, wk, wv))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + F.linear(a.transpose(1, 2).reshape(b, s, -1), wo)
            h = rms(x)
            x = x + F.linear(F.silu(F.linear(h, w1)) * F.linear(h, w3), w2)
        return x

    return fn, (torch.randn(1, seq, dim, generator=g),)


def _table(title, med):
    print(f"\n{title}")
    print(f"{'variant':<16} {'median us':>10} {'vs eager':>9} {'vs ours:off':>12}")
    for name, m in med.items():
        print(f"{name:<16} {m * 1e6:>10.1f} {m / med['eager']:>9.2f} "
              f"{m / med['ours:off']:>12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    saved = os.environ.get("TORCHAIR_DIST_CPU_CAPTURE")
    try:
        for title, (fn, ex) in (("trivial graph (x + 1, 16 floats)",
                                 (lambda t: t + 1, (torch.randn(16),))),
                                ("4-layer decoder stack (dim 64, seq 8)", _decoder())):
            variants = _variants(fn, ex)
            with torch.no_grad():
                med = interleaved_medians({k: (lambda f=f: f(*ex)) for k, f in variants.items()},
                                          args.steps)
            _table(title, med)
    finally:
        if saved is None:
            os.environ.pop("TORCHAIR_DIST_CPU_CAPTURE", None)
        else:
            os.environ["TORCHAIR_DIST_CPU_CAPTURE"] = saved


if __name__ == "__main__":
    main()
