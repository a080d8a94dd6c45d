"""Run a tensor-parallel model compiled with torchair_dist under torchrun (one process per
card); pick the platform (NPU/HCCL, CUDA/NCCL, CPU/gloo), set up the process group with a
timeout, compile per rank, check against eager and print a per-rank table.

  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 launch/run.py \\
      --model llama --mode npugraph_ex
  # several nodes: launch/multinode.sh (torchrun's c10d rendezvous)
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cli import base_parser, import_runtime  # noqa: E402

# torch is imported after argument parsing, so --help answers at once: these names are bound
# by _import_runtime().
torch = dist = torchair_dist = None
gather_rows = init_distributed = median_us = require_torchrun = time_steps = None

def _import_runtime() -> None:
    """Import torch and the library (slow) into this module, after argument parsing."""
    import_runtime(globals())


def parse_args(argv=None):
    p = base_parser(__doc__)
    p.add_argument("--model", default="llama", choices=["llama", "tp-transformer"],
                   help="llama: HF LlamaForCausalLM (tiny random config) sharded with "
                        "parallelize_module; tp-transformer: launch/models.TPTransformer")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    return p.parse_args(argv)


def build(args, plat, rank, world, device):
    """(module, example inputs, function of the module to run)."""
    g = torch.Generator().manual_seed(1)
    if args.model == "llama":
        from models import tp_llama

        model = tp_llama(world, device, plat.device_type, num_hidden_layers=args.layers,
                         hidden_size=args.hidden, num_attention_heads=args.heads,
                         num_key_value_heads=args.heads, intermediate_size=2 * args.hidden)
        ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g)
        return model, {"input_ids": ids.to(device), "use_cache": False}, \
            lambda out: out.logits
    from models import TPTransformer

    model = TPTransformer(args.layers, args.hidden, args.heads, 4 * args.hidden, rank,
                          world).to(device).eval()
    x = torch.randn(args.batch, args.seq, args.hidden, generator=g).to(device)
    return model, {"x": x}, lambda out: out


def compile_model(model, args):
    import torchair_dist

    config = torchair_dist.CompilerConfig()
    config.mode = args.mode
    if args.cache_dir:
        return torchair_dist.cache_compile(model.forward, config=config,
                                           cache_dir=args.cache_dir)
    return torch.compile(model, backend=torchair_dist.get_npu_backend(compiler_config=config),
                         fullgraph=True)


def print_table(rows, args, world, plat) -> None:
    print(f"torchair_dist run: {args.model}, {args.layers} layers, hidden {args.hidden}, world "
          f"size {world}, {plat.name}/{plat.dist_backend}, {args.steps} steps")
    print(f"{'rank':>4} {'host':>10} {'mode':>15} {'compile s':>10} {'eager us':>10} "
          f"{'ours us':>10} {'ours/eager':>10} {'max |diff|':>11}")
    for r in rows:
        print(f"{r['rank']:>4} {r['host'][:10]:>10} {r['mode']:>15} {r['compile_s']:>10.2f} "
              f"{r['eager_us']:>10.0f} {r['ours_us']:>10.0f} "
              f"{r['ours_us'] / r['eager_us']:>10.2f} {r['max_diff']:>11.2e}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    _import_runtime()
    require_torchrun("launch/run.py")
    plat, rank, world, device = init_distributed(args.timeout)
    try:
        model, inputs, pick = build(args, plat, rank, world, device)
        compiled = compile_model(model, args)
        with torch.no_grad():
            expected = pick(model(**inputs))
            dist.barrier()
            t0 = time.perf_counter()
            actual = pick(compiled(**inputs))
            plat.synchronize()
            compile_s = time.perf_counter() - t0
            max_diff = (actual - expected).abs().max().item()
            eager_us = median_us(time_steps(lambda: model(**inputs), plat, args.steps))
            ours_us = median_us(time_steps(lambda: compiled(**inputs), plat, args.steps))
        import socket

        rows = gather_rows(dict(rank=rank, host=socket.gethostname(), mode=args.mode,
                                compile_s=compile_s, eager_us=eager_us, ours_us=ours_us,
                                max_diff=max_diff))
        if rank == 0:
            print_table(rows, args, world, plat)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
