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
"""

from __future__ import annotations

from pyroaring import BitMap

from storage.positions import Position

__all__ = ["MAX_ENTRY_ID", "IndividuallyDeleted"]

MAX_ENTRY_ID = 1 << 32
"""Entry ids are < 2**32 (one pyroaring BitMap per ledger); larger ids never exist."""


class IndividuallyDeleted:
    """Acknowledged entry ids beyond the mark-delete position, one bitmap per ledger."""

    __slots__ = ("bitmaps",)

    def __init__(self, bitmaps: dict[int, BitMap]) -> None:
        self.bitmaps = bitmaps
        """ledger id -> its acknowledged entry ids; written by the owning cursor alone."""

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
