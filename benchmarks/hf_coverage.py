"""Coverage of Hugging Face decoder-only architectures on 2 ranks of transformers' own TP.

The architectures are every ``model_type`` transformers maps to a causal LM whose config class
carries a base tensor-parallel plan (``base_model_tp_plan`` set) and is not encoder-decoder,
read from transformers' auto mappings. Each is saved as a tiny random model (2 layers, hidden
64, 4 heads, 2 KV heads, vocab 128, 4 experts where MoE; no download), loaded on 2 gloo ranks
with ``from_pretrained(dir, tp_plan="auto")``, and per mode compared with eager of the same
sharded model:

  (a) the full forward, ``torch.compile(fullgraph=True)``: one frame, one graph, logits <= 1e-4
  (b) static-cache decode (eager prefill into a ``StaticCache``, compiled one-token steps with
      ``fullgraph=True``): one frame, one graph, identical tokens, logits <= 1e-4. Where the
      decode needs more than one Dynamo frame with torch's own ``eager`` backend too
      (transformers recompiles, e.g. its sliding-window cache guards on a Python int), ours
      must need the same number (no extra recompile) and the cell reads ``ok*``.

A cell reads ``ok`` or the error in one line. Where transformers' TP or the eager model fails on
gloo, the row says so and is excluded. Usage::

  python benchmarks/hf_coverage.py                       # every architecture (long)
  python benchmarks/hf_coverage.py llama qwen3_moe       # some
  python benchmarks/hf_coverage.py --list
  python benchmarks/hf_coverage.py --start 0 --count 10  # a slice of the list
  python benchmarks/hf_coverage.py --markdown            # the table as Markdown
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("", "launch", os.path.join("tests", "multicard")):
    if os.path.join(_ROOT, sub) not in sys.path:
        sys.path.insert(0, os.path.join(_ROOT, sub))

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]
MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")


def architectures() -> List[str]:
    """model_types with a causal-LM class and a config whose ``base_model_tp_plan`` is set."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        try:
            cls = CONFIG_MAPPING[model_type]
        except KeyError:
            continue
        if getattr(cls, "base_model_tp_plan", None) and not getattr(cls, "is_encoder_decoder",
                                                                     False):
            found.append(model_type)
    return sorted(found)


def kind(model_type: str) -> str:
    from hf_decode import tiny_config

    try:
        cfg = tiny_config(model_type)
    except Exception:
        return "?"
    if getattr(cfg, "is_moe", None) is False:  # e.g. Doge: expert sizes set, experts off
        return "dense"
    return "MoE" if any(getattr(cfg, f, None) for f in MOE_FIELDS) else "dense"


def run_arch(pool, model_type: str, modes: List[str], workdir: str, timeout: float,
             **sizes) -> Dict[str, object]:
    """One row: ``{"excluded": reason}`` or ``{"modes": {mode: cell}}`` (both ranks merged);
    ``sizes`` override the tiny config (e.g. ``num_hidden_layers=1``)."""
    import hf_decode
    from harness import RankFailure

    path = os.path.join(workdir, model_type)
    try:
        hf_decode.save_tiny(model_type, path, **sizes)
    except Exception as exc:
        return {"excluded": "tiny config: " + hf_decode.one_line(exc)}
    try:
        results = pool.run(hf_decode.coverage_case, path, modes, timeout=timeout)
    except RankFailure as exc:
        for r, text in sorted(exc.errors.items()):
            print(f"--- {model_type} rank {r}:\n{text}", file=sys.stderr)
        status = ", ".join(f"rank {r}: {s}" + (f" {_last_line(exc.errors[r])}"
                                                if r in exc.errors else "")
                           for r, s in sorted(exc.per_rank.items()))
        return {"modes": {m: f"failed ({status})" for m in modes}}
    excluded = [r["excluded"] for r in results if "excluded" in r]
    if excluded:
        return {"excluded": excluded[0]}
    cells: Dict[str, str] = {}
    note = next((r["decode_frames"] for r in results if "decode_frames" in r), None)
    for mode in modes:
        bad = [f"rank {i}: {r['modes'][mode]}" for i, r in enumerate(results)
               if r["modes"][mode] != "ok"]
        same = len({r["modes"][mode] for r in results}) == 1
        cells[mode] = "ok" if not bad else (results[0]["modes"][mode] if same else "; ".join(bad))
    return {"modes": cells, "note": note} if note else {"modes": cells}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def render(rows: Dict[str, Dict], kinds: Dict[str, str], modes: List[str],
           markdown: bool) -> str:
    head = ["architecture", "kind"] + modes
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    else:
        lines.append(f"{'architecture':<22} {'kind':<6} " + " | ".join(f"{m}" for m in modes))
    for arch, row in rows.items():
        if "excluded" in row:
            cells = [f"excluded: {row['excluded']}"] + [""] * (len(modes) - 1)
        else:
            mark = "*" if row.get("note") else ""
            cells = [row["modes"][m] + (mark if row["modes"][m] == "ok" else "") for m in modes]
        if markdown:
            lines.append("| " + " | ".join([arch, kinds[arch]] + cells) + " |")
        else:
            lines.append(f"{arch:<22} {kinds[arch]:<6} " + " | ".join(cells))
    notes = [f"{a}: {r['note']}" for a, r in rows.items() if r.get("note")]
    if notes:
        lines += ["", "ok*: the decode needs more than one Dynamo frame whatever the backend:"]
        lines += [f"  {n}" for n in notes]
    return "\n".join(lines)


def summary(rows: Dict[str, Dict], modes: List[str]) -> str:
    included = [r for r in rows.values() if "excluded" not in r]
    ok = {m: sum(r["modes"][m] == "ok" for r in included) for m in modes}
    return (f"{len(rows)} architectures, {len(rows) - len(included)} excluded; ok of "
            f"{len(included)}: " + ", ".join(f"{m} {ok[m]}" for m in modes))


def coverage(archs: List[str], modes: List[str], timeout: float = 300.0,
             progress=None) -> Dict[str, Dict]:
    """Run every architecture in ``archs`` on a 2-rank pool; returns rows by architecture."""
    from harness import RankPool

    rows: Dict[str, Dict] = {}
    pool = RankPool(2)
    try:
        with tempfile.TemporaryDirectory(prefix="hf_coverage_") as workdir:
            for arch in archs:
                t0 = time.perf_counter()
                rows[arch] = run_arch(pool, arch, modes, workdir, timeout)
                if progress:
                    progress(arch, rows[arch], time.perf_counter() - t0)
    finally:
        pool.shutdown()
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archs", nargs="*", help="model_types (default: every one found)")
    p.add_argument("--list", action="store_true", help="print the architectures and exit")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=None)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per architecture")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    found = architectures()
    if args.list:
        print("\n".join(f"{a} ({kind(a)})" for a in found))
        print(f"{len(found)} architectures")
        return 0
    unknown = [a for a in args.archs if a not in found]
    if unknown:
        p.error(f"not a decoder-only architecture with a base TP plan: {', '.join(unknown)}")
    archs = args.archs or found
    archs = archs[args.start:None if args.count is None else args.start + args.count]
    modes = args.modes.split(",")

    def progress(arch, row, seconds):
        print(f"  {arch}: {row!r} ({seconds:.0f}s)", flush=True)

    print(f"{len(archs)} of {len(found)} architectures x {modes} on 2 gloo ranks", flush=True)
    rows = coverage(archs, modes, args.timeout, progress)
    kinds = {a: kind(a) for a in rows}
    print()
    print(render(rows, kinds, modes, args.markdown))
    print(summary(rows, modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
