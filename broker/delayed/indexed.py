"""Indexed positions: a time index of delayed positions and the set of those still live.

Theory of operation
-------------------
Every in-memory part of the trackers keeps the same trio: a
:class:`~broker.delayed.packed.PackedTimeIndex` of ``(deliver_at_ms, ledger << 32 | entry)``,
a roaring bitmap of entry ids per ledger (``members``: the positions still tracked), and
their count. :class:`IndexedPositions` is that trio with one reset. It serves the in-memory
tracker, the bucket tracker's late-entry index, and (as :class:`MutableBucket`, which adds the
ledger range) the bucket tracker's last mutable bucket.

A position leaves ``members`` when it is handed out or dropped; its time-index entry stays
(*stale*) until it reaches the head or the index is sealed, so dropping is O(1). ``stale``
counts dropped entries that may still be in the index (never less: sealing filters the
columns only when it is not 0).
Invariants: ``count`` == number of members; every member has an index entry at its deliver
time; an index entry whose position is not a member is never handed out.

Only positions that pack into 32+32 bits come here (:func:`~broker.delayed.packed.fits`);
the trackers keep the others in a :class:`~broker.delayed.packed.WideIndex`.
"""

from __future__ import annotations

import sys
from array import array

from pyroaring import BitMap

from broker.delayed.packed import (
    POSITION_BITS,
    POSITION_MASK,
    PackedTimeIndex,
    bitmap_bytes,
    run_end,
    take_members,
)
from storage.positions import Position

__all__ = ["IndexedPositions", "MutableBucket"]


class IndexedPositions:
    """Packed time index + per-ledger membership bitmaps + count (module docstring)."""

    __slots__ = ("count", "index", "members", "stale")

    def __init__(self) -> None:
        self.index = PackedTimeIndex()
        self.members: dict[int, BitMap] = {}
        self.count = 0
        self.stale = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def clear(self) -> None:
        """Forget everything."""
        self.index.clear()
        self.members.clear()
        self.count = 0
        self.stale = 0

    # --- membership --------------------------------------------------------------------------

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        bm = self.members.get(ledger_id)
        return bm is not None and entry_id in bm

    def add(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> bool:
        """Track a position; False (and nothing changes) when it is tracked already."""
        members = self.members
        bm = members.get(ledger_id)
        if bm is None:
            members[ledger_id] = BitMap((entry_id,))
        elif entry_id in bm:
            return False
        else:
            bm.add(entry_id)
        self.index.push(deliver_at_ms, (ledger_id << POSITION_BITS) | entry_id)
        self.count += 1
        return True

    def discard(self, ledger_id: int, entry_id: int) -> bool:
        """Stop tracking a position (its index entry goes stale); True if it was tracked."""
        members = self.members
        bm = members.get(ledger_id)
        if bm is None or entry_id not in bm:
            return False
        bm.remove(entry_id)
        if not bm:
            del members[ledger_id]
        self.count -= 1
        self.stale += 1
        return True

    def run_end(self, ledger_id: int, entry_id: int) -> int:
        """The first entry id >= ``entry_id`` of ``ledger_id`` not tracked here."""
        return run_end(self.members.get(ledger_id), entry_id)

    def ledger_members(self, ledger_id: int) -> BitMap | None:
        return self.members.get(ledger_id)

    # --- time order --------------------------------------------------------------------------

    def head_ts(self) -> int | None:
        """The earliest live deliver time (stale heads are dropped on the way)."""
        index = self.index
        members = self.members
        while index:
            packed = index.peek_packed()
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm:
                return index.peek_ts()
            index.drop_head()
        return None

    def peek_ts(self) -> int | None:
        """The earliest deliver time in the index, stale entries included."""
        return self.index.peek_ts()

    def count_upto(self, bound_ts: int) -> int:
        """Index entries (stale ones included) due at or before ``bound_ts``."""
        return self.index.count_upto(bound_ts)

    def pop_upto(self, bound_ts: int, limit: int, out: list[Position]) -> int:
        """Take up to ``limit`` index entries due at or before ``bound_ts``, earliest first;
        the live ones go to ``out``. Returns how many index entries were consumed."""
        buf: list[int] = []
        moved = self.index.pop_upto(bound_ts, limit, buf)
        if moved:
            taken = take_members(buf, self.members, out)
            self.count -= taken
            if self.stale:
                self.stale = max(0, self.stale - (moved - taken))
        return moved

    def live_columns(self) -> tuple[array[int], array[int]]:
        """Every live entry as (time, packed position) columns in time order, each position
        once (stale entries and re-added duplicates filtered only when there are some)."""
        ts_col, pos_col = self.index.columns()
        if not self.stale:
            return ts_col, pos_col
        members = self.members
        seen: set[int] = set()
        keep_ts: array[int] = array("q")
        keep_pos: array[int] = array("Q")
        for ts, packed in zip(ts_col, pos_col, strict=True):
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm and packed not in seen:
                seen.add(packed)
                keep_ts.append(ts)
                keep_pos.append(packed)
        return keep_ts, keep_pos

    # --- figures -------------------------------------------------------------------------

    @property
    def indexed(self) -> int:
        """Entries in the time index (stale ones included): the loaded index count."""
        return len(self.index)

    @property
    def memory_bytes(self) -> int:
        return (self.index.memory_bytes + sys.getsizeof(self.members)
                + sum(bitmap_bytes(bm) for bm in self.members.values()))


class MutableBucket(IndexedPositions):
    """The bucket tracker's last mutable bucket: indexed positions of ledgers [start, end]
    (both -1 while empty)."""

    __slots__ = ("end", "start")

    def __init__(self) -> None:
        super().__init__()
        self.start = -1
        self.end = -1

    def clear(self) -> None:
        super().clear()
        self.start = self.end = -1

    def take_all(self) -> tuple[int, int, array[int], array[int], dict[int, BitMap]]:
        """Seal: (start, end, time column, position column, members) of every live entry,
        leaving this bucket empty (the members dict is handed over, not copied)."""
        ts_col, pos_col = self.live_columns()
        sealed = (self.start, self.end, ts_col, pos_col, self.members)
        self.members = {}
        self.clear()
        return sealed

    def add(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> bool:
        if not self.count:
            self.clear()                # stale leftovers only: start afresh at this ledger
            self.start = ledger_id
        if not super().add(deliver_at_ms, ledger_id, entry_id):
            return False
        if ledger_id > self.end:
            self.end = ledger_id
        return True
