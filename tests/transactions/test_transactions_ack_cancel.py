"""A transactional acknowledgement whose request is cancelled (its connection went) while its
record is being written, over a real segment store whose writer thread is held on an event (no
sleeps): once the record is durable the acknowledgement is pending in the running broker too,
as a restart's replay of the log would have it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.transactions.service import TransactionService
from storage import Position, SegmentStore, StorageConfig
from storage.writer import CallInWriter

TOPIC = "persistent://public/default/acked"
CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0, fsync=False, read_threads=1,
                       group_commit_max_delay_ms=0, segment_prezero_bytes=0)
HOUR_MS = 3600 * 1000
WAIT = 10.0


class FakeCursor:
    mark_delete_position = Position(7, -1)
    read_position = Position(7, 100)

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self.mark_delete_position


class FakeSub:
    """The subscription as the pending-ack store sees it (nothing acknowledged yet)."""

    def __init__(self) -> None:
        self.cursor = FakeCursor()
        self.batch_acks: dict[Position, int] = {}


async def _no_topic(name: str) -> None:
    return None


async def test_a_cancelled_transactional_ack_is_pending_once_its_record_is_durable(
        tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    service = TransactionService(store, asyncio.get_running_loop())
    await service.start(_no_topic)
    gate = threading.Event()
    try:
        txn = await service.coordinator.new_txn(HOUR_MS)
        logged = asyncio.Event()
        log_ack = service._log_ack

        def held(*args: Any) -> asyncio.Future[None]:
            # the writer thread waits on the gate before the ack's record
            store.writer._control(CallInWriter(lambda: gate.wait(WAIT) and None))
            done = log_ack(*args)
            logged.set()
            return done

        service._log_ack = held  # type: ignore[method-assign]
        sub = FakeSub()
        pos = Position(sub.cursor.read_position.ledger_id, 1)
        # the subscription is not added yet: the ack runs in the request's task
        acking = asyncio.ensure_future(
            service.acknowledge(txn, TOPIC, "s", [(pos, None)], False, sub))  # type: ignore[arg-type]
        await logged.wait()
        acking.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await acking
        await service.coordinator.new_txn(HOUR_MS)   # a later record: the ack's is durable
        assert service.pending_store(TOPIC, "s").holds(pos)
        assert service.coordinator.open_meta(txn).pending_acks == 1
    finally:
        gate.set()
        await service.close()
        await store.close()


