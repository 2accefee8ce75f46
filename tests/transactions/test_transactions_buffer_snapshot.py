"""Snapshots of a topic's transaction buffer (broker/transactions/buffer_snapshot.py) over a real
segment store: a restart reads only the entries after the snapshot, and an entry of a
transaction that never added its topic is found again after a restart (hidden once aborted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.buffer_snapshot import BufferState
from broker.transactions.ids import TxnId
from broker.transactions.service import TransactionService, TransactionSettings
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage import ManagedLedger, Position, SegmentStore, StorageConfig

TOPIC = "persistent://public/default/snap"
CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0, fsync=False, read_threads=1,
                       group_commit_max_delay_ms=0, segment_prezero_bytes=0)
HOUR_MS = 3600 * 1000


class _Topic:
    def __init__(self, ledger: ManagedLedger) -> None:
        self.ledger = ledger

    def ack_target(self, subscription: str) -> None:
        return None


class _Sink:
    def __init__(self, future: asyncio.Future[Position]) -> None:
        self.future = future

    def entries_durable(self, lid: int, eid: int, count: int) -> None:
        self.future.set_result(Position(lid, eid))

    def entries_failed(self, count: int, error: BaseException) -> None:
        self.future.set_exception(error)


class Broker:
    """A store, a transaction service and the one topic, loaded as the broker loads it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.topic: _Topic | None = None
        self.scans: list[tuple[int, bool]] = []   # (entries read, from a snapshot)

    async def __aenter__(self) -> Broker:
        self.store = await SegmentStore.open(self.root, CONFIG)
        self.service = TransactionService(self.store, asyncio.get_running_loop(),
                                          TransactionSettings(snapshot_max_transactions=1))
        await self.service.start(self.load)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.service.close()
        await self.store.close()

    async def load(self, name: str) -> _Topic | None:
        if name != TOPIC:
            return None
        if self.topic is None:
            ml = await self.store.open_ledger(TOPIC)
            buffer = self.service.buffer_for(TOPIC)
            recover = buffer.recover

            async def counted(ledger: ManagedLedger, start: BufferState | None = None) -> int:
                read = await recover(ledger, start)
                self.scans.append((read, start is not None))
                return read

            buffer.recover = counted  # type: ignore[method-assign]
            await self.service.attach(buffer, ml, lambda: None)
            self.topic = _Topic(ml)
        return self.topic

    @property
    def buffer(self) -> TopicTransactionBuffer:
        return self.service.buffer_for(TOPIC)

    async def publish(self, txn: TxnId | None, n: int) -> list[Position]:
        topic = await self.load(TOPIC)
        assert topic is not None
        out: list[Position] = []
        for i in range(n):
            md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
            if txn is not None:
                md.txnid_most_bits, md.txnid_least_bits = txn
            sink = _Sink(asyncio.get_running_loop().create_future())
            data = [encode_entry(md, b"x")]
            topic.ledger.append_run(data, self.buffer.sink_for(data, sink))
            out.append(await sink.future)
        return out


async def test_a_restart_reads_only_the_entries_after_the_snapshot(tmp_path: Path) -> None:
    async with Broker(tmp_path) as b:
        txn = await b.service.coordinator.new_txn(HOUR_MS)
        await b.service.add_partitions(txn, [TOPIC])
        await b.publish(None, 50)
        produced = await b.publish(txn, 3)
        await b.service.coordinator.end(txn, False)     # aborted: a snapshot after one end
        await b.service.coordinator.settled()
        await b.publish(None, 5)                        # the tail
        assert b.service.snapshots.written >= 2
    async with Broker(tmp_path) as b:
        await b.load(TOPIC)
        assert b.scans == [(5, True)]                   # the 5 plain entries after it
        assert all(b.buffer.hides(p) for p in produced)   # still hidden (from the snapshot)


async def test_a_send_to_a_topic_never_added_is_found_again_after_a_restart(
        tmp_path: Path) -> None:
    async with Broker(tmp_path) as b:
        await b.load(TOPIC)                             # loaded before: snapshot at its end
        txn = await b.service.coordinator.new_txn(HOUR_MS)
        produced = await b.publish(txn, 2)              # no ADD_PARTITION_TO_TXN
        assert TOPIC not in b.service.registered_topics()
    # "crash": no unload, so no snapshot after the sends
    async with Broker(tmp_path) as b:
        topic = await b.load(TOPIC)
        assert topic is not None and b.scans == [(2, True)]
        assert b.buffer.holds(txn)                      # open: held back, not shown
        assert b.buffer.max_read_position(topic.ledger.last_confirmed) < produced[0]
        await b.service.coordinator.end(txn, False)     # its timeout, say
        await b.service.coordinator.settled()
        assert all(b.buffer.hides(p) for p in produced)
