"""ManagedLedger.append_run: a run of entries with one completion (the publish hot path)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage import Position, SegmentStore, StorageConfig
from storage.errors import LedgerClosedError

TOPIC = "persistent://public/default/runs"


class RecordingSink:
    """A DurableSink that records its reports and sets an event once *expected* arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.durable: list[tuple[int, int, int]] = []
        self.failed: list[tuple[int, BaseException]] = []
        self.settled = asyncio.Event()

    def _count(self) -> int:
        return sum(c for _, _, c in self.durable) + sum(c for c, _ in self.failed)

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self.durable.append((ledger_id, first_entry_id, count))
        if self._count() >= self.expected:
            self.settled.set()

    def entries_failed(self, count: int, error: BaseException) -> None:
        self.failed.append((count, error))
        if self._count() >= self.expected:
            self.settled.set()


async def _open(root: Path, **kw: object) -> SegmentStore:
    return await SegmentStore.open(root, StorageConfig(**kw))  # type: ignore[arg-type]


async def test_run_is_reported_once_durable_in_order_with_futures_around_it(
        tmp_path: Path) -> None:
    store = await _open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    seen: list[Position] = []
    ml.add_listener(seen.append)
    before = ml.append(b"before")
    sink = RecordingSink(3)
    ml.append_run([b"r0", b"r1", b"r2"], sink)
    after = ml.append(b"after")
    assert sink.durable == []  # nothing reported before the group commit is durable
    await asyncio.wait_for(sink.settled.wait(), 10)
    first = await before
    assert sink.durable == [(first.ledger_id, 1, 3)]
    assert await after == Position(first.ledger_id, 4)
    assert ml.last_confirmed == Position(first.ledger_id, 4)
    got = await ml.read_entries(first, 10)
    assert [e.data for e in got] == [b"before", b"r0", b"r1", b"r2", b"after"]
    await store.close()


async def test_run_split_by_rollover_is_reported_per_ledger(tmp_path: Path) -> None:
    store = await _open(tmp_path, max_entries_per_ledger=4)
    ml = await store.open_ledger(TOPIC)
    sink = RecordingSink(10)
    ml.append_run([b"e%d" % i for i in range(10)], sink)
    await asyncio.wait_for(sink.settled.wait(), 10)
    assert [(e, c) for _, e, c in sink.durable] == [(0, 4), (0, 4), (0, 2)]
    ledger_ids = [lid for lid, _, _ in sink.durable]
    assert ledger_ids == sorted(set(ledger_ids))
    assert [i.entries for i in ml.ledgers] == [4, 4, 2]
    await store.close()


async def test_run_on_a_closed_ledger_fails_on_a_later_callback(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await ml.close()
    sink = RecordingSink(2)
    ml.append_run([b"a", b"b"], sink)
    assert sink.failed == []  # never reported from inside the caller
    await asyncio.wait_for(sink.settled.wait(), 10)
    assert [count for count, _ in sink.failed] == [2]
    assert isinstance(sink.failed[0][1], LedgerClosedError)
    await store.close()


async def test_close_waits_for_runs_in_flight(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    sink = RecordingSink(2)
    ml.append_run([b"a", b"b"], sink)
    await ml.close()
    assert sink.settled.is_set() and sink.failed == []
    assert sum(c for _, _, c in sink.durable) == 2
    await store.close()
