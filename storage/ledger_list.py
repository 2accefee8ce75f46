"""The ordered ledgers of one managed ledger, and the position arithmetic over them.

Theory of operation
-------------------
A :class:`LedgerList` holds a managed ledger's :class:`~storage.ledger_state.LedgerState` s by
id (``by_id``) and their ids in ascending order (``ids``); ledger ids only grow, so the order
is the order of the topic's entries. It answers the questions that need no I/O: where a
ledger's entries end (``extent``), which ledger follows another, the first readable position,
the position after one, how many entries lie between two positions (confirmed entries only:
nothing unsynced is counted), totals, and which sealed ledgers a trim may delete.

Owned by :class:`storage.ledger.ManagedLedger`, which alone adds and removes ledgers (on the
loop); its entry reader (storage/reads.py) reads the same ``by_id`` and ``ids`` objects. No
locks, no I/O, imports nothing above storage.ledger_state.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from pyroaring import BitMap

from storage.ledger_state import LedgerInfo, LedgerState, SizeTotal
from storage.positions import Position

__all__ = ["LedgerList"]


class LedgerList:
    __slots__ = ("by_id", "ids", "sizes")

    def __init__(self) -> None:
        self.by_id: dict[int, LedgerState] = {}
        self.ids: list[int] = []
        #: the sum of the listed ledgers' size_bytes, moved by each one as it is set
        self.sizes = SizeTotal()

    def add(self, led: LedgerState) -> None:
        led.join(self.sizes)
        old = self.by_id.get(led.ledger_id)
        if old is not None:   # replaced: its bytes leave the total with it
            old.leave()
            self.ids.remove(led.ledger_id)
        self.by_id[led.ledger_id] = led
        bisect.insort(self.ids, led.ledger_id)

    def remove(self, ledger_id: int) -> LedgerState:
        led = self.by_id.pop(ledger_id)
        self.ids.remove(ledger_id)
        led.leave()
        return led

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def first_ledger_id(self) -> int:
        return self.ids[0]

    def extent(self, ledger_id: int) -> tuple[int, bool, BitMap | None]:
        """(confirmed entry count, complete: no more entries will ever be added, missing ids)."""
        led = self.by_id.get(ledger_id)
        if led is None:
            return 0, True, None
        return led.confirmed, led.complete, led.missing

    def after(self, ledger_id: int) -> int | None:
        ids = self.ids
        i = bisect.bisect_right(ids, ledger_id)
        return ids[i] if i < len(ids) else None

    def first_position(self) -> Position | None:
        for ledger_id in self.ids:
            led = self.by_id[ledger_id]
            for entry_id in range(led.confirmed):
                if led.missing is None or entry_id not in led.missing:
                    return Position(ledger_id, entry_id)
        return None

    def next_position(self, pos: Position, current: LedgerState) -> Position:
        """The position after *pos*: in its ledger while it has (or, being *current*, may
        get) more entries, else the first entry of the next ledger that has or may get one."""
        led = self.by_id.get(pos.ledger_id)
        if led is not None and (led is current or pos.entry_id + 1 < led.next_entry_id):
            return Position(pos.ledger_id, max(pos.entry_id + 1, 0))
        ids = self.ids
        for i in range(bisect.bisect_right(ids, pos.ledger_id), len(ids)):
            following = self.by_id[ids[i]]
            if following.next_entry_id > 0 or following is current:
                return Position(following.ledger_id, 0)
        return Position(pos.ledger_id, pos.entry_id + 1)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        if end_inclusive <= start_exclusive:
            return 0
        ids = self.ids
        total = 0
        for i in range(bisect.bisect_left(ids, start_exclusive.ledger_id), len(ids)):
            ledger_id = ids[i]
            if ledger_id > end_inclusive.ledger_id:
                break
            led = self.by_id[ledger_id]
            lo = start_exclusive.entry_id + 1 if ledger_id == start_exclusive.ledger_id else 0
            hi = led.confirmed
            if ledger_id == end_inclusive.ledger_id:
                hi = min(hi, end_inclusive.entry_id + 1)
            total += max(0, hi - lo)
        return total

    def number_of_entries(self) -> int:
        return sum(led.confirmed for led in self.by_id.values())

    def total_size_bytes(self) -> int:
        """The sum of the ledgers' size_bytes (kept as they are set: O(1))."""
        return self.sizes.bytes

    def infos(self) -> list[LedgerInfo]:
        return [
            LedgerInfo(led.ledger_id, led.confirmed, led.size_bytes, led.segment.created_ms,
                       led.sealed)
            for led in (self.by_id[i] for i in self.ids)
        ]

    def trimmable(self, current: LedgerState, slowest: Position | None,
                  up_to_ledger_id: int | None,
                  relocated: Callable[[int], bool] | None = None) -> list[int]:
        """The leading ledgers a trim may delete: sealed, every entry confirmed, fully below
        *slowest* (the slowest cursor's mark-delete; None: no cursor), none above
        *up_to_ledger_id* when given; never *current*. With *relocated*, a ledger that
        *slowest* still holds but whose pending entries were copied forward
        (``relocated(ledger_id)``, storage/relocation.py) is listed (its segment may go; the
        caller keeps its state as a ghost), and a held ledger that was not is passed over."""
        deleted: list[int] = []
        for ledger_id in self.ids:
            led = self.by_id[ledger_id]
            if led is current or not led.sealed or led.next_entry_id != led.confirmed:
                break
            if up_to_ledger_id is not None and ledger_id > up_to_ledger_id:
                break
            if slowest is not None and slowest < Position(ledger_id, led.confirmed - 1):
                if relocated is None:
                    break
                if not relocated(ledger_id):
                    continue  # held, and kept; a later one may have been copied forward
            deleted.append(ledger_id)
        return deleted
