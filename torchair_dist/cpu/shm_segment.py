"""The shared-memory transport's segment: its layout, its set-up through the process group, and
what protects it (:mod:`.shm` is the exchange protocol over it; its docstring says what is
protected and why).

Layout: a header of one 64-byte line per rank (word 0: its sequence number, 1: its pid — with
thread ranks, torch's threaded process group, the Linux thread id of the rank's thread, so a
peer sees a rank's thread end as it sees a process exit —, 2-3: its votes, 5-6: what it sends in
bank 0 / 1, 7: its give-up mark; rank 0's word 4: the set-up nonce),
then two banks of one slot per rank.
"""
from __future__ import annotations

import logging
import mmap
import os
import platform as _pyplatform
import socket
import stat
import struct
import threading
import uuid
import warnings
from typing import List, NamedTuple, Optional

import torch
import torch.distributed as dist

from ..base.envvars import env_int, env_seconds
from ..base.util import ranks_are_threads
from ..errors import CollectiveFaultError, CollectiveMismatchError

log = logging.getLogger("torchair_dist")

# bytes per rank and bank; larger tensors go through in chunks (read at a group's first use;
# every rank of the group must use the same value, checked at setup)
SLOT_ENV = "TORCHAIR_DIST_SHM_SLOT_BYTES"
DEFAULT_SLOT_BYTES = 1 << 20
TIMEOUT_ENV = "TORCHAIR_DIST_SHM_TIMEOUT"
LINE = 64                      # one cache line per rank: 8 int64 words
# the words of a rank's line (the module docstring's layout; the protocol in :mod:`.shm`)
SEQ_WORD, PID_WORD, VOTE_WORD, NONCE_WORD, META_WORD, GAVE_UP_WORD = 0, 1, 2, 4, 5, 7
_MAGIC = 0x7464736d            # "tdsm"
SEGMENT_PREFIX = "/dev/shm/torchair_dist_"


class Mapped(NamedTuple):
    """A group's segment, mapped on this rank."""
    mm: mmap.mmap
    rank: int                  # this process's rank in the group
    world: int
    slot: int                  # bytes per rank and bank
    timeout: float             # seconds a wait gives a peer
    watch: List[bool]          # peers whose process this one can see
    threads: bool = False      # the ranks are threads of one process: word 1 holds thread ids


def slot_bytes() -> int:
    """``TORCHAIR_DIST_SHM_SLOT_BYTES`` rounded down to a multiple of 64 (default 1 MiB)."""
    return env_int(SLOT_ENV, DEFAULT_SLOT_BYTES, minimum=64) // 64 * 64


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


def word(rank: int, field: int) -> int:
    """Index of ``field`` (one of the ``*_WORD``) of ``rank``'s line in the int64 header."""
    return rank * LINE // 8 + field


def segment_bytes(world: int, slot: int) -> int:
    return world * LINE + 2 * world * slot


def _agree_on_parameters(pg, ranks: List[int], name: str) -> int:
    """Every rank reads its parameters of the exchange (``TORCHAIR_DIST_SHM_SLOT_BYTES``,
    ``TORCHAIR_DIST_SHM_TIMEOUT``) and the ranks compare them: a bad value on any rank is a
    ``ConfigError`` on every rank, a disagreement a ``CollectiveMismatchError`` on every rank
    (naming each rank's values). Returns the slot size."""
    from ..errors import ConfigError

    try:
        mine: object = {"slot bytes": slot_bytes(), "timeout": env_seconds(TIMEOUT_ENV)}
    except ConfigError as exc:
        mine = f"error: {exc}"
    everyone: List[object] = [None] * len(ranks)
    dist.all_gather_object(everyone, mine, group=pg)
    bad = {ranks[i]: v for i, v in enumerate(everyone) if isinstance(v, str)}
    if bad:
        raise ConfigError(f"shared-memory collectives of group {name}: " + "; ".join(
            f"rank {r}: {v[len('error: '):]}" for r, v in sorted(bad.items())))
    if any(v != everyone[0] for v in everyone):
        raise CollectiveMismatchError(
            f"shared-memory collectives of group {name}: the ranks read different settings "
            f"({SLOT_ENV} / {TIMEOUT_ENV}): " + "; ".join(
                f"rank {ranks[i]}: {v}" for i, v in enumerate(everyone))
            + ". Start every rank with the same environment.")
    return mine["slot bytes"]  # type: ignore[index]


def _create_segment(size: int):
    """Rank 0's segment: a new file (``O_EXCL|O_NOFOLLOW``: an existing name or a planted link
    is never opened), mode 0600 whatever the umask, its space allocated now (a full /dev/shm
    fails here, not with SIGBUS later). Returns (path, mmap)."""
    path = f"{SEGMENT_PREFIX}{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.posix_fallocate(fd, 0, size)
        return path, mmap.mmap(fd, size)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


class _Refused(Exception):
    """The named segment is not one this job made: never mapped, an error on every rank."""


def _open_segment(path: str, size: int) -> mmap.mmap:
    """A peer's mapping of rank 0's segment: the path must be one we make, and the file a
    regular file of this process's user, mode 0600, of the expected size (checked on the open
    descriptor, ``O_NOFOLLOW``: no link is followed)."""
    tail = path[len(SEGMENT_PREFIX):]
    if not path.startswith(SEGMENT_PREFIX) or len(tail) != 32 or \
            any(c not in "0123456789abcdef" for c in tail):
        raise _Refused(f"{path!r} is not a segment name this library makes")
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        problems = []
        if not stat.S_ISREG(st.st_mode):
            problems.append("not a regular file")
        if st.st_uid != os.geteuid():
            problems.append(f"owned by uid {st.st_uid}, not this job's uid {os.geteuid()}")
        if stat.S_IMODE(st.st_mode) != 0o600:
            problems.append(f"mode {stat.S_IMODE(st.st_mode):o}, not 600")
        if st.st_size != size:
            problems.append(f"{st.st_size} bytes, not {size}")
        if problems:
            raise _Refused(f"{path} is not this job's segment: {', '.join(problems)}")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def map_group(pg, ranks: List[int], name: str) -> Optional[Mapped]:
    """Map one segment on every rank of the group (every rank calls this at the same point); None
    when the group stays on gloo (a warning says why). The segment is unlinked on every path:
    once every rank has mapped it, and on any failure, a peer's death during set-up included."""
    slot = _agree_on_parameters(pg, ranks, name)
    threads = ranks_are_threads()
    world, rank = len(ranks), dist.get_rank(pg)
    size = segment_bytes(world, slot)
    reason = unavailable_reason()
    path = mm = None
    refused: Optional[str] = None
    try:
        offer = [None, None, _host_id(), None]
        if rank == 0 and reason is None:
            try:
                path, mm = _create_segment(size)
                offer[:2] = [path, uuid.uuid4().int & 0x7FFFFFFF]
            except (FileExistsError, IsADirectoryError) as exc:
                offer[3] = f"the new segment's name is taken ({exc}): refusing to open it"
            except OSError as exc:
                reason = f"cannot create a {size}-byte segment in /dev/shm: {exc}"
        dist.broadcast_object_list(offer, group=pg, group_src=0)
        seg, nonce, host, refused = offer
        if refused is None and reason is None and seg is None:
            reason = "rank 0 could not create the segment"
        elif refused is None and reason is None and host != _host_id():
            reason = "not on the same host as rank 0"
        if refused is None and reason is None and rank != 0:
            try:
                mm = _open_segment(seg, size)
            except _Refused as exc:
                refused = str(exc)
            except OSError as exc:
                reason = f"cannot map {seg}: {exc}"
        if mm is not None:
            # for peers' liveness: this rank's process, or its thread when ranks are threads
            struct.pack_into("q", mm, word(rank, PID_WORD) * 8,
                             threading.get_native_id() if threads else os.getpid())
            if rank == 0:
                struct.pack_into("q", mm, word(0, NONCE_WORD) * 8, _MAGIC ^ nonce)
        verdicts: List[object] = [None] * world
        dist.all_gather_object(verdicts, ("refused", refused) if refused else reason,
                               group=pg)
        if mm is not None and all(v is None for v in verdicts):
            # Everyone mapped it: does everyone see rank 0's nonce (the same memory)?
            seen = struct.unpack_from("q", mm, word(0, NONCE_WORD) * 8)[0] == _MAGIC ^ nonce
            dist.all_gather_object(verdicts, None if seen else "does not see rank 0's segment",
                                   group=pg)
    except BaseException:
        if mm is not None:
            mm.close()
        raise
    finally:
        if path is not None:  # rank 0: nothing stays in /dev/shm, whatever happened
            try:
                os.unlink(path)
            except OSError:
                pass
    refusals = {ranks[i]: v[1] for i, v in enumerate(verdicts) if isinstance(v, tuple)}
    failed = {ranks[i]: v for i, v in enumerate(verdicts) if isinstance(v, str)}
    if refusals or failed:
        if mm is not None:
            mm.close()
    if refusals:
        raise CollectiveFaultError(
            f"shared-memory collectives of group {name}: refused to map the segment: "
            + "; ".join(f"rank {r}: {v}" for r, v in sorted(refusals.items()))
            + ". Another process may be tampering with /dev/shm; set "
            "distributed_config.cpu_shm_collectives=False to keep every collective on gloo.")
    if failed:
        warnings.warn(f"torchair_dist: distributed_config.cpu_shm_collectives: group {name} "
                      f"stays on gloo: " + "; ".join(f"rank {r}: {v}" for r, v in
                                                      sorted(failed.items())),
                      RuntimeWarning, stacklevel=2)
        return None
    pids = [struct.unpack_from("q", mm, word(r, PID_WORD) * 8)[0] for r in range(world)]
    watch = [process_exists(pid) for pid in pids]
    log.debug("shared-memory channel for group %s: %d ranks, %d bytes, peers watched: %s",
              name, world, size, watch)
    return Mapped(mm, rank, world, slot, _timeout_of(pg), watch, threads)


def process_exists(pid: int) -> bool:
    """Whether the process (or, given a Linux thread id, the thread) ``pid`` exists."""
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
    override = env_seconds(TIMEOUT_ENV)
    if override is not None:
        return override
    try:
        return pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except Exception:  # noqa: BLE001 - a backend without options: the default
        return 300.0
