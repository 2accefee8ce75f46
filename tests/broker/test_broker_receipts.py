"""SEND -> SEND_RECEIPT without sockets or storage: the producer against a topic stand-in whose
append futures the test resolves.

Pins the two answer paths of :mod:`broker.topics.producer`: receipts leave from the ledger's durable
listener (:meth:`broker.topics.topic.Topic._on_durable`) before the loop turns, and a failed append
(for which the ledger calls no listener) is still answered, with everything queued behind it,
in order, through the futures' done-callbacks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from test_broker_states import make_connection

from broker.topics.producer import Producer
from broker.topics.topic import Topic
from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.frames import Frame
from storage.errors import PersistenceError
from storage.positions import Position

T = pb.BaseCommand


class FakeTopic:
    """What a Producer uses of its Topic; appends return futures the test resolves."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.full = "persistent://public/default/receipts"
        self.futures: list[asyncio.Future[Any]] = []
        self.awaiting_durable: dict[Producer, None] = {}
        self.publish_latency_buckets = [0] * 16
        self.recorded = 0
        self.failures: list[object] = []
        self._notify_scheduled = True  # Topic._on_durable: no subscription notification

    def publish(self, entry: bytes) -> tuple[asyncio.Future[Any], int, bool]:
        fut: asyncio.Future[Any] = self.loop.create_future()
        self.futures.append(fut)
        return fut, 1, False

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None:
        self.recorded += messages

    def on_persistence_failure(self, exc: object) -> None:
        self.failures.append(exc)

    def remove_producer(self, producer: Producer) -> None:
        self.awaiting_durable.pop(producer, None)


def send_frame(sequence_id: int) -> Frame:
    cmd = T(type=T.SEND)
    cmd.send.producer_id = 1
    cmd.send.sequence_id = sequence_id
    return Frame(cmd, entry=b"entry-%d" % sequence_id, checksum_valid=True)


def start_three_sends() -> tuple[Any, Any, FakeTopic, Producer]:
    conn, transport = make_connection()
    topic = FakeTopic()
    producer = Producer(conn, topic, 1, "p", pb.Shared, False, {})  # type: ignore[arg-type]
    conn.producers[1] = producer
    for seq in range(3):
        frame = send_frame(seq)
        producer.on_send(frame, frame.command.send)
    return conn, transport, topic, producer


async def test_receipts_leave_from_the_durable_listener_in_send_order() -> None:
    conn, transport, topic, producer = start_three_sends()
    assert list(topic.awaiting_durable) == [producer]
    for entry_id, fut in enumerate(topic.futures[:2]):
        fut.set_result(Position(7, entry_id))
    Topic._on_durable(topic, Position(7, 1))  # type: ignore[arg-type]
    # Written before the loop turned: no done-callback has run yet.
    receipts = transport.frames()
    assert [(f.type, f.send_receipt.sequence_id, f.send_receipt.message_id.entryId)
            for f in receipts] == [(T.SEND_RECEIPT, 0, 0), (T.SEND_RECEIPT, 1, 1)]
    assert conn.throttle.pending_requests == 1 and producer.pending == 1
    assert list(topic.awaiting_durable) == [producer]  # the third send is still in flight
    topic.futures[2].set_result(Position(7, 2))
    await asyncio.sleep(0)  # the fallback answers it; the early ones are not answered twice
    await asyncio.sleep(0)
    receipts = transport.frames()
    assert [f.send_receipt.sequence_id for f in receipts] == [0, 1, 2]
    assert conn.throttle.pending_requests == 0 and topic.awaiting_durable == {}
    assert topic.recorded == 3


async def test_failed_append_answers_it_and_every_later_send_in_order() -> None:
    conn, transport, topic, producer = start_three_sends()
    first, second, third = topic.futures
    first.set_result(Position(7, 0))
    second.set_exception(PersistenceError("fdatasync failed"))  # no listener call for it
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    third.set_result(Position(7, 2))  # durable, but behind a failure: never acknowledged
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    answers = transport.frames()
    assert [f.type for f in answers] == [T.SEND_RECEIPT, T.SEND_ERROR, T.SEND_ERROR]
    assert [f.send_error.sequence_id for f in answers[1:]] == [1, 2]
    assert all(f.send_error.error == ServerError.PersistenceError for f in answers[1:])
    assert conn.throttle.pending_requests == 0 and producer.pending == 0
    assert topic.awaiting_durable == {} and len(topic.failures) == 1
