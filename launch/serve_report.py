"""The serving loop's side-by-side table, JSON and plot (rank 0 of ``launch/serve.py``)."""
from __future__ import annotations

import datetime
import json
import sys
from typing import Dict, List


def _fmt(value, spec, missing="n/a"):
    return missing if value is None else format(value, spec)


def _memory(row) -> str:
    if row.get("graph_bytes") is not None:
        return f"{row['graph_bytes'] / 2 ** 20:.1f} MiB"
    if row["variant"] == "eager":
        return "-"
    return "n/a"


def _captures(row, prefix: str = "") -> str:
    """The captures of the decode graphs (``prefix`` "") or the prefill graphs ("prefill_")."""
    if row["variant"] in ("eager", "inductor") or row["variant"] == "max-autotune":
        return "-"  # no ACL-graph runner: nothing in capture_report
    per_size = row.get(prefix + "captures_per_size", {})
    most = max(per_size.values(), default=0)
    per = " per piece" if any(isinstance(k, str) for k in per_size) else ""
    return f"{row[prefix + 'captures']} ({row[prefix + 'graphs']} graph, max {most}/size{per})"


def command_line(args) -> str:
    return "torchrun --nproc-per-node 2 launch/serve.py " + " ".join(sys.argv[1:])


def print_table(everything: List[Dict], args, ok: bool) -> None:
    rows = everything[0]["rows"]
    by_rank = [{r["variant"]: r for r in e["rows"]} for e in everything]
    head = (f"{'variant':<29} {'tok/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'step ms':>7} "
            f"{'prefill ms':>10} {'warm-up s':>9} {'capture s':>9} {'graph mem':>9} "
            f"{'decode captures':>34} {'prefill captures':>34} {'=eager':>6}")
    print("\n" + head)
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['variant']:<29} {r['status']}")
            continue
        same = all(b[r["variant"]].get("same_as_eager", False) for b in by_rank)
        print(f"{r['variant']:<29} {r['tokens_per_s']:>7.0f} {r['p50_ms']:>7.2f} "
              f"{r['p99_ms']:>7.2f} {r['step_p50_ms']:>7.2f} {r['prefill_p50_ms']:>10.2f} "
              f"{_fmt(r['warm_up_s'], '.1f', '-') if r['variant'] != 'eager' else '-':>9} "
              f"{_fmt(r['capture_s'], '.2f'):>9} {_memory(r):>9} {_captures(r):>34} "
              f"{_captures(r, 'prefill_'):>34} {str(same):>6}")
    ours = {r["variant"]: r for r in rows if r["status"] == "ok"}
    if "inductor" in ours:
        base = ours["inductor"]["tokens_per_s"]
        ratios = ", ".join(f"{n} {ours[n]['tokens_per_s'] / base:.2f}x" for n in ours
                           if n not in ("inductor", "eager"))
        print(f"tokens/s relative to inductor (rank 0): {ratios}")
    for r in rows:
        if r["status"] == "ok" and r.get("uncaptured"):
            print(f"{r['variant']}: uncaptured graph(s): {r['uncaptured']}")
        if r["status"] == "ok" and r.get("prefill_uncaptured"):
            print(f"{r['variant']}: uncaptured prefill graph(s): {r['prefill_uncaptured']}")
        if r["status"] != "ok" or r["variant"] == "eager":
            continue
        if r["variant"] not in ("inductor", "max-autotune"):
            print(f"{r['variant']}: decode steps per padded size {r['steps_per_size']}, first "
                  f"call per size (s) {_round(r['warm_up_per_size_s'])}")
        how = ("prompts padded to the declared sizes" if r["prefill_padded"]
               else "prompts at their own length, one dynamic graph")
        print(f"{r['variant']}: prefill ({how}): prefills per length "
              f"{dict(sorted(r['prefills_per_size'].items()))} ({r['padded_prefills']} padded), "
              f"first call per size (s) {_round(r['prefill_warm_up_per_size_s'])}, prefill "
              f"capture s {_fmt(r['prefill_capture_s'], '.2f')}, graphs compiled while serving "
              f"{r['compiled_while_serving']}")
    print("tok/s: generated tokens / wall time of the stream (prefills included), median "
          "over rounds; p50/p99: "
          "time between a request's consecutive tokens; step ms: median decode step; prefill "
          "ms: median prefill (one request, its K/V copied into its slot); warm-up: first call "
          "per declared decode size and prefill size (compile + capture); capture s / graph "
          "mem: decode and prefill graphs together, from torchair_dist.capture_report() where "
          "it reports them (n/a: not reported on this platform yet); captures: over all graph "
          "keys of the variant's decode / prefill step; =eager: every request's tokens equal "
          "eager's on every rank. Timings: rank 0.")
    print(f"every request's tokens equal eager's on every rank, at most one capture per "
          f"declared decode size and prefill size and no recapture: {ok}")


def _round(d: Dict) -> Dict:
    return {k: round(v, 2) for k, v in d.items()}


def write_json(path: str, everything: List[Dict], args) -> None:
    import torch

    with open(path, "w") as f:
        json.dump(dict(date=datetime.date.today().isoformat(), torch=torch.__version__,
                       command=command_line(args), args=vars(args), ranks=everything), f,
                  indent=1, default=str)


def throughput_and_latency(ax_t, ax_l, done: List[Dict]) -> None:
    """Per variant: tokens/s bars on ``ax_t``, p50/p99 per-token latency bars on ``ax_l``."""
    names = [r["variant"].replace("+", "+\n") for r in done]
    ax_t.bar(names, [r["tokens_per_s"] for r in done], color="tab:blue")
    ax_t.set_ylabel("tokens / s")
    ax_t.set_title("throughput")
    x = range(len(done))
    ax_l.bar([i - 0.2 for i in x], [r["p50_ms"] for r in done], 0.4, label="p50")
    ax_l.bar([i + 0.2 for i in x], [r["p99_ms"] for r in done], 0.4, label="p99")
    ax_l.set_xticks(list(x), names)
    ax_l.set_ylabel("ms between a request's tokens")
    ax_l.set_title("per-token latency")
    ax_l.legend()
    for ax in (ax_t, ax_l):
        ax.tick_params(axis="x", labelsize=7, rotation=30)


def plot(path: str, rows: List[Dict], args) -> None:
    """Per variant: tokens/s and p50/p99 per-token latency bars; graph memory against the
    number of captured sizes (where capture_report gives bytes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    done = [r for r in rows if r["status"] == "ok"]
    fig, (ax_t, ax_l, ax_m) = plt.subplots(1, 3, figsize=(16, 4.8))
    throughput_and_latency(ax_t, ax_l, done)
    plotted = False
    for r in done:
        pts = [(n, b) for n, b in r.get("memory_points", []) if b is not None]
        if pts:
            ax_m.plot([p[0] for p in pts], [p[1] / 2 ** 20 for p in pts], "o-",
                      label=r["variant"])
            plotted = True
    ax_m.set_xlabel("captured sizes (graph keys)")
    ax_m.set_ylabel("graph memory (MiB)")
    ax_m.set_title("graph memory vs captured sizes")
    if plotted:
        ax_m.legend(fontsize=7)
    else:
        ax_m.text(0.5, 0.5, "capture_report gives no graph\nmemory on this platform yet",
                  ha="center", va="center", transform=ax_m.transAxes)
    fig.suptitle(f"serving loop, Llama {args.preset}, 2 ranks, {args.requests} requests, "
                 f"capture sizes {sorted(set(args.capture_sizes))}, prefill sizes "
                 f"{args.prefill_sizes}; torch {torch.__version__}, "
                 f"{datetime.date.today().isoformat()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
