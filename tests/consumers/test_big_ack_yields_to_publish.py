"""A big ACK applied in slices lets a publish on its store through: while appends wait for the
storage threads, each next slice waits for them to come back, a bounded time, and a publish
that does not come back does not stop it: every id is applied, in order, and answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.net import sliced
from broker.net.consumers import ConsumerSide
from broker.net.sliced import SLICE_IDS
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from storage import SegmentStore, StorageConfig
from storage.positions import Position
from tests.consumers.test_dispatch_unit import FakeConnection, StubTopic, _entry, _settle_dispatch
from tests.consumers.test_dispatch_yields_to_publish import WAIT_S, _GatedWrites, record_waits

ENTRIES = 4 * SLICE_IDS     # four slices


class _ReadingConnection(FakeConnection):
    """Records when the consumer side holds and resumes reading the socket; its service has
    no transactions."""

    service = SimpleNamespace(transactions=None)

    def __init__(self) -> None:
        super().__init__()
        self.holds: list[bool] = []

    def hold_reading(self, held: bool) -> None:
        self.holds.append(held)


def _big_ack(ids: list[tuple[int, int]]) -> pb.CommandAck:
    cmd = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, request_id=9)
    for ledger_id, entry_id in ids:
        cmd.message_id.add(ledgerId=ledger_id, entryId=entry_id)
    return cmd


async def test_a_big_ack_waits_for_a_publish_between_slices_a_bounded_time_then_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sliced, "APPENDS_WAIT_S", 0.001)   # the bound, whatever it is
    ops = _GatedWrites()
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False), file_ops=ops)
    try:
        ledger = await store.open_ledger("persistent://public/default/acked")
        other = await store.open_ledger("persistent://public/default/other")
        for i in range(ENTRIES):
            await ledger.append(_entry(i))
        sub = await Subscription.open(StubTopic(ledger), "s",  # type: ignore[arg-type]
                                      durable=True, initial_position="earliest")
        conn = _ReadingConnection()
        side = ConsumerSide(conn)  # type: ignore[arg-type]
        consumer = Consumer(side, 1, name="c", sub_type=1)
        side.attach(consumer, sub)
        await sub.add_consumer(consumer)
        dispatcher = sub.dispatcher
        assert dispatcher is not None
        consumer.permits = ENTRIES
        dispatcher.schedule()
        await _settle_dispatch(sub)
        delivered = conn.message_ids()
        assert len(delivered) == ENTRIES

        waits = record_waits(monkeypatch)
        ops.armed = True
        publish = other.append(b"published meanwhile")   # held in the write thread
        assert ledger.appends_in_flight.batches == 1
        side.handle_ack(_big_ack(delivered))
        assert conn.holds == [True]      # reading held while the slices run
        for _ in range(10_000):          # bounded: each wait gives up after its 1 ms
            if conn.holds[-1] is False:
                break
            await asyncio.sleep(0.001)
        # every slice found the publish in flight and waited for it, its bound at most,
        # then went on: the whole ACK applied while the publish is held
        assert waits and all(w == (1, 0.001, False) for w in waits)
        assert len(waits) == ENTRIES // SLICE_IDS
        assert not publish.done()
        assert sub.cursor.mark_delete_position == Position(*delivered[-1])
        responses = [c for c in conn.commands if c.type == pb.BaseCommand.ACK_RESPONSE]
        assert [r.ackResponse.request_id for r in responses] == [9]
        assert not responses[0].ackResponse.HasField("error")
        assert conn.holds == [True, False]

        ops.release.set()
        await asyncio.wait_for(publish, WAIT_S)
        assert ledger.appends_in_flight.batches == 0
        # nothing in flight: a big ACK's slices go on without waiting
        waits.clear()
        more = [await ledger.append(_entry(ENTRIES + i)) for i in range(300)]
        consumer.permits = 300
        dispatcher.schedule()
        await _settle_dispatch(sub)
        side.handle_ack(_big_ack([(p.ledger_id, p.entry_id) for p in more]))
        for _ in range(10_000):
            if conn.holds[-1] is False:
                break
            await asyncio.sleep(0)
        assert conn.holds[-1] is False and waits == []
    finally:
        ops.release.set()
        await store.close()
