"""Command-line pieces shared by the launch scripts. Imports nothing heavy, so ``--help``
answers at once; torch and the library are imported by :func:`import_runtime` afterwards."""
from __future__ import annotations

import argparse

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]


def base_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the options every launch script has: mode, model size, cache, timeout."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--mode", default="npugraph_ex", choices=MODES, help="CompilerConfig.mode")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--cache-dir", default=None,
                   help="compile through torchair_dist.cache_compile with this cache directory "
                        "(a second run starts warm)")
    p.add_argument("--timeout", type=int, default=120, help="process-group timeout (s)")
    return p


def import_runtime(namespace: dict) -> None:
    """Import torch, torch.distributed, torchair_dist and the helpers of ``common`` into
    ``namespace`` (a script's ``globals()``)."""
    import torch
    import torch.distributed as dist

    import common
    import torchair_dist

    namespace.update(torch=torch, dist=dist, torchair_dist=torchair_dist,
                     gather_rows=common.gather_rows, init_distributed=common.init_distributed,
                     median_us=common.median_us, require_torchrun=common.require_torchrun,
                     time_steps=common.time_steps)
