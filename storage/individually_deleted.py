"""The entries a cursor has acknowledged one by one beyond its mark-delete position.

Theory of operation
-------------------
One pyroaring ``BitMap`` of entry ids per ledger (entry ids are below :data:`MAX_ENTRY_ID`).
The :class:`~storage.cursor.ManagedCursor` that holds an :class:`IndividuallyDeleted` is its
only writer: it adds acknowledged ids, drops the bitmaps its mark-delete position passes and
clears them on a reset, through :attr:`IndividuallyDeleted.bitmaps`. Everyone else reads:
how many there are, copies of the bitmaps, and whether a range of positions holds any -- the
dispatcher asks that once for a run of entries it is about to send (a herd falling due)
instead of asking the cursor about each entry. Loop-only, like the cursor.

Saves: :meth:`IndividuallyDeleted.records` gives the bitmaps' part of a cursor file (the
format is storage/cursor.py's) as pieces, one record per ledger. Each ledger's record is kept
and made again (``run_optimize`` and ``serialize``) only when its bitmap changed since the
last save: the cursor says so (:meth:`IndividuallyDeleted.changed`) after each change of a
bitmap (an id added or removed, a bitmap added, dropped or cleared). An ACK touches one
ledger's bitmap; with thousands of ledgers holding millions of acknowledged ids, encoding them all for each save
was tens of milliseconds of the loop once a second (bench/cursor_save.py).
"""

from __future__ import annotations

import struct

from pyroaring import BitMap

from storage.positions import Position

__all__ = ["BITMAP_HEAD", "MAX_ENTRY_ID", "IndividuallyDeleted", "bitmap_record", "count_record"]

MAX_ENTRY_ID = 1 << 32
"""Entry ids are < 2**32 (one pyroaring BitMap per ledger); larger ids never exist."""

BITMAP_HEAD = struct.Struct("<qI")
"""A bitmap record's head in a cursor file: ledger id, serialized size."""
_U32 = struct.Struct("<I")


def bitmap_record(ledger_id: int, bitmap: BitMap) -> bytes:
    """One ledger's record in a cursor file: ledger_id i64, size u32, then
    ``BitMap.serialize()`` (portable format) after ``run_optimize`` (run containers make dense
    ack ranges nearly free; it leaves one form for one set of ids, so a record made again of
    the same ids is the same bytes)."""
    bitmap.run_optimize()
    blob = bitmap.serialize()
    return b"".join((BITMAP_HEAD.pack(ledger_id, len(blob)), blob))


def count_record(n_bitmaps: int) -> bytes:
    """The count of bitmap records that precedes them in a cursor file (u32)."""
    return _U32.pack(n_bitmaps)


class IndividuallyDeleted:
    """Acknowledged entry ids beyond the mark-delete position, one bitmap per ledger."""

    __slots__ = ("_changed", "_order", "_records", "bitmaps")

    def __init__(self, bitmaps: dict[int, BitMap]) -> None:
        self.bitmaps = bitmaps
        """ledger id -> its acknowledged entry ids; written by the owning cursor alone, which
        calls :meth:`changed` after each change of a bitmap."""
        #: ledger id -> the record of its bitmap as the last save made it (non-empty ones)
        self._records: dict[int, bytes] = {}
        #: ledgers whose bitmap changed since the last save (at first: all of them)
        self._changed: set[int] = set(bitmaps)
        #: sorted(_records) while no record was added or dropped since it was made
        self._order: list[int] | None = None

    def changed(self, ledger_id: int) -> None:
        """The bitmap of ledger_id changed (ids added or removed, the bitmap added or dropped):
        the next save makes its record again."""
        self._changed.add(ledger_id)

    def records(self) -> list[bytes]:
        """The bitmaps' part of a cursor file, as it is now: the count, then one record per
        non-empty bitmap in ledger order (:func:`bitmap_record`, byte for byte). Makes again
        only the records of the bitmaps changed since the last call; the pieces are
        immutable, so a save may join them later, in another thread."""
        kept = self._records
        if self._changed:
            bitmaps = self.bitmaps
            count = len(kept)
            for ledger_id in self._changed:
                bitmap = bitmaps.get(ledger_id)
                if bitmap:
                    kept[ledger_id] = bitmap_record(ledger_id, bitmap)
                elif kept.pop(ledger_id, None) is not None:
                    count = -1
            self._changed.clear()
            if len(kept) != count:
                self._order = None
        order = self._order
        if order is None:
            order = self._order = sorted(kept)
        return [count_record(len(order)), *map(kept.__getitem__, order)]

    def __len__(self) -> int:
        """How many entries are acknowledged beyond the mark-delete position."""
        return sum(len(b) for b in self.bitmaps.values())

    def copies(self) -> dict[int, BitMap]:
        """Copies of the per-ledger bitmaps that hold any id."""
        return {lid: bm.copy() for lid, bm in self.bitmaps.items() if bm}

    def any_between(self, first: Position, last: Position) -> bool:
        """Is some position ``p`` with ``first <= p <= last`` in the set? One bitmap range
        count for a range within one ledger (the usual run), one per ledger it spans else."""
        bitmaps = self.bitmaps
        if not bitmaps or last < first:
            return False
        first_ledger, first_entry = first
        last_ledger, last_entry = last
        start = max(first_entry, 0)
        if first_ledger == last_ledger:
            bitmap = bitmaps.get(first_ledger)
            return bitmap is not None and start <= last_entry and start < MAX_ENTRY_ID and \
                bitmap.range_cardinality(start, min(last_entry + 1, MAX_ENTRY_ID)) > 0
        for ledger_id, bitmap in bitmaps.items():
            if not first_ledger <= ledger_id <= last_ledger or not bitmap:
                continue
            low = start if ledger_id == first_ledger else 0
            high = min(last_entry + 1, MAX_ENTRY_ID) if ledger_id == last_ledger \
                else MAX_ENTRY_ID
            if low < high and bitmap.range_cardinality(low, high) > 0:
                return True
        return False
