"""What a subscription has scheduled that its dispatcher has not read yet.

Theory of operation
-------------------
A tracker learns of a delayed message when the subscription's dispatcher reads it (or holds it
unread from the times learnt at publish, :mod:`broker.delayed.known_times`). A dispatcher reads
only for connected consumers, so a delayed message published while none is connected -- no
consumer since the subscription was created, or since the broker restarted, or consumers that
are behind -- sits in the backlog and in no tracker. Pulsar's stats count it as an ordinary
backlog message (``msgDelayed`` stays 0 until a consumer attaches); a listing of the tracker
alone would leave it out as well, and the first listing after a restart would be empty.

:class:`UnreadScan` closes that gap for the listing and the histogram, and only for them (it
never delivers, holds or acknowledges anything). Per subscription, built on the first listing:

- an :class:`~broker.delayed.indexed.IndexedPositions` of the delayed entries it found at or
  after the cursor's read position, with their deliver times;
- ``next``: where its scan goes on (the entries before it, from the read position on, were
  scanned).

Each listing calls :func:`refresh` before it copies the sources, which

1. starts over when the read position moved back before the scan's start (a rewind or a reset:
   the entries from there on are unread again);
2. drops what the dispatcher has read since (positions before the read position: the tracker
   holds them now, or they were delivered), what was acknowledged meanwhile (a cancel, a skip)
   and what the topic's replace-by-key schedule superseded (replaced, cancelled by key), so the
   index's membership is exactly the unread scheduled entries at that moment. When more of
   the index would then be stale than live (it would be compacted at once, one pass over all
   of it on the loop), the scan starts over at the read position instead;
3. reads on from ``next`` to the last readable entry (the caller's bound: the last confirmed
   entry, or an open transaction's read limit), at most :data:`SCAN_PER_REFRESH` entries and
   for at most :data:`SCAN_SECONDS`, and adds each entry due after now that is not
   acknowledged.

An entry is read through the ledger (its cache, else disk in the storage's reader); only the
two dispatch fields are decoded (``peek_dispatch``, in C), one read of :data:`READ_BATCH`
entries per loop turn (the scan yields after each: a read the entry cache answers does not).
What the scan has not reached is counted as ``not_read`` (the listing's ``notRead``); it is
listed after a later refresh reads it. The scan stops once the index holds :data:`MAX_HELD`
positions (checked per read of :data:`READ_BATCH` entries; ~20 B each) and the rest is
``not_read``.

A preview nobody lists is dropped after :data:`IDLE_S` seconds (and with the subscription's
tracker on :meth:`~broker.delayed.delivery.DelayedDelivery.release`). Refreshes of one
subscription take turns (a lock), so two listings never scan the same entries twice.
Runs on the event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from pyroaring import BitMap

from broker.delayed.indexed import COMPACT_FLOOR, IndexedPositions
from protocol.errors import ProtocolError
from protocol.send_accel import peek_dispatch
from storage.positions import Entry, Position

__all__ = ["IDLE_S", "MAX_HELD", "SCAN_PER_REFRESH", "SCAN_SECONDS", "UnreadScan", "refresh"]

#: Entries one refresh reads at most (the rest is ``not_read`` until the next one).
SCAN_PER_REFRESH: Final = 1_000_000
#: Seconds one refresh reads for at most: a listing answers within about this much more than
#: its own work, and a client polling the listing of a long backlog costs the broker at most
#: this much reading per poll (the rest is ``not_read`` until the next one).
SCAN_SECONDS: Final = 2.0
#: Unread scheduled positions a scan keeps at most.
MAX_HELD: Final = 1_000_000
#: Entries per read (each read's entries are indexed in one loop turn: ~1-2 ms).
READ_BATCH: Final = 256
#: A preview not refreshed for this long is dropped.
IDLE_S: Final = 60.0


class UnreadCursor(Protocol):
    @property
    def read_position(self) -> Position: ...

    def is_deleted(self, pos: Position) -> bool: ...

    def deleted_in(self, ledger_id: int) -> tuple[int, BitMap | None]: ...


class Superseded(Protocol):
    """The topic's replace-by-key schedule: what must never be delivered."""

    def superseded_ids(self, ledger_id: int) -> BitMap | None: ...


class UnreadLedger(Protocol):
    def next_position(self, pos: Position) -> Position: ...

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int: ...

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]: ...


class UnreadScan:
    """One subscription's scheduled entries past its read position (module docstring)."""

    __slots__ = ("_on_idle", "_timer", "held", "lock", "next", "not_read", "start", "used_at")

    def __init__(self, start: Position, on_idle: Callable[[], None]) -> None:
        """``on_idle``: called once the scan was not refreshed for :data:`IDLE_S` (the owner
        drops it then)."""
        self.held = IndexedPositions()
        self.start = start
        self.next = start
        self.not_read = 0
        self.lock = asyncio.Lock()
        self.used_at = time.monotonic()
        self._on_idle = on_idle
        self._timer = asyncio.get_running_loop().call_later(IDLE_S, self._expire)

    def _expire(self) -> None:
        left = self.used_at + IDLE_S - time.monotonic()
        if left > 0 or self.lock.locked():
            self._timer = asyncio.get_running_loop().call_later(max(left, 1.0), self._expire)
        else:
            self._on_idle()

    def close(self) -> None:
        """Stop the idle timer and forget everything."""
        self._timer.cancel()
        self.held.clear()

    def restart_at(self, start: Position) -> None:
        self.held.clear()
        self.start = self.next = start
        self.not_read = 0

    def drop_read(self, read_position: Position, cursor: UnreadCursor,
                  schedule: Superseded | None = None) -> bool:
        """Forget positions before ``read_position``, those acknowledged and those a
        replace-by-key ``schedule`` superseded (step 2). When that would leave more stale
        index slots than live ones (the index would then be compacted at once, a pass over all
        of it on the loop), the scan starts over at ``read_position`` instead, and True is
        returned: what is left is read again, a batch per loop turn."""
        held = self.held
        drops: list[tuple[int, BitMap]] = []
        dropped = 0
        for ledger_id, members in held.members.items():
            gone = _gone(ledger_id, members, read_position, cursor, schedule)
            if gone:
                drops.append((ledger_id, gone))
                dropped += len(gone)
        live = held.count - dropped
        if dropped and held.indexed - live > max(live, COMPACT_FLOOR):
            self.restart_at(read_position)
            return True
        for ledger_id, gone in drops:
            held.discard_entry_ids(ledger_id, gone)
        if not held:
            held.clear()    # the stale slots too
        self.start = max(self.start, read_position)
        return False

    def take(self, entries: Sequence[Entry], cursor: UnreadCursor, now_ms: int,
             schedule: Superseded | None = None) -> None:
        """Index the entries of one read that are due after ``now_ms``, not acknowledged and
        not superseded by ``schedule``: per ledger in one run (``add_entry_ids``, the time
        index's run insert), or one by one when some is held already."""
        by_ledger: dict[int, tuple[list[int], list[int]]] = {}
        for entry in entries:
            try:
                deliver_at = peek_dispatch(entry.data)[1]
            except ProtocolError:
                continue    # the dispatcher delivers it as it is; nothing scheduled
            if deliver_at is None or deliver_at <= now_ms:
                continue
            pos = entry.position
            if cursor.is_deleted(pos):
                continue
            if schedule is not None:
                gone = schedule.superseded_ids(pos.ledger_id)
                if gone is not None and pos.entry_id in gone:
                    continue
            ids_times = by_ledger.get(pos.ledger_id)
            if ids_times is None:
                ids_times = by_ledger[pos.ledger_id] = ([], [])
            ids_times[0].append(pos.entry_id)
            ids_times[1].append(deliver_at)
        held = self.held
        for ledger_id, (ids, times) in by_ledger.items():
            if not held.add_entry_ids(ledger_id, ids, times):
                for entry_id, deliver_at in zip(ids, times, strict=True):
                    held.add(deliver_at, ledger_id, entry_id)


def _gone(ledger_id: int, members: BitMap, read_position: Position, cursor: UnreadCursor,
          schedule: Superseded | None) -> BitMap:
    """The entry ids of ``members`` (one ledger's held ids) to forget: read by the dispatcher
    (before ``read_position``), acknowledged, or superseded."""
    if ledger_id < read_position.ledger_id:
        return members.copy()
    first, last = members.min(), members.max()
    end = read_position.entry_id if ledger_id == read_position.ledger_id else 0
    through, acked = cursor.deleted_in(ledger_id)
    end = min(max(end, through + 1), last + 1)
    gone = BitMap(range(first, end)) if end > first else BitMap()
    if acked:
        gone |= acked
    superseded = schedule.superseded_ids(ledger_id) if schedule is not None else None
    if superseded:
        gone |= superseded
    return gone & members


def _unread(ledger: UnreadLedger, pos: Position, last: Position | None) -> int:
    """Entries from ``pos`` to ``last``, both included."""
    return 0 if last is None or pos > last else ledger.entries_between(pos, last) + 1


async def refresh(scan: UnreadScan, cursor: UnreadCursor, ledger: UnreadLedger,
                  last: Position | None, *, schedule: Superseded | None = None,
                  now_ms: int | None = None, budget: int = SCAN_PER_REFRESH) -> None:
    """Bring ``scan`` up to date for a listing: steps 1-3 of the module docstring. ``last``:
    the last entry the dispatcher could read now (None: none); ``schedule``: the topic's
    replace-by-key schedule while that policy is on."""
    async with scan.lock:
        scan.used_at = time.monotonic()
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        read_position = cursor.read_position
        if read_position < scan.start:
            scan.restart_at(read_position)
        scan.drop_read(read_position, cursor, schedule)
        pos = max(scan.next, read_position)
        scanned = 0
        deadline = time.monotonic() + SCAN_SECONDS
        while last is not None and pos <= last and scanned < budget \
                and len(scan.held) < MAX_HELD:
            entries = await ledger.read_entries(pos, min(READ_BATCH, budget - scanned))
            if not entries:
                break
            entries = [e for e in entries if e.position <= last]
            if not entries:
                break
            if cursor.read_position < scan.start:
                break       # rewound meanwhile: the next refresh starts over
            scan.take(entries, cursor, now_ms, schedule)
            scanned += len(entries)
            pos = ledger.next_position(entries[-1].position)
            await asyncio.sleep(0)   # a read the entry cache answers does not yield by itself
            if time.monotonic() >= deadline:
                break                # (at least one read per refresh)
        scan.next = pos
        scan.not_read = _unread(ledger, pos, last)
        # what the dispatcher read while the scan awaited, or acknowledged
        if scan.drop_read(cursor.read_position, cursor, schedule):
            scan.not_read = _unread(ledger, scan.next, last)
