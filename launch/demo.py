"""The main job: greedy generation with a tiny tensor-parallel Llama compiled per rank.

  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 launch/demo.py

Every rank builds a Hugging Face ``LlamaForCausalLM`` from a tiny random config (no download),
shards it with ``parallelize_module`` (Colwise q/k/v/gate/up, Rowwise o/down), and generates
``--new-tokens`` tokens greedily twice: eagerly and compiled with
``torch.compile(backend=torchair_dist.get_npu_backend(...), fullgraph=True)``. Each step runs the
model on a fixed-size token window (static shapes: one graph, no recompiles; no KV cache). Rank 0
shows progress and ends with one row per rank: mode, compile time, median step latency beside
eager's, their ratio, the largest logit difference from eager, tokens generated (and whether
they equal eager's), and whether the graph was compiled or loaded (``--cache-dir``).
"""
from __future__ import annotations

import os
import statistics
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
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens per sequence")
    p.add_argument("--new-tokens", type=int, default=24, help="tokens generated per sequence")
    p.add_argument("--repeat", type=int, default=3,
                   help="generation passes per variant (latency = median over all steps)")
    return p.parse_args(argv)


def generate(step_fn, prompt: torch.Tensor, new_tokens: int, plat, progress=None):
    """Greedy decoding on a fixed window ``[batch, prompt + new_tokens]``; returns (tokens,
    per-step seconds, logits of every step)."""
    batch, plen = prompt.shape
    window = torch.zeros(batch, plen + new_tokens, dtype=torch.long, device=prompt.device)
    window[:, :plen] = prompt
    times, logits_seen = [], []
    for i in range(new_tokens):
        pos = plen + i
        dist.barrier()
        plat.synchronize()
        t0 = time.perf_counter()
        logits = step_fn(window)
        plat.synchronize()
        times.append(time.perf_counter() - t0)
        last = logits[:, pos - 1].clone()
        logits_seen.append(last)
        window[:, pos] = last.argmax(-1)
        if progress:
            progress(i + 1)
    return window[:, plen:], times, logits_seen


def main(argv=None):
    args = parse_args(argv)
    _import_runtime()
    require_torchrun("launch/demo.py")
    plat, rank, world, device = init_distributed(args.timeout)
    from models import tp_llama

    model = tp_llama(world, device, plat.device_type, num_hidden_layers=args.layers,
                     hidden_size=args.hidden, num_attention_heads=args.heads,
                     num_key_value_heads=args.heads, intermediate_size=2 * args.hidden,
                     vocab_size=args.vocab, max_position_embeddings=args.prompt + args.new_tokens)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt),
                           generator=torch.Generator().manual_seed(1)).to(device)
    config = torchair_dist.CompilerConfig()
    config.mode = args.mode
    if args.cache_dir:
        compiled = torchair_dist.cache_compile(model.forward, config=config,
                                               cache_dir=args.cache_dir)
    else:
        compiled = torch.compile(model, fullgraph=True,
                                 backend=torchair_dist.get_npu_backend(compiler_config=config))

    def say(msg):
        if rank == 0:
            print(msg, flush=True)

    def progress(label):
        def show(n):
            if n == args.new_tokens:
                say(f"  {label}: {n} tokens x {args.batch} sequences")
        return show

    say(f"torchair_dist demo: {args.layers}-layer TP Llama (hidden {args.hidden}, vocab "
        f"{args.vocab}), world size {world}, {plat.name}/{plat.dist_backend}, mode {args.mode}")
    eager_step = lambda w: model(input_ids=w, use_cache=False).logits  # noqa: E731
    ours_step = lambda w: compiled(input_ids=w, use_cache=False).logits  # noqa: E731
    with torch.no_grad():
        say("compiling ...")
        window = torch.zeros(args.batch, args.prompt + args.new_tokens, dtype=torch.long,
                             device=device)
        dist.barrier()
        t0 = time.perf_counter()
        ours_step(window)
        plat.synchronize()
        compile_s = time.perf_counter() - t0
        source = getattr(compiled, "last_source", None) or "compiled"  # cache_compile: "cache"
        say(f"  {'loaded from the cache' if source == 'cache' else 'compiled'} in "
            f"{compile_s:.1f}s (rank 0)")
        runs = {}
        for name, fn in (("eager", eager_step), ("ours", ours_step)):
            all_times = []
            for r in range(args.repeat):
                tokens, times, logits = generate(fn, prompt, args.new_tokens, plat,
                                                 progress(f"{name} pass {r + 1}/{args.repeat}"))
                all_times += times
            runs[name] = (tokens, statistics.median(all_times), logits)
    (eager_tokens, eager_s, eager_logits), (ours_tokens, ours_s, ours_logits) = \
        runs["eager"], runs["ours"]
    max_diff = max((a - b).abs().max().item() for a, b in zip(ours_logits, eager_logits))
    rows = gather_rows(dict(rank=rank, mode=args.mode, compile_s=compile_s, source=source,
                            eager_us=eager_s * 1e6, ours_us=ours_s * 1e6, max_diff=max_diff,
                            tokens=ours_tokens.numel(),
                            same=bool(torch.equal(ours_tokens, eager_tokens)),
                            sample=ours_tokens[0, :8].tolist()))
    if rank == 0:
        print(f"\n{'rank':>4} {'mode':>15} {'compile s':>10} {'eager us':>10} {'ours us':>10} "
              f"{'ours/eager':>10} {'max |diff|':>11} {'tokens':>7} {'= eager':>8} {'graph from':>10}")
        for r in rows:
            print(f"{r['rank']:>4} {r['mode']:>15} {r['compile_s']:>10.2f} "
                  f"{r['eager_us']:>10.0f} {r['ours_us']:>10.0f} "
                  f"{r['ours_us'] / r['eager_us']:>10.2f} {r['max_diff']:>11.2e} "
                  f"{r['tokens']:>7} {str(r['same']):>8} {r['source']:>10}")
        print(f"first tokens of sequence 0: {rows[0]['sample']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
