"""Shared-memory collectives for CPU graphs whose ranks share one host
(``distributed_config.cpu_shm_collectives``).

gloo moves every collective through its own worker threads and TCP loopback, so on one host a
small ``all_reduce`` costs several thread hand-offs (hundreds of microseconds on a loaded 2-core
machine). When every rank of a group runs on this host, the compiled graph can exchange through
one shared-memory segment instead: each rank writes its data into its own slot, publishes a
sequence number, waits until every rank of the group has published the same one, and reads the
others' slots. This module is that transport; :mod:`.shm_graph` points a graph's collectives
at it.

What it covers (everything else stays on gloo):

* ``all_reduce`` (in place or not) with ``sum``/``max``/``min``/``product``; every rank folds
  the slots in group-rank order, so every rank gets the same bits. With two ranks that equals
  gloo's result exactly; with more, gloo's ring adds in another order and the last bits may
  differ (as they do between gloo and NCCL).
* ``all_to_all`` with equal pieces (``all_to_all_single`` without split sizes, as decode's
  fixed-capacity dispatch uses it).
* dtypes float16/bfloat16/float32/float64/int8/uint8/int16/int32/int64; any size (larger
  tensors go through the slots in chunks).

The segment is set up on the group's first shared-memory collective, through the group itself
(one broadcast, one or two all-gathers), so every rank decides alike: if any rank cannot map it (no
``/dev/shm``, another host, not x86-64, whose store order the protocol relies on) the whole
group stays on gloo and a warning says why. Rank 0 creates the file, every rank maps it, then
it is unlinked: once set up, nothing is left in ``/dev/shm`` even if a process dies.

A wait polls the peers' sequence numbers, yielding the CPU between polls (then sleeping in
20 us steps). While it waits for a peer, every 0.2 s it looks at that peer: one that published a
failure (:mod:`torchair_dist.collectives.failures`) raises :class:`PeerFailedError` with its error; one whose process has
exited (when this process can see it: a peer in another PID namespace is only timed out), or
that has not arrived within the group's own timeout (what gloo would wait;
``TORCHAIR_DIST_SHM_TIMEOUT`` seconds overrides it), raises :class:`CollectiveFaultError` naming
it.
"""
from __future__ import annotations

import logging
import mmap
import os
import platform as _pyplatform
import socket
import struct
import time
import uuid
import warnings
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from ..collectives import failures, groups, spec
from ..collectives import ops as _ops
from ..errors import CollectiveFaultError, PeerFailedError

log = logging.getLogger("torchair_dist")

# bytes per rank and bank; larger tensors go through in chunks (set before a group's first use)
SLOT_BYTES = int(os.environ.get("TORCHAIR_DIST_SHM_SLOT_BYTES", 1 << 20))
TIMEOUT_ENV = "TORCHAIR_DIST_SHM_TIMEOUT"
_LINE = 64                     # one cache line per rank's sequence number
_MAGIC = 0x7464736d            # "tdsm"
_NONCE_AT = 4                  # rank 0's line: seq, pid, two votes, then the setup nonce
DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                    torch.uint8, torch.int16, torch.int32, torch.int64})
REDUCE_OPS = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum,
              "product": torch.mul, "prod": torch.mul}


def _unavailable_reason() -> Optional[str]:
    """Why this process cannot use the transport at all (None: it can)."""
    if _pyplatform.machine().lower() not in ("x86_64", "amd64"):
        return (f"the protocol relies on x86-64 store ordering; this is "
                f"{_pyplatform.machine()}")
    if not os.path.isdir("/dev/shm"):
        return "no /dev/shm"
    return None


unavailable_reason = _unavailable_reason   # tests replace it to play a rank that cannot


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


class Channel:
    """One group's segment: a header (per-rank sequence numbers and pids) and two banks of
    per-rank slots used alternately, so a rank may write the next exchange while a slower
    peer still reads the previous one (it cannot get two ahead: it waits for everyone)."""

    def __init__(self, mm: mmap.mmap, rank: int, world: int, ranks: List[int], name: str,
                 slot: int, timeout: float = 300.0, watch: Optional[List[bool]] = None):
        self.rank, self.world, self.ranks, self.name, self.slot = rank, world, ranks, name, slot
        self._mm = mm
        self._words = memoryview(mm).cast("q")          # int64 view of the whole segment
        self._seq_at = [r * _LINE // 8 for r in range(world)]
        self._pid_at = [r * _LINE // 8 + 1 for r in range(world)]
        # one vote word per bank: a rank that already votes on the next exchange must not
        # change the vote a slower peer is still reading
        self._vote_at = [[r * _LINE // 8 + 2 + b for r in range(world)] for b in range(2)]
        header = world * _LINE
        data = torch.frombuffer(mm, dtype=torch.uint8)[header:]
        self._banks = [data[b * world * slot:(b + 1) * world * slot].view(world, slot)
                       for b in range(2)]
        self.seq = self._words[self._seq_at[rank]]   # exchanges so far (see exchanges())
        self.timeout = timeout
        # peers whose process this one can see (another PID namespace: the timeout only)
        self._watch = watch if watch is not None else [True] * world

    # -- protocol ---------------------------------------------------------------------------
    def _publish_and_wait(self) -> torch.Tensor:
        """Publish this rank's next sequence number, wait for every peer's, return the bank
        this exchange uses (shape [world, slot])."""
        self.seq += 1
        seq, words = self.seq, self._words
        words[self._seq_at[self.rank]] = seq
        for i, at in enumerate(self._seq_at):
            if words[at] < seq:
                self._wait_for(i, at, seq)
        return self._banks[seq & 1]

    def _wait_for(self, peer: int, at: int, seq: int) -> None:
        words, yield_ = self._words, os.sched_yield
        for _ in range(256):
            if words[at] >= seq:
                return
            yield_()
        start = last_check = time.monotonic()
        sleep = time.sleep
        while words[at] < seq:
            sleep(2e-5)   # a slow peer (compute, or more ranks than cores): give the CPU away
            now = time.monotonic()
            if now - last_check > 0.2:
                last_check = now
                self._check_alive(peer, seq, now - start)

    def _check_alive(self, peer: int, seq: int, waited: float) -> None:
        records = failures.failed_peers([self.ranks[peer]])
        if records:
            raise PeerFailedError(f"shared-memory collective #{seq} of group {self.name}: "
                                  f"{failures.describe(records)}")
        pid = self._words[self._pid_at[peer]]
        alive = not self._watch[peer] or _process_exists(pid)
        if not alive or waited > self.timeout:
            why = (f"its process (pid {pid}) has exited" if not alive else
                   f"it did not arrive within {self.timeout:g} s (the group timeout; "
                   f"{TIMEOUT_ENV} overrides it)")
            raise CollectiveFaultError(
                f"shared-memory collective #{seq} of group {self.name}: rank "
                f"{self.ranks[peer]} never reached it: {why}")

    # -- collectives --------------------------------------------------------------------------
    def all_reduce_(self, x: torch.Tensor, reduce_op: str) -> torch.Tensor:
        fold = REDUCE_OPS[reduce_op]
        if self.world == 1:
            return x
        flat = x.view(-1) if x.is_contiguous() else x.contiguous().view(-1)
        step = self.slot // x.element_size()
        for start in range(0, flat.numel(), step):
            piece = flat[start:start + step]
            nbytes = piece.numel() * x.element_size()
            bank = self._banks[(self.seq + 1) & 1]
            bank[self.rank, :nbytes].view(x.dtype).copy_(piece)
            bank = self._publish_and_wait()
            slots = bank[:, :nbytes].view(x.dtype)
            fold(slots[0], slots[1], out=piece)
            for r in range(2, self.world):
                fold(piece, slots[r], out=piece)
        if flat.data_ptr() != x.data_ptr() or not x.is_contiguous():
            x.copy_(flat.view(x.shape))
        return x

    def all_to_all(self, x: torch.Tensor, eligible: bool) -> Optional[torch.Tensor]:
        """Equal pieces: piece r of ``x`` (flattened) goes to group rank r; the result holds
        piece i from rank i, in the shape of ``x``. ``eligible``: this rank's pieces are
        equal and packed. The ranks vote in the first exchange: unless every rank is
        eligible (then every piece has the same size everywhere), every rank returns None
        and the caller uses gloo, so all ranks take the same path."""
        world, es = self.world, x.element_size()
        src = x.contiguous().view(world, -1) if eligible else None
        count = src.shape[1] if eligible else 0
        step = max(1, self.slot // (es * world))
        out = dst = None
        start = 0
        while True:
            n = min(step, count - start)
            parity = (self.seq + 1) & 1
            bank = self._banks[parity]
            if eligible:
                bank[self.rank, :world * n * es].view(x.dtype).view(world, n).copy_(
                    src[:, start:start + n])
            self._words[self._vote_at[parity][self.rank]] = 1 if eligible else 0
            bank = self._publish_and_wait()
            if start == 0:
                if not all(self._words[at] for at in self._vote_at[parity]):
                    return None
                out = torch.empty_like(x, memory_format=torch.contiguous_format)
                dst = out.view(world, -1)
            me = self.rank * n * es
            dst[:, start:start + n].copy_(bank[:, me:me + n * es].view(x.dtype))
            start += n
            if start >= count:
                return out


# -- setup, one channel per group ------------------------------------------------------------
# group name as the graph spells it -> (process group, its channel or None); channels are
# made per process group (two spellings of one group share it), and a re-created group gets
# a new one
_channels: Dict[str, tuple] = {}
_by_group: Dict[str, tuple] = {}   # stable group name -> (process group, channel or None)


def channel(group_name: str) -> Optional[Channel]:
    """The group's channel, set up on first use through the group (every rank of it must call
    this at the same point, as a collective); None when the group stays on gloo."""
    known = _channels.get(group_name)
    if known is not None and known[0] in _c10d._world.pg_map:  # its group is still alive
        return known[1]
    pg = groups.to_process_group(group_name)
    name = groups.stable_name_of(pg)
    made = _by_group.get(name)
    if made is None or made[0] is not pg:
        made = (pg, _setup(pg, dist.get_process_group_ranks(pg), name))
        _by_group[name] = made
    _channels[group_name] = made
    return made[1]


def segment_bytes(world: int, slot: int) -> int:
    return world * _LINE + 2 * world * slot


def _setup(pg, ranks: List[int], name: str) -> Optional[Channel]:
    world, rank, slot = len(ranks), dist.get_rank(pg), max(64, SLOT_BYTES // 64 * 64)
    size = segment_bytes(world, slot)
    reason = unavailable_reason()
    offer = [None, None, _host_id()]
    path = None
    if rank == 0 and reason is None:
        path = f"/dev/shm/torchair_dist_{uuid.uuid4().hex}"
        try:
            with open(path, "wb") as f:
                # allocated now: a full /dev/shm fails here, not with SIGBUS on a later write
                os.posix_fallocate(f.fileno(), 0, size)
            offer[:2] = [path, uuid.uuid4().int & 0x7FFFFFFF]
        except OSError as exc:
            reason = f"cannot create a {size}-byte segment in /dev/shm: {exc}"
            try:
                os.unlink(path)
            except OSError:
                pass
            path = None
    dist.broadcast_object_list(offer, group=pg, group_src=0)
    path, nonce, host = offer
    mm = None
    if reason is None and path is None:
        reason = "rank 0 could not create the segment"
    elif reason is None and host != _host_id():
        reason = "not on the same host as rank 0"
    if reason is None:
        try:
            with open(path, "r+b") as f:
                mm = mmap.mmap(f.fileno(), size)
        except OSError as exc:
            reason = f"cannot map {path}: {exc}"
    if mm is not None:
        struct.pack_into("q", mm, rank * _LINE + 8, os.getpid())  # for peers' liveness checks
        if rank == 0:
            struct.pack_into("q", mm, _NONCE_AT * 8, _MAGIC ^ nonce)
    verdicts: List[Optional[str]] = [None] * world
    dist.all_gather_object(verdicts, reason, group=pg)
    if mm is not None and all(v is None for v in verdicts):
        # Everyone mapped it: does everyone see rank 0's nonce (the same memory)?
        seen = struct.unpack_from("q", mm, _NONCE_AT * 8)[0] == _MAGIC ^ nonce
        dist.all_gather_object(verdicts, None if seen else "does not see rank 0's segment",
                               group=pg)
    if rank == 0 and path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass
    failed = {ranks[i]: v for i, v in enumerate(verdicts) if v is not None}
    if failed:
        if mm is not None:
            mm.close()
        warnings.warn(f"torchair_dist: distributed_config.cpu_shm_collectives: group {name} "
                      f"stays on gloo: " + "; ".join(f"rank {r}: {v}" for r, v in
                                                      sorted(failed.items())),
                      RuntimeWarning, stacklevel=2)
        return None
    pids = [struct.unpack_from("q", mm, r * _LINE + 8)[0] for r in range(world)]
    watch = [_process_exists(pid) for pid in pids]
    log.debug("shared-memory channel for group %s: %d ranks, %d bytes, peers watched: %s",
              name, world, size, watch)
    return Channel(mm, rank, world, ranks, name, slot, _timeout_of(pg), watch)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # exists, owned by someone else
        return True
    return True


def _timeout_of(pg) -> float:
    """``TORCHAIR_DIST_SHM_TIMEOUT`` seconds, else the group's own timeout (what gloo would
    wait), else 300 s."""
    if os.environ.get(TIMEOUT_ENV):
        return float(os.environ[TIMEOUT_ENV])
    try:
        return pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except Exception:  # noqa: BLE001 - a backend without options: the default
        return 300.0


def exchanges(group_name: str) -> Optional[int]:
    """How many exchanges the group's channel made (None: no channel, the group is on gloo
    or has not run a shared-memory collective yet)."""
    known = _by_group.get(groups.stable_name_of(groups.to_process_group(group_name)))
    return None if known is None or known[1] is None else known[1].seq


def reset() -> None:
    """Forget every channel (process groups were destroyed)."""
    _channels.clear()
    _by_group.clear()


# -- the kernels of the torchair_dist::shm_* ops (registered by .ops) -----------------------
def all_reduce_(x: torch.Tensor, reduce_op: str, group_name: str) -> torch.Tensor:
    """In-place all_reduce over the group's channel; gloo where the group has none."""
    ch = channel(group_name)
    if ch is None or x.dtype not in DTYPES or x.device.type != "cpu":
        dist.all_reduce(x, spec.DIST_REDUCE_OPS[reduce_op], group=groups.to_process_group(group_name))
        return x
    return ch.all_reduce_(x, reduce_op)


def all_to_all_v(x, send_counts, send_displacements, recv_counts, recv_displacements,
                 group_name: str) -> torch.Tensor:
    """``torchair_dist::all_to_all_v`` (counts in elements of the flattened tensors): over
    the channel when every rank's pieces are equal and packed, else the op's gloo kernel."""
    ch = channel(group_name)
    if ch is not None:
        sc, rc = [int(c) for c in send_counts], [int(c) for c in recv_counts]
        eligible = (x.dtype in DTYPES and x.device.type == "cpu" and len(set(sc)) <= 1
                    and sc == rc and sum(sc) == x.numel() and len(sc) == ch.world
                    and _ops._is_packed(sc, send_displacements)
                    and _ops._is_packed(rc, recv_displacements))
        out = ch.all_to_all(x, eligible)
        if out is not None:
            return out
    result = _ops.op("all_to_all_v")(x, send_counts, send_displacements, recv_counts,
                                     recv_displacements, group_name)
    return torch.ops._c10d_functional.wait_tensor(result)
