"""Shared set-up for the torchrun entry scripts: platform, process group, timing helpers."""
from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
from typing import Callable, List

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from torchair_dist import platform  # noqa: E402

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def require_torchrun(script: str) -> None:
    """Exit with a clear message when the script was not started by torchrun."""
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        sys.stderr.write(
            f"{script} must be launched with torchrun (missing {', '.join(missing)}), e.g.\n"
            f"  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 "
            f"{script}\n")
        raise SystemExit(2)


def init_distributed(timeout_s: int = 120):
    """Pick the platform, bind the local device, init the process group; returns
    (platform, rank, world_size, device)."""
    plat = platform.current()
    local_rank = int(os.environ["LOCAL_RANK"])
    plat.set_device(local_rank)
    if plat.runs_on_host:
        torch.set_num_threads(max(1, (os.cpu_count() or 1)
                                  // int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))))
    dist.init_process_group(plat.dist_backend, timeout=datetime.timedelta(seconds=timeout_s))
    return plat, dist.get_rank(), dist.get_world_size(), plat.device(local_rank)


def time_steps(step: Callable[[], object], plat, steps: int, warmup: int = 5) -> List[float]:
    """Per-step wall times in seconds (device-synchronised), after ``warmup`` untimed steps.
    Ranks are barrier-aligned before each step so a step measures the same work on all."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        dist.barrier()
        plat.synchronize()
        t0 = time.perf_counter()
        step()
        plat.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def median_us(times: List[float]) -> float:
    return statistics.median(times) * 1e6


def gather_rows(row: dict) -> List[dict]:
    """Every rank's row on every rank (rank order)."""
    rows: List[dict] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(rows, row)
    return rows
