"""Cursor helpers shared by subscriptions and dispatchers: reader cursors and wire ids.

Theory of operation
-------------------
Durable subscriptions use the storage ``ManagedCursor``. A reader (non-durable subscription)
gets a :class:`MemoryCursor` with the same interface, living as long as the reader: its acks are
a set of positions beyond its mark-delete position. Where a reader starts follows Pulsar's
NonDurableCursorImpl (:func:`reader_mark_delete`): reading begins right after the mark-delete
position, so a start id ``(l, e)`` becomes mark-delete ``(l, e - 1)`` and the entry itself is
delivered (the client drops it unless ``startMessageIdInclusive``).

Ids arrive as uint64 on the wire: Pulsar's ``-1`` is ``2**64 - 1`` (:func:`wire_position`), and
``MessageId.latest`` is ``(Long.MAX_VALUE, Long.MAX_VALUE)``. Acks of ids beyond the last
confirmed entry are ignored and seek targets beyond the end become the end (as storage's
ManagedCursor does): a client naming a future id never loses the message published there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pyroaring import BitMap

from storage.individually_deleted import MAX_ENTRY_ID
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["LATEST_LEDGER", "DeletedBeyond", "MemoryCursor", "ReaderDeletes", "SubscriptionCursor",
           "before", "entry_exists",
           "normalize_target",
           "reader_mark_delete", "tail_position", "wire_position"]

LATEST_LEDGER = (1 << 63) - 1  # Pulsar's MessageId.latest ledger id (Long.MAX_VALUE)


def wire_position(ledger_id: int, entry_id: int) -> tuple[int, int]:
    """uint64 wire ids as the signed longs the Java broker sees (-1 arrives as 2**64-1)."""
    if ledger_id >= 1 << 63:
        ledger_id -= 1 << 64
    if entry_id >= 1 << 63:
        entry_id -= 1 << 64
    return ledger_id, entry_id


def before(pos: Position) -> Position:
    return Position(pos.ledger_id, pos.entry_id - 1)


def tail_position(ledger: ManagedLedger) -> Position:
    """The last entry, or (current ledger, -1) when the topic holds none (Pulsar's LAC)."""
    last: Position | None = ledger.last_confirmed
    if last is not None:
        return last
    infos = ledger.ledgers
    return Position(infos[-1].ledger_id, -1) if infos else Position(-1, -1)


class DeletedBeyond(Protocol):
    """What subscriptions and dispatchers read of a cursor's individually acknowledged
    entries (storage's ``IndividuallyDeleted``, a reader's :class:`ReaderDeletes`)."""

    def __len__(self) -> int: ...

    def any_between(self, first: Position, last: Position) -> bool:
        """Is some position from *first* to *last* (both included) acknowledged one by one?"""
        ...


class ReaderDeletes:
    """A reader's individually acknowledged positions beyond its mark-delete position."""

    __slots__ = ("positions",)

    def __init__(self) -> None:
        self.positions: set[Position] = set()

    def __len__(self) -> int:
        return len(self.positions)

    def any_between(self, first: Position, last: Position) -> bool:
        return any(first <= p <= last for p in self.positions)


class SubscriptionCursor(Protocol):
    """What subscriptions and dispatchers use of a cursor: storage's ``ManagedCursor`` (durable)
    or a reader's :class:`MemoryCursor`."""

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def read_position(self) -> Position: ...

    @read_position.setter
    def read_position(self, pos: Position) -> None: ...

    @property
    def revision(self) -> int: ...

    @revision.setter
    def revision(self, value: int) -> None: ...

    @property
    def properties(self) -> dict[str, str]: ...

    @property
    def individually_deleted(self) -> DeletedBeyond: ...

    @property
    def backlog(self) -> int: ...

    @property
    def persisted_size_bytes(self) -> int: ...

    def is_deleted(self, pos: Position) -> bool: ...

    def deleted_in(self, ledger_id: int) -> tuple[int, BitMap | None]:
        """What :meth:`is_deleted` reads for one ledger's entries: (the highest entry id
        acknowledged cumulatively, -1 for none, ``MAX_ENTRY_ID`` for all; the individually
        acknowledged ids, or None). Ask again after a :meth:`delete`."""
        ...

    def delete(self, positions: Iterable[Position]) -> None: ...

    def mark_delete(self, pos: Position) -> None: ...

    def reset(self, pos: Position) -> None: ...

    async def flush(self) -> None: ...


class MemoryCursor:
    """A non-durable cursor for readers, with the ManagedCursor interface the broker uses."""

    def __init__(self, ledger: ManagedLedger, name: str, mark_delete: Position) -> None:
        self.name = name
        self._ledger = ledger
        self._md = mark_delete
        self.read_position = ledger.next_position(mark_delete)
        self.revision = 0
        self.individually_deleted = ReaderDeletes()
        self._properties: dict[str, str] = {}
        self.persisted_size_bytes = 0

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def set_property(self, key: str, value: str) -> None:
        self._properties[key] = value

    def remove_property(self, key: str) -> None:
        self._properties.pop(key, None)

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self._md or pos in self.individually_deleted.positions

    def deleted_in(self, ledger_id: int) -> tuple[int, BitMap | None]:
        """As :meth:`storage.cursor.ManagedCursor.deleted_in` (the ids a copy, not live)."""
        md = self._md
        if ledger_id < md.ledger_id:
            return MAX_ENTRY_ID, None
        through = md.entry_id if ledger_id == md.ledger_id else -1
        ids = [p.entry_id for p in self.individually_deleted.positions
               if p.ledger_id == ledger_id and 0 <= p.entry_id < MAX_ENTRY_ID]
        return through, BitMap(ids) if ids else None

    def delete(self, positions: Iterable[Position]) -> None:
        last = self._ledger.last_confirmed
        if last is None:
            return
        self.individually_deleted.positions.update(p for p in positions if self._md < p <= last)
        self._advance()

    def mark_delete(self, pos: Position) -> None:
        """Ignored beyond last_confirmed, as storage's ManagedCursor (and Pulsar's) does."""
        last = self._ledger.last_confirmed
        if pos > self._md and last is not None and pos <= last:
            self._md = pos
            self._advance()

    def reset(self, pos: Position) -> None:
        self.read_position = pos
        self._md = before(pos)
        self.individually_deleted.positions.clear()

    def _advance(self) -> None:
        last = self._ledger.last_confirmed
        deleted = self.individually_deleted
        while last is not None and self._md < last:
            nxt = self._ledger.next_position(self._md)
            if nxt not in deleted.positions:
                break
            self._md = nxt
        deleted.positions = {p for p in deleted.positions if p > self._md}
        if self.read_position <= self._md:
            self.read_position = self._ledger.next_position(self._md)

    @property
    def backlog(self) -> int:
        last = self._ledger.last_confirmed
        if last is None or last <= self._md:
            return 0
        between = self._ledger.entries_between(self._md, last)
        return max(0, between - len(self.individually_deleted))

    async def flush(self) -> None:
        return None


def normalize_target(ledger: ManagedLedger, ledger_id: int, entry_id: int) -> Position:
    """A seek target: MessageId.latest -> after the last entry, earliest -> the first entry."""
    after_last = ledger.next_position(tail_position(ledger))
    if ledger_id >= LATEST_LEDGER:
        return after_last
    if ledger_id < 0 or entry_id < 0:
        first = ledger.first_position
        return first if first is not None else after_last
    # Beyond the end: the end, as Pulsar's asyncResetCursor makes such a position "latest"
    # (never a position the ledger has not issued: later messages would be skipped).
    return min(Position(ledger_id, entry_id), after_last)


def entry_exists(ledger: ManagedLedger, pos: Position) -> bool:
    """Is *pos* an entry this topic holds (or held): at or before the last confirmed entry and
    inside its ledger's extent?"""
    last = ledger.last_confirmed
    if last is None or pos > last or pos.entry_id < 0:
        return False
    return pos.entry_id < ledger.ledger_extent(pos.ledger_id)[0]


def reader_mark_delete(
    ledger: ManagedLedger, start: tuple[int, int] | None, initial_position: str
) -> Position:
    """Where a reader's cursor starts (mark-delete; reading begins right after it).

    As Pulsar's NonDurableCursorImpl: no start id or MessageId.latest -> the initial position;
    MessageId.earliest -> before the first entry; a real id (l, e) -> (l, e - 1), so the entry
    itself is delivered and the client drops it unless startMessageIdInclusive.
    """
    if start is not None:
        lid, eid = wire_position(*start)
        if lid >= LATEST_LEDGER:
            start = None
        elif lid < 0 or eid < 0:
            initial_position = "earliest"
            start = None
        else:
            return Position(lid, eid - 1)
    if initial_position == "earliest":
        first = ledger.first_position
        if first is not None:
            return before(first)
    return tail_position(ledger)
