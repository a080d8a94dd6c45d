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
(one broadcast, a few all-gathers), so every rank decides alike: if any rank cannot map it (no
``/dev/shm``, another host, not x86-64, whose store order the protocol relies on) the whole
group stays on gloo and a warning says why.

What is protected (``tests/security/``): rank 0 creates the file with
``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600 whatever the umask, so another local user can
neither read nor write it and a planted name or link is never opened (an existing name is an
error on every rank that names it); a peer maps it only after checking, on the open descriptor,
that it is a regular file of its own uid, mode 0600, of the expected size; rank 0 unlinks it on
every path (once every rank mapped it, and on any failure, a peer's death during set-up
included), so nothing stays in ``/dev/shm``. The ranks compare their settings
(``TORCHAIR_DIST_SHM_SLOT_BYTES``, ``TORCHAIR_DIST_SHM_TIMEOUT``) at set-up, and every exchange
carries what each rank sends (kind, dtype, reduce op, element count): a rank that disagrees is a
``CollectiveMismatchError`` on every rank, never a wrong or stale result. Not protected: a
process of the job's own uid can map the same memory while it exists (as it can read the
job's memory anyway).

A wait polls the peers' sequence numbers, yielding the CPU between polls (then sleeping in
20 us steps). While it waits for a peer, every 0.2 s it looks at that peer: one that published a
failure (:mod:`torchair_dist.collectives.failures`) raises :class:`PeerFailedError` with its error;
one whose process has
exited (when this process can see it: a peer in another PID namespace is only timed out), or
that has not arrived within the group's own timeout (what gloo would wait;
``TORCHAIR_DIST_SHM_TIMEOUT`` seconds overrides it), raises :class:`CollectiveFaultError` naming
it.

An abandoned exchange poisons the channel. A rank that gives up on exchange ``n`` (any of the
reasons above, or a run-time fault of one of its graphs on any transport: :func:`abandon_all`)
first writes a *give-up mark* in its own line of the segment: ``n``, the rank it waited for and
why. Every rank reads every rank's mark after each of its waits (and while it waits), so a rank
that arrives after a peer gave up — it finds the peer's sequence number already published and
the peer's data in the slot, which would otherwise look like a finished exchange — raises
:class:`CollectiveFaultError` naming the peer that gave up, and so does every later exchange on
the channel, on every rank (the ranks' sequence numbers no longer mean the same step; destroy and
re-create the process group to go on). What remains is the few microseconds between a waiter's
last look at a late peer's sequence number and its mark becoming visible: a peer that publishes
and reads the marks inside that window finishes the exchange while the waiter raises.
"""
from __future__ import annotations

import mmap
import os
import time
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from ..base.util import calling_rank
from ..collectives import failures, groups, spec
from ..collectives import collective_ops as _ops
from ..errors import CollectiveFaultError, CollectiveMismatchError, PeerFailedError
from . import shm_segment as segment
from .shm_segment import (GAVE_UP_WORD, LINE, META_WORD, PID_WORD, SEQ_WORD, TIMEOUT_ENV,
                          VOTE_WORD, word)

# what an exchange's meta word encodes: kind, dtype, reduce op, element count
_KINDS = {"all_reduce": 1, "all_to_all": 2}
_DTYPE_CODES = {dt: i + 1 for i, dt in enumerate(
    (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
     torch.int16, torch.int32, torch.int64))}
_OP_CODES = {"sum": 1, "max": 2, "min": 3, "product": 4, "prod": 4}
DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                    torch.uint8, torch.int16, torch.int32, torch.int64})
REDUCE_OPS = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum,
              "product": torch.mul, "prod": torch.mul}


def _meta(kind: str, dtype: torch.dtype, numel: int, reduce_op: str = "") -> int:
    """One int64 word for what a rank sends in an exchange: kind, dtype, reduce op and element
    count (bits 60-63, 52-59, 48-51, 0-47)."""
    return (_KINDS[kind] << 60) | (_DTYPE_CODES[dtype] << 52) | \
        (_OP_CODES.get(reduce_op, 0) << 48) | (numel & ((1 << 48) - 1))


def _describe_meta(word: int) -> str:
    kinds = {v: k for k, v in _KINDS.items()}
    dtypes = {v: k for k, v in _DTYPE_CODES.items()}
    ops = {1: "sum", 2: "max", 3: "min", 4: "product"}
    kind = kinds.get((word >> 60) & 0xF, "?")
    dtype = dtypes.get((word >> 52) & 0xFF, "?")
    op = ops.get((word >> 48) & 0xF)
    return f"{kind} of {word & ((1 << 48) - 1)} {dtype}" + (f" ({op})" if op else "")


# why a rank gave up on an exchange (bits 56-59 of its give-up mark)
_GAVE_UP_WHY = {1: "did not arrive within the group timeout", 2: "had exited",
                3: "had published a failure", 4: "one of its graph's collectives failed "
                "(on any transport)"}


def _mark(seq: int, peer: int, why: int) -> int:
    """A give-up mark: the exchange abandoned (bits 0-47), the group rank waited for plus one
    (bits 48-55; 0: none) and the reason (bits 56-59, :data:`_GAVE_UP_WHY`)."""
    return (why << 56) | ((peer + 1 & 0xFF) << 48) | (seq & ((1 << 48) - 1))


class Channel:
    """One group's segment: a header (per-rank sequence numbers and pids) and two banks of
    per-rank slots used alternately, so a rank may write the next exchange while a slower
    peer still reads the previous one (it cannot get two ahead: it waits for everyone)."""

    def __init__(self, mm: mmap.mmap, rank: int, world: int, ranks: List[int], name: str,
                 slot: int, timeout: float = 300.0, watch: Optional[List[bool]] = None,
                 threads: bool = False):
        self.rank, self.world, self.ranks, self.name, self.slot = rank, world, ranks, name, slot
        self._mm = mm
        self._words = memoryview(mm).cast("q")          # int64 view of the whole segment
        self._seq_at = [word(r, SEQ_WORD) for r in range(world)]
        self._pid_at = [word(r, PID_WORD) for r in range(world)]
        # one vote word per bank: a rank that already votes on the next exchange must not
        # change the vote a slower peer is still reading
        self._vote_at = [[word(r, VOTE_WORD) + b for r in range(world)] for b in range(2)]
        # what each rank sends in each bank (kind, dtype, op, element count): a rank whose
        # exchange disagrees is an error on every rank, never a wrong result
        self._meta_at = [[word(r, META_WORD) + b for r in range(world)] for b in range(2)]
        # each rank's give-up mark: written before it raises out of an exchange, read by every
        # rank after each wait (a late arrival) and while it waits
        self._gave_up_at = [word(r, GAVE_UP_WORD) for r in range(world)]  # 0: none; see _mark
        header = world * LINE
        data = torch.frombuffer(mm, dtype=torch.uint8)[header:]
        self._banks = [data[b * world * slot:(b + 1) * world * slot].view(world, slot)
                       for b in range(2)]
        self.seq = self._words[self._seq_at[rank]]   # exchanges so far (see exchanges())
        self.timeout = timeout
        # peers whose process this one can see (another PID namespace: the timeout only)
        self._watch = watch if watch is not None else [True] * world
        self._threads = threads   # thread ranks: the pid words hold the ranks' thread ids

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
        # every peer published this exchange; a late arrival finds that at once, so it is also
        # where a peer's give-up (written before that peer raised) must be seen
        for at in self._gave_up_at:
            if words[at]:
                self._raise_abandoned(seq)
        return self._banks[seq & 1]

    def _wait_for(self, peer: int, at: int, seq: int) -> None:
        words, yield_ = self._words, os.sched_yield
        for _ in range(256):
            if words[at] >= seq:
                return
            yield_()
        start = last_check = time.monotonic()
        sleep = time.sleep
        marks = self._gave_up_at
        while words[at] < seq:
            sleep(2e-5)   # a slow peer (compute, or more ranks than cores): give the CPU away
            for mark_at in marks:   # another waiter gave up on this exchange: so does this one
                if words[mark_at]:
                    self._raise_abandoned(seq)
            now = time.monotonic()
            if now - last_check > 0.2:
                last_check = now
                self._check_alive(peer, seq, now - start)

    def _check_alive(self, peer: int, seq: int, waited: float) -> None:
        records = failures.failed_peers([self.ranks[peer]])
        if records:
            self.give_up(seq, peer, 3)
            raise PeerFailedError(f"shared-memory collective #{seq} of group {self.name}: "
                                  f"{failures.describe(records)}")
        pid = self._words[self._pid_at[peer]]
        alive = not self._watch[peer] or segment.process_exists(pid)
        if not alive or waited > self.timeout:
            self.give_up(seq, peer, 2 if not alive else 1)
            what = f"thread (tid {pid})" if self._threads else f"process (pid {pid})"
            why = (f"its {what} has exited" if not alive else
                   f"it did not arrive within {self.timeout:g} s (the group timeout; "
                   f"{TIMEOUT_ENV} overrides it)")
            raise CollectiveFaultError(
                f"shared-memory collective #{seq} of group {self.name}: rank "
                f"{self.ranks[peer]} never reached it: {why}. This rank gave up on it: the "
                f"group's shared-memory exchanges fail from here on, on every rank")

    # -- giving up ----------------------------------------------------------------------------
    def give_up(self, seq: int, peer: int = -1, why: int = 4) -> None:
        """Mark exchange ``seq`` abandoned by this rank (waiting for group rank ``peer``; -1:
        none), before this rank raises: every rank that waits for it, or arrives later,
        raises instead of finishing the exchange without it. The first mark stays."""
        at = self._gave_up_at[self.rank]
        if not self._words[at]:
            self._words[at] = _mark(seq, peer, why)

    def _raise_abandoned(self, seq: int) -> None:
        """:class:`CollectiveFaultError` naming every rank that gave up (see :meth:`give_up`)."""
        words, parts, blamed = self._words, [], []
        for r, at in enumerate(self._gave_up_at):
            mark = words[at]
            if not mark:
                continue
            gave_up_on, peer, why = mark & ((1 << 48) - 1), (mark >> 48 & 0xFF) - 1, mark >> 56
            who = "this rank" if r == self.rank else f"rank {self.ranks[r]}"
            reason = _GAVE_UP_WHY.get(why, "?")
            if peer < 0:
                waited = f" ({reason})"
            else:
                whom = "this rank" if peer == self.rank else f"rank {self.ranks[peer]}"
                waited = f" while waiting for {whom}, which {reason}"
            parts.append(f"{who} gave up on exchange #{gave_up_on}{waited}")
            blamed.append(r)
        late = " This rank arrived after that: the exchange was abandoned and nothing from " \
            "it is used." if any(r != self.rank for r in blamed) else ""
        raise CollectiveFaultError(
            f"shared-memory collective #{seq} of group {self.name}: " + "; ".join(parts)
            + f".{late} The group's exchanges are out of step from there on: every "
            f"shared-memory collective of group {self.name} fails; destroy and re-create the "
            f"process group to go on.")

    def _check_meta(self, parity: int, mine: int, what: str) -> None:
        """After an exchange: every rank sent the same kind, dtype, op and element count, else
        :class:`CollectiveMismatchError` (each rank sees every rank's word, so all raise)."""
        words = self._words
        theirs = [words[at] for at in self._meta_at[parity]]
        if all(t == mine for t in theirs):
            return
        described = "; ".join(f"rank {self.ranks[r]}: {_describe_meta(t)}"
                              for r, t in enumerate(theirs))
        raise CollectiveMismatchError(
            f"shared-memory collective #{self.seq} of group {self.name}: the ranks disagree "
            f"(this rank: {what}): {described}. Every rank must call the same collective with "
            f"the same dtype and element count (with dynamic shapes, the same sizes).")

    # -- collectives --------------------------------------------------------------------------
    def all_reduce_(self, x: torch.Tensor, reduce_op: str) -> torch.Tensor:
        fold = REDUCE_OPS[reduce_op]
        if self.world == 1:
            return x
        flat = x.view(-1) if x.is_contiguous() else x.contiguous().view(-1)
        step = self.slot // x.element_size()
        meta = _meta("all_reduce", x.dtype, flat.numel(), reduce_op)
        for start in range(0, flat.numel(), step):
            piece = flat[start:start + step]
            nbytes = piece.numel() * x.element_size()
            parity = (self.seq + 1) & 1
            bank = self._banks[parity]
            bank[self.rank, :nbytes].view(x.dtype).copy_(piece)
            self._words[self._meta_at[parity][self.rank]] = meta
            bank = self._publish_and_wait()
            self._check_meta(parity, meta, f"all_reduce of {flat.numel()} {x.dtype} "
                                           f"({reduce_op})")
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
            meta = _meta("all_to_all", x.dtype, count * world if eligible else 0)
            self._words[self._meta_at[parity][self.rank]] = meta
            bank = self._publish_and_wait()
            if start == 0:
                if not all(self._words[at] for at in self._vote_at[parity]):
                    return None
            self._check_meta(parity, meta, f"all_to_all of {count * world} {x.dtype}")
            if start == 0:
                out = torch.empty_like(x, memory_format=torch.contiguous_format)
                dst = out.view(world, -1)
            me = self.rank * n * es
            dst[:, start:start + n].copy_(bank[:, me:me + n * es].view(x.dtype))
            start += n
            if start >= count:
                return out


def _setup(pg, ranks: List[int], name: str) -> Optional[Channel]:
    """The group's channel over a segment mapped on every rank (:func:`.shm_segment.map_group`);
    None when the group stays on gloo."""
    mapped = segment.map_group(pg, ranks, name)
    if mapped is None:
        return None
    return Channel(mapped.mm, mapped.rank, mapped.world, ranks, name, mapped.slot,
                   mapped.timeout, mapped.watch, mapped.threads)


# -- setup, one channel per group and rank ----------------------------------------------------
# A channel is one rank's end of a group's segment. Channels are made per process group and
# calling rank: with torch's threaded process group the ranks are threads of one process, each
# with its own ProcessGroup object, and each thread must reach its own end (two spellings of
# one group share it; a re-created group gets a new one).
# group name as the graph spells it -> {rank: (process group, its channel or None)}
_channels: Dict[str, Dict[int, tuple]] = {}
# (stable group name, calling rank) -> (process group, channel or None)
_by_group: Dict[Tuple[str, int], tuple] = {}


def channel(group_name: str) -> Optional[Channel]:
    """The calling rank's channel of the group, set up on first use through the group (every
    rank of it must call this at the same point, as a collective); None when the group stays
    on gloo."""
    known = _channels.get(group_name)
    if known:
        alive = _c10d._world.pg_map   # the calling thread's groups (thread ranks: its own)
        for pg, ch in known.values():
            if pg in alive:
                return ch
    pg = groups.to_process_group(group_name)
    name, rank = groups.stable_name_of(pg), dist.get_rank()
    made = _by_group.get((name, rank))
    if made is None or made[0] is not pg:
        made = (pg, None if _without_peers() else
                _setup(pg, dist.get_process_group_ranks(pg), name))
        _by_group[(name, rank)] = made
    _channels.setdefault(group_name, {})[rank] = made
    return made[1]


def _without_peers() -> bool:
    """PyTorch's fake process group (one process plays a rank) or a store that cannot carry
    keys: no peer would ever publish, so the group's collectives keep their own kernels (one log
    line, from :func:`~torchair_dist.collectives.failures.no_peers_reason`)."""
    return failures.no_peers_reason() is not None


def exchanges(group_name: str) -> Optional[int]:
    """How many exchanges the calling rank's channel of the group made (None: no channel, the
    group is on gloo or has not run a shared-memory collective yet)."""
    known = _by_group.get((groups.stable_name_of(groups.to_process_group(group_name)),
                           dist.get_rank()))
    return None if known is None or known[1] is None else known[1].seq


def reset() -> None:
    """Forget every channel (process groups were destroyed)."""
    _channels.clear()
    _by_group.clear()


def abandon_all(exc: BaseException = None) -> None:
    """A graph of the calling rank failed at run time with a collective fault (on any transport;
    :func:`torchair_dist.collectives.failures.run_fault`): this rank leaves the step, so it marks
    the next exchange of each of its channels abandoned (:meth:`Channel.give_up`; a channel
    that already holds its mark keeps it). A peer waiting in, or arriving at, one of them
    raises :class:`CollectiveFaultError` naming this rank instead of waiting out the timeout or
    finishing without it. Thread ranks of the same process keep their channels."""
    me = calling_rank()
    for (_, rank), (_, ch) in list(_by_group.items()):
        if ch is not None and (me is None or rank == me):
            ch.give_up(ch.seq + 1)


failures.on_run_fault(abandon_all)


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
