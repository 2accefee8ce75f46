"""Group commit of transaction-log records (broker/transactions/log_batch.py), against a fake
ledger whose writes become durable when the test says so."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.transactions.log_batch import BatchSettings, RecordBatcher, unpack
from storage.errors import PersistenceError
from storage.positions import Position


class FakeLedger:
    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self.pending: list[asyncio.Future[Position]] = []

    def append(self, data: bytes) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.entries.append(data)
        self.pending.append(fut)
        return fut

    def durable(self, error: BaseException | None = None) -> None:
        """Every queued entry becomes durable (or fails)."""
        for i, fut in enumerate(self.pending):
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(Position(1, i))
        self.pending = []


def rec(n: int) -> bytes:
    return json.dumps({"op": "ack", "n": n}).encode()


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_records_arriving_while_a_write_is_in_flight_share_the_next_entry() -> None:
    ledger = FakeLedger()
    batcher = RecordBatcher(ledger.append, BatchSettings(max_delay_ms=0),
                            asyncio.get_running_loop())
    first = batcher.submit(rec(0))
    await turn()                      # the first write is with the storage
    rest = [batcher.submit(rec(n)) for n in (1, 2, 3)]
    assert len(ledger.entries) == 1   # gathered, not written
    ledger.durable()
    await turn()
    assert first.done() and not any(f.done() for f in rest)   # none answered before durable
    assert len(ledger.entries) == 2
    group = json.loads(ledger.entries[1])
    assert [r["n"] for r in unpack(group)] == [1, 2, 3]
    ledger.durable()
    await turn()
    assert [f.result() for f in rest] == [Position(1, 0)] * 3
    assert (batcher.entries_written, batcher.records_written) == (2, 4)


async def test_records_of_one_loop_turn_go_to_the_storage_at_once() -> None:
    ledger = FakeLedger()
    batcher = RecordBatcher(ledger.append, BatchSettings(), asyncio.get_running_loop())
    futs = [batcher.submit(rec(n)) for n in range(3)]
    assert len(ledger.entries) == 3   # the storage groups them under one fsync itself
    ledger.durable()
    await turn()
    assert all(f.done() for f in futs)


async def test_a_full_group_is_written_at_once_and_the_delay_bounds_the_wait() -> None:
    ledger = FakeLedger()
    batcher = RecordBatcher(ledger.append, BatchSettings(max_records=2, max_delay_ms=5),
                            asyncio.get_running_loop())
    batcher.submit(rec(0))
    await turn()
    batcher.submit(rec(1))
    batcher.submit(rec(2))            # two gathered: full
    assert len(ledger.entries) == 2
    await turn()
    late = batcher.submit(rec(3))
    assert len(ledger.entries) == 2
    await asyncio.sleep(0.05)         # the first is still in flight: the timer writes it
    assert len(ledger.entries) == 3 and not late.done()
    ledger.durable()
    await turn()
    assert late.done()


async def test_a_failed_write_fails_every_record_of_its_group() -> None:
    ledger = FakeLedger()
    batcher = RecordBatcher(ledger.append, BatchSettings(max_delay_ms=0),
                            asyncio.get_running_loop())
    batcher.submit(rec(0))
    await turn()
    group = [batcher.submit(rec(n)) for n in (1, 2)]
    ledger.durable()
    await turn()
    ledger.durable(PersistenceError("disk gone"))
    await turn()
    for fut in group:
        with pytest.raises(PersistenceError):
            fut.result()


async def test_disabled_writes_each_record_alone_and_drain_waits() -> None:
    ledger = FakeLedger()
    batcher = RecordBatcher(ledger.append, BatchSettings(enabled=False),
                            asyncio.get_running_loop())
    batcher.submit(rec(0))
    await turn()
    batcher.submit(rec(1))
    assert len(ledger.entries) == 2
    drained = asyncio.ensure_future(batcher.drain())
    await turn()
    assert not drained.done()
    ledger.durable()
    await drained


def test_unpack_reads_single_records_and_groups() -> None:
    assert unpack({"op": "new", "m": 0}) == [{"op": "new", "m": 0}]
    assert unpack({"op": "batch", "recs": [{"op": "a"}, 3, {"op": "b"}]}) == [
        {"op": "a"}, {"op": "b"}]
    assert unpack({"op": "batch", "recs": "x"}) == []
