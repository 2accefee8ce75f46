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
(*stale*) until it reaches the head, so dropping is O(1). ``stale`` is exactly the index
entries minus the members (each add makes one entry and one member; a drop turns a member's
entry stale; a hand-out consumes an entry and, if live, its member).

Compaction keeps stale entries bounded by what is pending, not by the drops within the delay
horizon (sustained rescheduling would otherwise hold a slot per operation until its old time
came). It is checked after a drop or a hand-out; with ``bound = max(count, COMPACT_FLOOR)``
(:data:`COMPACT_FLOOR`: small indexes are not rebuilt for a few drops):

- ``stale > bound / 2`` starts an *incremental* compaction (a sweep): a 64-bit roaring bitmap
  ``keep`` of every member is built a few ledgers at a time, then the time index is filtered
  chunk by chunk in time order (:meth:`~broker.delayed.packed.PackedTimeIndex.retain_from`:
  ``keep``'s membership test mapped over a chunk, ``itertools.compress``; no Python per
  entry), about :data:`SWEEP_STEP` entries (one chunk) per later drop or hand-out, so the
  event loop is held for a step (~0.3-0.7 ms), not for the whole index. Given a ``defer``
  (the in-memory tracker passes its event loop's ``call_soon``), a step is scheduled instead,
  one at a time, and runs after the work that asked for it: a keyed reschedule's drop, made
  while a group commit's receipts wait, does not hold them for the step. Positions added
  meanwhile go into ``keep`` at once, so ``keep`` always holds every member and no member's
  entry is removed; one dropped meanwhile may keep its entry until the next sweep;
- ``stale > bound`` (the sweep did not keep up, e.g. hand-outs emptied the index, or a sweep
  that skipped chunks of one time left too much) compacts at once in one pass
  (:meth:`IndexedPositions.compact`, also used before sealing a mutable bucket).

A sweep or a compaction costs O(count + stale) < O(3 * stale) and ``stale`` grows only by
drops, so compaction is amortised O(1) per drop; the index never holds more than
``2 * count + COMPACT_FLOOR`` entries once a drop or hand-out has run, and usually at most
``1.5 * count`` (plus half the floor).

Invariants: ``count`` == number of members; every member has an index entry at its deliver
time; an index entry whose position is not a member is never handed out; hand-out order is
(deliver time, position), unchanged by compaction (it keeps the entries' order; of a member
re-added while its old entry was still stale, :meth:`IndexedPositions.compact` keeps the
earliest entry, the one that would have been handed out; a sweep keeps both).

Only positions that pack into 32+32 bits come here (:func:`~broker.delayed.packed.fits`);
the trackers keep the others in a :class:`~broker.delayed.packed.WideIndex`.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from typing import Final

from pyroaring import BitMap, BitMap64

from broker.delayed.packed import (
    CHUNK,
    POSITION_BITS,
    POSITION_MASK,
    PackedTimeIndex,
    bitmap_bytes,
    run_end,
    take_members,
)
from storage.positions import Position

__all__ = ["COMPACT_FLOOR", "IndexedPositions", "MutableBucket"]

#: Stale entries an index may hold whatever its live count (small indexes are not rebuilt
#: for a few drops): 64 KiB of index.
COMPACT_FLOOR: Final = 4096
#: Index entries an incremental compaction step filters: one chunk, ~0.3-0.7 ms of CPU. A drop
#: runs a step before its caller goes on; for a keyed cancel or reschedule that caller is the
#: producer's receipt, so a step of 8,192 entries (1.3-1.9 ms) held receipts behind it about ten
#: times a second at 50,000 keyed operations a second (bench/README.md).
SWEEP_STEP: Final = CHUNK


class IndexedPositions:
    """Packed time index + per-ledger membership bitmaps + count (module docstring)."""

    __slots__ = ("_defer", "_step_pending", "_sweep", "count", "index", "members")

    def __init__(self, defer: Callable[[Callable[[], None]], object] | None = None) -> None:
        self.index = PackedTimeIndex()
        self.members: dict[int, BitMap] = {}
        self.count = 0
        self._sweep: _Sweep | None = None
        #: Runs a callback soon, after the caller's work (the event loop's ``call_soon``):
        #: sweep steps then run there, not inside the drop that asked for them. None: inline.
        self._defer = defer
        self._step_pending = False

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def clear(self) -> None:
        """Forget everything."""
        self.index.clear()
        self.members.clear()
        self.count = 0
        self._sweep = None

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
        packed = (ledger_id << POSITION_BITS) | entry_id
        self.index.push(deliver_at_ms, packed)
        self.count += 1
        if self._sweep is not None:
            self._sweep.keep.add(packed)
        return True

    def add_entry_ids(self, ledger_id: int, entry_ids: list[int],
                      deliver_at_ms: list[int]) -> bool:
        """:meth:`add` of entries of one ledger (distinct ids, each at the time of the same
        index) when none is tracked yet: membership in one bitmap union instead of a look-up
        and an insert per entry. False, and nothing changes, when some is tracked already (the
        caller adds them one by one)."""
        ids = BitMap(entry_ids)
        members = self.members
        bm = members.get(ledger_id)
        if len(ids) != len(entry_ids) or (bm is not None and bm.intersect(ids)):
            return False
        if bm is None:
            members[ledger_id] = ids
        else:
            bm |= ids
        base = ledger_id << POSITION_BITS
        self.index.push_run(deliver_at_ms, list(map(base.__or__, entry_ids)))
        self.count += len(entry_ids)
        if self._sweep is not None:
            self._sweep.keep.update([base | entry_id for entry_id in entry_ids])
        return True

    def discard(self, ledger_id: int, entry_id: int) -> bool:
        """Stop tracking a position (its index entry goes stale); True if it was tracked."""
        members = self.members
        bm = members.get(ledger_id)
        if bm is None or entry_id not in bm:
            return False
        bm.discard(entry_id)      # checked: remove() is 5x slower in pyroaring
        if not bm:
            del members[ledger_id]
        self.count -= 1
        if self._sweep is not None or len(self.index) - self.count > COMPACT_FLOOR // 2:
            self._maybe_compact()
        return True

    def discard_entry_ids(self, ledger_id: int, entry_ids: BitMap) -> int:
        """:meth:`discard` of each of one ledger's ``entry_ids`` (one bitmap difference, one
        compaction check); returns how many were tracked."""
        members = self.members
        bm = members.get(ledger_id)
        if bm is None:
            return 0
        before = len(bm)
        bm.difference_update(entry_ids)
        dropped = before - len(bm)
        if not bm:
            del members[ledger_id]
        if dropped:
            self.count -= dropped
            if self._sweep is not None or len(self.index) - self.count > COMPACT_FLOOR // 2:
                self._maybe_compact()
        return dropped

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

    def count_upto(self, bound_ts: int, cap: int | None = None) -> int:
        """Index entries (stale ones included) due at or before ``bound_ts``; once past
        ``cap``, some count above it."""
        return self.index.count_upto(bound_ts, cap)

    def pop_upto(self, bound_ts: int, limit: int, out: list[Position]) -> int:
        """Take up to ``limit`` index entries due at or before ``bound_ts``, earliest first;
        the live ones go to ``out``. Returns how many index entries were consumed."""
        buf: list[int] = []
        moved = self.index.pop_upto(bound_ts, limit, buf)
        if moved:
            self.count -= take_members(buf, self.members, out)
            if self._sweep is not None or len(self.index) - self.count > COMPACT_FLOOR // 2:
                self._maybe_compact()
        return moved

    def live_columns(self) -> tuple[array[int], array[int]]:
        """Every live entry as (time, packed position) columns in time order, each position
        once (the index is compacted first when it holds stale entries)."""
        if self.stale:
            self.compact()
        return self.index.columns()

    # --- compaction (module docstring) ---------------------------------------------------------

    @property
    def stale(self) -> int:
        """Index entries whose position is no longer a member (dropped or a re-add's leftover)."""
        return len(self.index) - self.count

    def _maybe_compact(self) -> None:
        stale = len(self.index) - self.count
        bound = max(self.count, COMPACT_FLOOR)
        if stale > bound:
            self.compact()                      # the hard bound: at once
        elif self._sweep is not None:
            self._step()
        elif 2 * stale > bound:
            self._sweep = _Sweep(list(self.members))
            self._step()

    def _step(self) -> None:
        """A sweep step now, or (with ``defer``) one scheduled, if none is already."""
        defer = self._defer
        if defer is None:
            self._sweep_step()
        elif not self._step_pending:
            self._step_pending = True
            defer(self._deferred_step)

    def _deferred_step(self) -> None:
        self._step_pending = False
        if self._sweep is not None:     # not compacted or cleared meanwhile
            self._sweep_step()

    def _sweep_step(self) -> None:
        """About :data:`SWEEP_STEP` entries' worth of the incremental compaction."""
        sweep = self._sweep
        assert sweep is not None
        budget = SWEEP_STEP
        members = self.members
        while sweep.ledgers and budget > 0:
            ledger_id = sweep.ledgers.pop()
            bm = members.get(ledger_id)
            if bm is not None:
                sweep.keep |= BitMap64(array("Q", bm.to_array())).shift(ledger_id << POSITION_BITS)
                budget -= len(bm) // 4          # ~4x cheaper per member than per entry filtered
        if sweep.ledgers or budget <= 0:
            return
        sweep.after = self.index.retain_from(sweep.after, sweep.keep.__contains__, budget)
        if sweep.after is None:
            self._sweep = None
            if 2 * (len(self.index) - self.count) > max(self.count, COMPACT_FLOOR):
                self.compact()      # little removed (one time across many chunks): at once

    def compact(self) -> None:
        """Filter the time index to the members, order kept: one entry per member."""
        self._sweep = None
        if not self.count:
            self.index.clear()
            return
        live = BitMap64()
        for ledger_id, bm in self.members.items():
            live |= BitMap64(array("Q", bm.to_array())).shift(ledger_id << POSITION_BITS)
        if self.index.retain(live.__contains__) > self.count:
            # a member re-added while its old entry was stale: keep its earliest entry
            seen = BitMap64()

            def first(packed: int) -> bool:
                if packed in seen:
                    return False
                seen.add(packed)
                return True

            self.index.retain(first)

    # --- figures -------------------------------------------------------------------------

    @property
    def indexed(self) -> int:
        """Entries in the time index (stale ones included): the loaded index count."""
        return len(self.index)

    @property
    def memory_bytes(self) -> int:
        sweep = 0 if self._sweep is None else bitmap_bytes(self._sweep.keep)
        return (self.index.memory_bytes + sys.getsizeof(self.members) + sweep
                + sum(bitmap_bytes(bm) for bm in self.members.values()))


class _Sweep:
    """An incremental compaction under way: ``keep`` holds every member since it began (the
    ledgers still to copy in ``ledgers``; adds go in at once), ``after`` the last time of the
    chunks filtered so far (None: none yet)."""

    __slots__ = ("after", "keep", "ledgers")

    def __init__(self, ledgers: list[int]) -> None:
        self.keep = BitMap64()
        self.ledgers = ledgers
        self.after: int | None = None


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

    def add_entry_ids(self, ledger_id: int, entry_ids: list[int],
                      deliver_at_ms: list[int]) -> bool:
        """Not in bulk here (the bucket's range follows each add): always False."""
        return False

    def take_all(self) -> tuple[int, int, array[int], array[int], dict[int, BitMap]]:
        """Seal: (start, end, time column, position column, members) of every live entry,
        leaving this bucket empty (the members dict is handed over, not copied)."""
        ts_col, pos_col = self.live_columns()
        sealed = (self.start, self.end, ts_col, pos_col, self.members)
        self.members = {}
        self.clear()
        return sealed

    def add(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> bool:
        # IndexedPositions.add inlined (the publish path of every delayed message comes
        # here; a super() call costs as much as the rest of it).
        if not self.count:
            self.clear()                # stale leftovers only: start afresh at this ledger
            self.start = ledger_id
        members = self.members
        bm = members.get(ledger_id)
        if bm is None:
            members[ledger_id] = BitMap((entry_id,))
            if ledger_id > self.end:    # a ledger with a bitmap is <= end already
                self.end = ledger_id
        elif entry_id in bm:
            return False
        else:
            bm.add(entry_id)
        packed = (ledger_id << POSITION_BITS) | entry_id
        self.index.push(deliver_at_ms, packed)
        self.count += 1
        if self._sweep is not None:
            self._sweep.keep.add(packed)
        return True
