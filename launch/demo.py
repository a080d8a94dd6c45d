"""The main job: static-KV-cache decode of a Hugging Face causal LM sharded by transformers' TP.

  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 launch/demo.py

Rank 0 saves a tiny random ``--model-type`` (Llama by default) to a temporary directory (no
download); every rank loads it with ``from_pretrained(dir, tp_plan="auto")`` (transformers' own
tensor parallelism over the gloo/hccl/nccl process group). Greedy generation with a static KV
cache, driven two ways:

* an explicit loop over one ``StaticCache``: eager prefill, then decode steps through
  ``torch.compile(model.forward, backend=torchair_dist.get_npu_backend(...), fullgraph=True)``
  (timed against the same loop run eagerly);
* ``model.generate(..., cache_implementation="static", compile_config=CompileConfig(
  backend=..., fullgraph=True))``.

Default mode ``max-autotune`` (GE); ``--mode`` switches. On CPU the ACL modes run the
capture/replay bookkeeping on the CPU stand-in graph (``TORCHAIR_DIST_CPU_CAPTURE=emulate``), so
the captures column counts real captures of the runner. Rank 0 shows progress, then one row per
rank: mode, model, compile time, median decode-step latency beside eager's and the ratio,
tokens generated, whether they equal eager's (loop / generate), graphs compiled, recompiles,
captures.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cli import MODES, base_parser, import_runtime  # noqa: E402

torch = dist = torchair_dist = None
gather_rows = init_distributed = median_us = require_torchrun = time_steps = None


def parse_args(argv=None):
    p = base_parser(__doc__)
    p.set_defaults(mode="max-autotune")
    p.add_argument("--model-type", default="llama",
                   help="transformers model_type with a base TP plan (llama, qwen3, mixtral, ...)")
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens per sequence")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sequence")
    p.add_argument("--repeat", type=int, default=3,
                   help="decode passes per variant (latency = median over all steps)")
    p.add_argument("--no-emulate-capture", action="store_true",
                   help="on CPU, run the ACL modes without the capture stand-in")
    args = p.parse_args(argv)
    if args.cache_dir:
        p.error("--cache-dir is not supported by the decode demo; use launch/run.py "
                "--cache-dir DIR for the compile cache")
    return args


def _share_model_dir(rank: int, model_type: str, layers: int, hidden: int, heads: int) -> str:
    """Rank 0 writes the tiny model; every rank gets its directory."""
    import tempfile

    import hf_decode

    box = [None]
    if rank == 0:
        box[0] = hf_decode.save_tiny(
            model_type, tempfile.mkdtemp(prefix="torchair_dist_demo_"), num_hidden_layers=layers,
            hidden_size=hidden, num_attention_heads=heads, intermediate_size=2 * hidden)
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _decode_passes(hf, model, ids, args, step, barrier, say, label):
    """``--repeat`` loop passes on one reused cache; returns (tokens, step times, logits)."""
    cache = hf.new_static_cache(model, ids, args.new_tokens)
    all_times = []
    for r in range(args.repeat):
        tokens, times, logits = hf.static_cache_loop(model, ids, args.new_tokens, step,
                                                     before_step=barrier, cache=cache)
        all_times += times
        say(f"  {label} pass {r + 1}/{args.repeat}: prefill + {len(times)} decode steps "
            f"x {ids.shape[0]} sequences, median {hf.median_us(times):.0f} us/step")
    return tokens, all_times, logits


def run(args, rank, world, plat):
    import hf_decode as hf

    def say(msg):
        if rank == 0:
            print(msg, flush=True)

    def barrier(_step=None):
        dist.barrier()
        plat.synchronize()

    say(f"torchair_dist demo: tiny {args.model_type} ({args.layers} layers, hidden "
        f"{args.hidden}), transformers TP over {world} ranks, {plat.name}/{plat.dist_backend}, "
        f"mode {args.mode}, static KV cache, {args.new_tokens} new tokens")
    path = _share_model_dir(rank, args.model_type, args.layers, args.hidden, args.heads)
    model = hf.load_tp(path)
    say(f"  loaded with tp_plan='auto' from {path}")
    ids = hf.prompt_ids(args.batch, args.prompt, model.config.vocab_size).to(model.device)
    eager_tokens, eager_times, eager_logits = _decode_passes(hf, model, ids, args, None, barrier,
                                                             say, "eager")
    backend = hf.npu_backend(args.mode)
    say("compiling the decode step ...")
    with hf.CompileStats() as stats:
        compiled = hf.compiled_forward(model, backend)
        tokens, times, logits = _decode_passes(hf, model, ids, args, compiled, barrier, say,
                                               args.mode)
    compile_s = times[0]
    steady = times[1:] if len(times) > 1 else times
    diff = max((a - b).abs().max().item() for a, b in zip(logits, eager_logits))
    say("generate(cache_implementation='static', compile_config=CompileConfig(backend=...)) ...")
    torch._dynamo.reset()
    gen_eager = hf.generate_tokens(model, ids, args.new_tokens)
    with hf.CompileStats() as gen_stats:
        gen_ours = hf.generate_tokens(model, ids, args.new_tokens, backend)
    say(f"  generate: {gen_ours.numel()} tokens, {len(gen_stats.graphs)} graph(s), tokens "
        f"equal eager: {torch.equal(gen_ours, gen_eager)}")
    return dict(rank=rank, mode=args.mode, model=args.model_type, compile_s=compile_s,
                eager_us=hf.median_us(eager_times), ours_us=hf.median_us(steady),
                tokens=tokens.numel(), same=bool(torch.equal(tokens, eager_tokens)),
                gen_same=bool(torch.equal(gen_ours, gen_eager) and torch.equal(gen_eager,
                                                                               eager_tokens)),
                max_diff=diff, **stats.as_row(), gen_graphs=len(gen_stats.graphs),
                gen_captures=gen_stats.captures, sample=tokens[0, :8].tolist())


def print_rows(rows):
    head = (f"{'rank':>4} {'mode':>15} {'model':>8} {'compile s':>9} {'eager us':>9} "
            f"{'ours us':>9} {'ratio':>6} {'tokens':>6} {'=eager':>6} {'gen=':>5} "
            f"{'graphs':>6} {'recomp':>6} {'captures':>8} {'max|diff|':>9}")
    print("\n" + head)
    for r in rows:
        cap = "n/a" if r["captures"] is None else str(r["captures"])
        print(f"{r['rank']:>4} {r['mode']:>15} {r['model']:>8} {r['compile_s']:>9.2f} "
              f"{r['eager_us']:>9.0f} {r['ours_us']:>9.0f} {r['ours_us'] / r['eager_us']:>6.2f} "
              f"{r['tokens']:>6} {str(r['same']):>6} {str(r['gen_same']):>5} "
              f"{r['graphs']:>6} {r['recompiles']:>6} {cap:>8} {r['max_diff']:>9.1e}")
    print(f"first tokens of sequence 0: {rows[0]['sample']}")
    print("compile s: the first compiled decode step (trace + compile + run); eager/ours us: "
          "median decode step; =eager: explicit StaticCache loop; gen=: model.generate with "
          "CompileConfig; captures: ACL-graph captures over all passes (n/a: GE, no capture)")


def main(argv=None):
    args = parse_args(argv)
    import_runtime(globals())
    require_torchrun("launch/demo.py")
    acl_mode = args.mode in MODES and args.mode != "max-autotune"
    if acl_mode and not args.no_emulate_capture:
        os.environ.setdefault("TORCHAIR_DIST_CPU_CAPTURE", "emulate")  # a no-op on a device
    plat, rank, world, _ = init_distributed(args.timeout)
    row = run(args, rank, world, plat)
    rows = gather_rows(row)
    if rank == 0:
        print_rows(rows)
    ok = all(r["same"] and r["gen_same"] for r in rows)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit("compiled decode tokens differ from eager on some rank")


if __name__ == "__main__":
    main()
