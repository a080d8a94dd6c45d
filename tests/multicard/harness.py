"""Multi-process rank harness for the multicard tests.

A :class:`RankPool` spawns ``world_size`` local processes (``spawn`` start method), each of which
joins one gloo process group on 127.0.0.1 (a free port) and then waits for work. ``pool.run(fn,
*args)`` pickles ``fn`` (a *module-level* function of the test file) and calls
``fn(rank, world_size, *args)`` on every rank, returning the per-rank results as a list. The pool
lives as long as the test module (see ``conftest.py``: fixtures ``ranks2`` and ``ranks4``).

Failures are loud and bounded:

* an exception on any rank raises :class:`RankFailure` carrying that rank's traceback;
* a rank that dies (killed, segfault, ``os._exit``) is reported with its exit code and log tail;
* a call that does not finish within ``timeout`` seconds (default 120) is a hang: every rank still
  running is sent ``SIGUSR1`` and dumps all its Python threads' stacks (``faulthandler``) to a
  per-rank file, which the parent collects into the failure message;
* once one rank failed, the others get ``failure_grace`` seconds to finish (or fail) on their own
  before they too are dumped, so the message shows what every rank was doing.

After any failure the pool is torn down (processes killed) and transparently respawned by the next
``run``, so one broken case never poisons the next. Workers set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
before importing torch and ``torch.set_num_threads(1)``; each rank's stdout/stderr go to
``<workdir>/rank<r>.log`` (the tail is shown on failure).
"""
from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import wait as mp_wait
from typing import Any, Callable, Dict, List, Optional

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_FAILURE_GRACE_S = 15.0
DEFAULT_PG_TIMEOUT_S = 60.0
_START_TIMEOUT_S = 180.0  # importing torch in 4 processes on 2 busy cores is slow
_DUMP_WAIT_S = 3.0
_LOG_TAIL_CHARS = 3000


class RankFailure(AssertionError):
    """A ``RankPool.run`` call failed on at least one rank.

    ``per_rank`` maps every rank to a short status (``"ok"``, ``"raised"``, ``"died (exit -9)"``,
    ``"hung"``); ``errors`` maps failed ranks to their traceback text / stack dump; ``results``
    holds the return values of the ranks that did finish.
    """

    def __init__(self, message: str, per_rank: Dict[int, str], errors: Dict[int, str],
                 results: Optional[Dict[int, Any]] = None):
        super().__init__(message)
        self.per_rank = per_rank
        self.errors = errors
        self.results = results or {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------- worker side
def _worker_main(rank: int, world_size: int, port: int, workdir: str, pg_timeout_s: float,
                 conn) -> None:
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    log = open(os.path.join(workdir, f"rank{rank}.log"), "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(file=log, all_threads=True)
    stack_file = open(os.path.join(workdir, f"rank{rank}.stack"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)

    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout_s))
        conn.send_bytes(pickle.dumps(("ready", None)))
    except BaseException:
        conn.send_bytes(pickle.dumps(("err", traceback.format_exc())))
        return
    while True:
        try:
            task = conn.recv_bytes()
        except EOFError:
            break
        if task == b"stop":
            break
        try:
            fn, args = pickle.loads(task)
            reply = ("ok", fn(rank, world_size, *args))
            payload = pickle.dumps(reply)
        except BaseException:
            payload = pickle.dumps(("err", traceback.format_exc()))
        sys.stdout.flush()
        conn.send_bytes(payload)
    conn.close()
    sys.stdout.flush()
    os._exit(0)  # skip gloo teardown: it can block on peers that are already gone


# --------------------------------------------------------------------------------- parent side
class RankPool:
    """``world_size`` gloo ranks kept alive across calls; see the module docstring."""

    def __init__(self, world_size: int, *, pg_timeout_s: float = DEFAULT_PG_TIMEOUT_S):
        self.world_size = world_size
        self.pg_timeout_s = pg_timeout_s
        self._procs: List[Any] = []
        self._conns: List[Any] = []
        self._workdir: Optional[str] = None
        self.generation = 0  # bumped at each (re)start; tests may assert reuse with it

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    def start(self) -> None:
        if self.alive:
            return
        self.shutdown()
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        ctx = mp.get_context("spawn")
        self._workdir = tempfile.mkdtemp(prefix=f"ranks{self.world_size}_")
        port = free_port()
        for rank in range(self.world_size):
            parent_conn, child_conn = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, name=f"rank{rank}", daemon=True,
                               args=(rank, self.world_size, port, self._workdir,
                                     self.pg_timeout_s, child_conn))
            proc.start()
            child_conn.close()
            self._procs.append(proc)
            self._conns.append(parent_conn)
        self.generation += 1
        self._collect("<process group start-up>", _START_TIMEOUT_S, DEFAULT_FAILURE_GRACE_S)

    def shutdown(self, *, kill: bool = False) -> None:
        """Stop the ranks (politely unless ``kill``), then remove the work directory."""
        if not kill:
            for conn in self._conns:
                try:
                    conn.send_bytes(b"stop")
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 5
            for proc in self._procs:
                proc.join(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- calls ---------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float = DEFAULT_TIMEOUT_S,
            failure_grace: float = DEFAULT_FAILURE_GRACE_S) -> List[Any]:
        """``[fn(0, ws, *args), ..., fn(ws-1, ws, *args)]``, each computed on its own rank."""
        self.start()
        task = pickle.dumps((fn, args))
        for conn in self._conns:
            conn.send_bytes(task)
        return self._collect(getattr(fn, "__name__", repr(fn)), timeout, failure_grace)

    def _collect(self, what: str, timeout: float, failure_grace: float) -> List[Any]:
        start = time.monotonic()
        deadline = start + timeout
        pending = set(range(self.world_size))
        results: Dict[int, Any] = {}
        status: Dict[int, str] = {}
        errors: Dict[int, str] = {}
        by_handle = {}
        for r in pending:
            by_handle[self._conns[r]] = r
            by_handle[self._procs[r].sentinel] = r
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            handles = [h for h, r in by_handle.items() if r in pending]
            for h in mp_wait(handles, timeout=deadline - now):
                r = by_handle[h]
                if r not in pending:
                    continue
                reply = self._receive(r)
                if reply is None:
                    continue  # the sentinel fired first but the pipe still has data: next round
                pending.discard(r)
                kind, value = reply
                if kind in ("ok", "ready"):
                    results[r], status[r] = value, "ok"
                elif kind == "err":
                    status[r], errors[r] = "raised", value
                else:
                    status[r] = f"died (exit code {value})"
                    errors[r] = f"rank {r} process exited with code {value}\n" + self._log_tail(r)
            if errors and pending:
                deadline = min(deadline, time.monotonic() + failure_grace)
        if not pending and not errors:
            return [results[r] for r in range(self.world_size)]
        self._dump_stacks(pending, status, errors)
        elapsed = time.monotonic() - start
        self.shutdown(kill=True)
        raise RankFailure(self._message(what, elapsed, timeout, status, errors), status, errors,
                          results)

    def _receive(self, r: int):
        """The rank's reply, ``("died", exitcode)`` when its pipe closed, None if nothing yet."""
        conn = self._conns[r]
        try:
            if conn.poll():
                return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            pass
        else:
            if self._procs[r].is_alive():
                return None
        self._procs[r].join(timeout=5)
        return ("died", self._procs[r].exitcode)

    # -- failure reporting ---------------------------------------------------------------
    def _dump_stacks(self, pending, status, errors) -> None:
        """SIGUSR1 every rank still running; faulthandler's C-level handler writes its stacks
        even while the rank is blocked inside a gloo call."""
        for r in pending:
            if self._procs[r].is_alive():
                os.kill(self._procs[r].pid, signal.SIGUSR1)
        end, sizes = time.monotonic() + _DUMP_WAIT_S, None
        while time.monotonic() < end:  # until every dump is written and no longer growing
            time.sleep(0.2)
            now = [len(self._read(f"rank{r}.stack")) for r in sorted(pending)]
            if all(now) and now == sizes:
                break
            sizes = now
        for r in sorted(pending):
            status[r] = "hung"
            errors[r] = ("rank %d did not finish; its Python stacks (faulthandler):\n%s\n%s"
                         % (r, self._read(f"rank{r}.stack") or "<no stack dump>",
                            self._log_tail(r)))

    def _message(self, what, elapsed, timeout, status, errors) -> str:
        lines = [f"{what} failed on {self.world_size} ranks after {elapsed:.1f}s "
                 f"(timeout {timeout:.0f}s): "
                 + ", ".join(f"rank {r}: {status.get(r, '?')}" for r in range(self.world_size))]
        for r in sorted(errors):
            lines.append(f"\n===================== rank {r} ({status[r]}) =====================")
            lines.append(errors[r].rstrip())
        return "\n".join(lines)

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self._workdir or "", name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _log_tail(self, r: int) -> str:
        tail = self._read(f"rank{r}.log")[-_LOG_TAIL_CHARS:]
        return f"--- rank {r} log tail ---\n{tail}" if tail.strip() else ""
