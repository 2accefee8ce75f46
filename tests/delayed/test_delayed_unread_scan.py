"""The listing's scan of what a subscription's dispatcher has not read yet
(:mod:`broker.delayed.unread`), against fakes of the cursor and the ledger."""

from __future__ import annotations

import asyncio

import pytest
from pyroaring import BitMap

from broker.delayed import unread
from broker.delayed.indexed import IndexedPositions
from broker.delayed.unread import UnreadScan, refresh
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage.positions import Entry, Position

NOW = 1_700_000_000_000


def _entry(deliver_at: int | None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=NOW)
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    return encode_entry(md, b"x")


class FakeLedger:
    """Ledgers of consecutive entry ids; ``times[pos]`` the entry's deliver time (None: none)."""

    def __init__(self, ledgers: dict[int, list[int | None]]) -> None:
        self.ledgers = ledgers
        self.reads = 0

    @property
    def positions(self) -> list[Position]:
        return [Position(lid, e) for lid, times in sorted(self.ledgers.items())
                for e in range(len(times))]

    @property
    def last(self) -> Position:
        return self.positions[-1]

    def next_position(self, pos: Position) -> Position:
        later = [p for p in self.positions if p > pos]
        return later[0] if later else Position(pos.ledger_id, pos.entry_id + 1)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        return sum(1 for p in self.positions if start_exclusive < p <= end_inclusive)

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        self.reads += 1
        await asyncio.sleep(0)
        got = [p for p in self.positions if p >= start][:max_entries]
        return [Entry(p, _entry(self.ledgers[p.ledger_id][p.entry_id])) for p in got]

    def append(self, ledger_id: int, deliver_at: int | None) -> None:
        self.ledgers.setdefault(ledger_id, []).append(deliver_at)


class FakeCursor:
    def __init__(self, read_position: Position) -> None:
        self.read_position = read_position
        self.mark_delete = Position(-1, -1)
        self.acked: dict[int, BitMap] = {}

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos.entry_id in self.acked.get(pos.ledger_id, ())

    def deleted_in(self, ledger_id: int) -> tuple[int, BitMap | None]:
        md = self.mark_delete
        through = (1 << 32) if ledger_id < md.ledger_id else (
            md.entry_id if ledger_id == md.ledger_id else -1)
        return through, self.acked.get(ledger_id)


def _held(scan: UnreadScan) -> list[tuple[int, int, int]]:
    ts, pos = scan.held.index.columns()
    return sorted((t, p >> 32, p & 0xFFFFFFFF) for t, p in zip(ts, pos, strict=True)
                  if scan.held.contains(p >> 32, p & 0xFFFFFFFF))


def _scan(start: Position) -> UnreadScan:
    return UnreadScan(start, lambda: None)


async def test_scheduled_entries_past_the_read_position_are_held_by_due_time() -> None:
    ledger = FakeLedger({3: [NOW + 50, None, NOW - 5, NOW + 10], 4: [NOW + 30]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    # the plain entry and the one already due are not scheduled
    assert _held(scan) == [(NOW + 10, 3, 3), (NOW + 30, 4, 0), (NOW + 50, 3, 0)]
    assert scan.not_read == 0 and scan.next == Position(4, 1)
    scan.close()


async def test_what_the_dispatcher_read_or_was_acknowledged_drops_out() -> None:
    ledger = FakeLedger({3: [NOW + 50, NOW + 40, NOW + 30, NOW + 20], 4: [NOW + 10, NOW + 5]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert len(scan.held) == 6
    cursor.read_position = Position(3, 2)     # the dispatcher read 3:0 and 3:1
    cursor.acked[4] = BitMap([0])             # 4:0 cancelled
    reads = ledger.reads
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 5, 4, 1), (NOW + 20, 3, 3), (NOW + 30, 3, 2)]
    assert ledger.reads == reads              # nothing new: nothing read again
    cursor.read_position = Position(4, 0)     # a whole ledger read
    cursor.mark_delete = Position(4, 0)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 5, 4, 1)]
    cursor.read_position = Position(4, 2)     # everything read: nothing left, no stale slots
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [] and len(scan.held.index) == 0
    scan.close()


async def test_new_entries_are_read_on_and_a_rewind_starts_over() -> None:
    ledger = FakeLedger({3: [NOW + 50, NOW + 40]})
    cursor = FakeCursor(Position(3, 1))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 40, 3, 1)]
    ledger.append(3, NOW + 45)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 40, 3, 1), (NOW + 45, 3, 2)]
    cursor.read_position = Position(3, 0)     # reset to the start: 3:0 is unread again
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 40, 3, 1), (NOW + 45, 3, 2), (NOW + 50, 3, 0)]
    scan.close()


async def test_the_bound_and_the_budget_leave_the_rest_counted_as_not_read() -> None:
    ledger = FakeLedger({3: [NOW + 100 - i for i in range(10)]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, Position(3, 5), now_ms=NOW, budget=4)
    assert len(scan.held) == 4 and scan.not_read == 2     # 3:4 and 3:5 (3:6.. past the bound)
    await refresh(scan, cursor, ledger, Position(3, 5), now_ms=NOW, budget=4)
    assert len(scan.held) == 6 and scan.not_read == 0
    await refresh(scan, cursor, ledger, None, now_ms=NOW)  # nothing readable: nothing read
    assert len(scan.held) == 6 and scan.not_read == 0
    scan.close()


async def test_the_scan_stops_at_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unread, "MAX_HELD", 3)
    monkeypatch.setattr(unread, "READ_BATCH", 2)
    ledger = FakeLedger({3: [NOW + 100] * 10})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert len(scan.held) == 4 and scan.not_read == 6     # stops at the batch that passed 3
    scan.close()


async def test_an_unused_scan_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unread, "IDLE_S", 0.01)
    dropped = asyncio.Event()
    scan = UnreadScan(Position(3, 0), dropped.set)
    await asyncio.wait_for(dropped.wait(), 10)
    scan.close()


class FakeSchedule:
    def __init__(self) -> None:
        self.gone: dict[int, BitMap] = {}

    def superseded_ids(self, ledger_id: int) -> BitMap | None:
        return self.gone.get(ledger_id)


async def test_what_replace_by_key_superseded_is_not_held() -> None:
    ledger = FakeLedger({3: [NOW + 50, NOW + 40, NOW + 30]})
    cursor = FakeCursor(Position(3, 0))
    schedule = FakeSchedule()
    schedule.gone[3] = BitMap([1])
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, schedule=schedule, now_ms=NOW)
    assert _held(scan) == [(NOW + 30, 3, 2), (NOW + 50, 3, 0)]
    schedule.gone[3].add(2)                   # superseded after the scan read it
    await refresh(scan, cursor, ledger, ledger.last, schedule=schedule, now_ms=NOW)
    assert _held(scan) == [(NOW + 50, 3, 0)]
    scan.close()


async def test_a_scan_mostly_read_meanwhile_starts_over_instead_of_compacting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unread, "COMPACT_FLOOR", 2)
    ledger = FakeLedger({3: [NOW + 100 - i for i in range(10)]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert len(scan.held) == 10
    compactions: list[int] = []
    monkeypatch.setattr(IndexedPositions, "compact", lambda self: compactions.append(1))
    cursor.read_position = Position(3, 7)      # the dispatcher read seven of the ten
    reads = ledger.reads
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert _held(scan) == [(NOW + 91, 3, 9), (NOW + 92, 3, 8), (NOW + 93, 3, 7)]
    assert ledger.reads > reads and not compactions   # read again, not compacted
    assert scan.start == Position(3, 7) and len(scan.held.index) == 3
    scan.close()


async def test_entries_taken_twice_are_held_once() -> None:
    ledger = FakeLedger({3: [NOW + 30, NOW + 10, None, NOW + 20], 4: [NOW + 5]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    entries = await ledger.read_entries(Position(3, 0), 10)
    scan.take(entries, cursor, NOW)
    scan.take(entries[1:], cursor, NOW)     # some held already: one by one, no twin
    assert _held(scan) == [(NOW + 5, 4, 0), (NOW + 10, 3, 1), (NOW + 20, 3, 3),
                           (NOW + 30, 3, 0)]
    assert len(scan.held.index) == 4
    scan.close()


async def test_a_refresh_reads_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unread, "SCAN_SECONDS", 0.0)       # out of time after the first read
    monkeypatch.setattr(unread, "READ_BATCH", 3)
    ledger = FakeLedger({3: [NOW + 100 - i for i in range(10)]})
    cursor = FakeCursor(Position(3, 0))
    scan = _scan(cursor.read_position)
    await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert len(scan.held) + scan.not_read == 10 and scan.not_read >= 7
    for _ in range(10):
        if not scan.not_read:
            break
        await refresh(scan, cursor, ledger, ledger.last, now_ms=NOW)
    assert len(scan.held) == 10 and scan.not_read == 0
    scan.close()
