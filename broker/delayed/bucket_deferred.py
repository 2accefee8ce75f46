"""What the bucket tracker is asked about buckets whose membership is not read yet.

Theory of operation
-------------------
After a restart the tracker serves before every recovered bucket's membership (the roaring
bitmaps in its snapshot's metadata) is read: a bucket known from its summary only is READING
(:mod:`broker.delayed.bucket_records`). What the tracker is asked about one of its ledgers
meanwhile cannot be answered from bitmaps it does not have, so :class:`DeferredOps` keeps it, by
ledger, and :meth:`DeferredOps.replay` applies it once the bucket is read, before its first
segment can hand anything out (or once it is dropped, its snapshot unreadable: its ledgers are
then read again as entries):

- a cancel (:data:`FORGET`: the skip-by-ids and replace-by-key paths; :data:`CANCEL`:
  PIP-423's cancel; the targets of both are acknowledged on the cursor anyway): the target's
  pending bit is cleared then, or, when the bucket does not hold it, its slot in the
  late-entry index (an add deferred before it may have put it there);
- an add (:data:`ADD`, a re-read of an entry of such a ledger): held now; once the bucket is
  read the ordinary add decides (the bucket holds it, a cancel in flight holds it back, or it
  is indexed), and one that fell due meanwhile goes to the late-entry index, to be handed out in
  its turn: never dropped, never twice.

The tracker asks its dispatcher to read no new entries while any bucket is READING
(``should_pause_all_deliveries``), so adds are only reads that were in flight, and cancels
what arrives in the seconds the reads take. Runs on the event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from broker.delayed.bucket_records import ImmutableBucket, SealedBuckets
from storage.positions import Position

FORGET: Final = 0
CANCEL: Final = 1
ADD: Final = 2

#: (entry id, deliver time or -1, kind) of one deferred operation
_Op = tuple[int, int, int]


class DeferredOps:
    """Operations on the ledgers of READING buckets, by ledger, in arrival order."""

    __slots__ = ("_by_ledger", "count")

    def __init__(self) -> None:
        self._by_ledger: dict[int, list[_Op]] = {}
        self.count = 0

    def defer(self, ledger_id: int, entry_id: int, deliver_at_ms: int, kind: int) -> None:
        self._by_ledger.setdefault(ledger_id, []).append((entry_id, deliver_at_ms, kind))
        self.count += 1

    def take(self, start_ledger: int, end_ledger: int) -> list[tuple[int, int, int, int]]:
        """Every operation on ledgers ``[start_ledger, end_ledger]``, removed:
        (ledger id, entry id, deliver time, kind)."""
        by_ledger = self._by_ledger
        if not by_ledger:
            return []
        if end_ledger - start_ledger + 1 <= len(by_ledger):
            ledgers = [lid for lid in range(start_ledger, end_ledger + 1) if lid in by_ledger]
        else:
            ledgers = sorted(lid for lid in by_ledger if start_ledger <= lid <= end_ledger)
        out: list[tuple[int, int, int, int]] = []
        for ledger_id in ledgers:
            for entry_id, at, kind in by_ledger.pop(ledger_id):
                out.append((ledger_id, entry_id, at, kind))
        self.count -= len(out)
        return out

    def replay(self, bucket: ImmutableBucket, sealed: SealedBuckets,
               add: Callable[[Position, int], bool],
               index_late: Callable[[int, int, int], object],
               forget_late: Callable[[int, int], object]) -> None:
        """Apply what was deferred for ``bucket``'s ledgers: it was just read (or dropped)."""
        for ledger_id, entry_id, at, kind in self.take(bucket.start_ledger, bucket.end_ledger):
            if kind == ADD:
                if not add(Position(ledger_id, entry_id), at):
                    index_late(at, ledger_id, entry_id)     # due meanwhile: handed out next
            elif sealed.take(ledger_id, entry_id) is None:
                forget_late(ledger_id, entry_id)

    def clear(self) -> None:
        self._by_ledger.clear()
        self.count = 0
