"""SEND -> SEND_RECEIPT without sockets or storage: the producer against a topic stand-in whose
appended runs the test reports durable or failed.

Pins the one answer path of :mod:`broker.topics.producer`: the receipts leave from the run's own
durable report, in send order, and a failed append is answered, with everything queued behind
it, in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from test_broker_states import make_connection

from broker.topics.dedup_state import RECEIPT_WINDOW, SequenceState
from broker.topics.producer import Producer, ProducerState
from broker.topics.publish_bounds import NO_BOUNDS, SendBounds
from broker.topics.publish_rate import PublishRate, PublishRateLimiter
from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.send_path import SendFrame
from storage.errors import PersistenceError
from storage.positions import Position

T = pb.BaseCommand


class FakeTopic:
    """What a Producer uses of its Topic; the test reports the appended runs."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.full = "persistent://public/default/receipts"
        self.runs: list[tuple[list[bytes], Any]] = []  # (entries, sink) of append_run
        self.publish_latency_buckets = [0] * 16
        self.publish_rate = PublishRateLimiter()
        self.recorded = 0
        self.failures: list[object] = []
        self.producers: dict[str, Producer] = {}

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]:
        return entry, 1, False

    def send_bounds(self) -> SendBounds:
        return NO_BOUNDS   # every SEND through check_publish above

    def append_run(self, entries: list[bytes], sink: Any, messages: Any = ()) -> None:
        self.runs.append((entries, sink))

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None:
        self.recorded += messages

    def on_persistence_failure(self, exc: object) -> None:
        self.failures.append(exc)

    @property
    def admission(self) -> FakeTopic:
        """The stub is its own registry of attached producers."""
        return self

    def remove(self, producer: Producer) -> None:
        self.producers.pop(producer.name, None)


def start_three_sends() -> tuple[Any, Any, FakeTopic, Producer]:
    """Three SENDs of three socket reads: three runs."""
    conn, transport = make_connection()
    topic = FakeTopic()
    producer = Producer(conn.producer_side, topic, 1, "p", pb.Shared, False, {})  # type: ignore[arg-type]
    conn.producer_side.producers[1] = producer
    for seq in range(3):
        producer.on_sends([fast_send(seq)])
    return conn, transport, topic, producer


async def test_receipts_leave_from_the_runs_durable_report_in_send_order() -> None:
    conn, transport, topic, producer = start_three_sends()
    assert [entries for entries, _ in topic.runs] == [[b"entry-0"], [b"entry-1"], [b"entry-2"]]
    topic.runs[0][1].entries_durable(7, 0, 1)
    # Written from the report itself, before the loop turned.
    [receipt] = transport.frames()
    assert (receipt.type, receipt.send_receipt.sequence_id,
            receipt.send_receipt.message_id.entryId) == (T.SEND_RECEIPT, 0, 0)
    topic.runs[1][1].entries_durable(7, 1, 1)
    await asyncio.sleep(0)  # the connection flushes what was written in the same iteration
    receipts = transport.frames()
    assert [(f.type, f.send_receipt.sequence_id, f.send_receipt.message_id.entryId)
            for f in receipts] == [(T.SEND_RECEIPT, 0, 0), (T.SEND_RECEIPT, 1, 1)]
    assert conn.throttle.pending_requests == 1 and producer.pending == 1
    topic.runs[2][1].entries_durable(7, 2, 1)
    await asyncio.sleep(0)  # the connection flushes what was written in the same iteration
    receipts = transport.frames()
    assert [f.send_receipt.sequence_id for f in receipts] == [0, 1, 2]
    assert conn.throttle.pending_requests == 0
    assert topic.recorded == 3


async def test_failed_append_answers_it_and_every_later_send_in_order() -> None:
    conn, transport, topic, producer = start_three_sends()
    first, second, third = (sink for _, sink in topic.runs)
    first.entries_durable(7, 0, 1)
    second.entries_failed(1, PersistenceError("fdatasync failed"))
    third.entries_durable(7, 2, 1)  # durable, but behind a failure: never acknowledged
    await asyncio.sleep(0)
    answers = transport.frames()
    assert [f.type for f in answers] == [T.SEND_RECEIPT, T.SEND_ERROR, T.SEND_ERROR]
    assert [f.send_error.sequence_id for f in answers[1:]] == [1, 2]
    assert all(f.send_error.error == ServerError.PersistenceError for f in answers[1:])
    assert conn.throttle.pending_requests == 0 and producer.pending == 0
    assert len(topic.failures) == 1
    assert producer.state is ProducerState.FAILED


def fast_send(sequence_id: int, *, checksum_valid: bool = True) -> SendFrame:
    return SendFrame(1, sequence_id, 1, 0, b"entry-%d" % sequence_id, checksum_valid, 0)


def start_run(*frames: SendFrame) -> tuple[Any, Any, FakeTopic, Producer]:
    conn, transport = make_connection()
    topic = FakeTopic()
    producer = Producer(conn.producer_side, topic, 1, "p", pb.Shared, False, {})  # type: ignore[arg-type]
    conn.producer_side.producers[1] = producer
    producer.on_sends(list(frames))
    return conn, transport, topic, producer


async def test_one_read_of_sends_is_answered_in_order_when_a_refused_send_splits_the_run() -> None:
    conn, transport, topic, producer = start_run(fast_send(0), fast_send(1, checksum_valid=False),
                                                 fast_send(2), fast_send(3))
    # The refused SEND ends the run before it (queue order = send order); the next one skips
    # its id, so it is not in order and takes the per-entry path (a run of one); then a run.
    assert [entries for entries, _ in topic.runs] == [[b"entry-0"], [b"entry-2"], [b"entry-3"]]
    assert conn.throttle.pending_requests == 4
    first, one, second = (sink for _, sink in topic.runs)
    first.entries_durable(7, 10, 1)
    one.entries_durable(7, 11, 1)
    await asyncio.sleep(0)  # the connection flushes what was written in the same iteration
    answers = transport.frames()
    assert [(f.type, f.send_receipt.sequence_id if f.type == T.SEND_RECEIPT
             else f.send_error.sequence_id) for f in answers] == [
        (T.SEND_RECEIPT, 0), (T.SEND_ERROR, 1), (T.SEND_RECEIPT, 2)]
    assert answers[1].send_error.error == ServerError.ChecksumError
    assert answers[2].send_receipt.message_id.entryId == 11
    assert conn.throttle.pending_requests == 1 and producer.pending == 1
    second.entries_durable(8, 0, 1)
    await asyncio.sleep(0)  # the connection flushes what was written in the same iteration
    last = transport.frames()[-1]
    assert (last.send_receipt.sequence_id, last.send_receipt.message_id.ledgerId,
            last.send_receipt.message_id.entryId) == (3, 8, 0)
    assert conn.throttle.pending_requests == 0
    assert topic.recorded == 3
    assert producer.seq_state.persisted == 3
    assert producer.seq_state.stored_at(2, 2) == (7, 11)
    assert producer.seq_state.stored_at(3, 3) == (8, 0)
    assert producer.seq_state.stored.bounds == [0, 0, 2, 3]  # 1 was never stored


async def test_failed_run_answers_every_send_of_it_and_behind_it_in_order() -> None:
    conn, transport, topic, producer = start_run(fast_send(0), fast_send(1))
    producer.on_sends([fast_send(2)])
    first_sink, second_sink = (sink for _, sink in topic.runs)
    first_sink.entries_failed(2, PersistenceError("fdatasync failed"))
    second_sink.entries_durable(7, 2, 1)  # durable, but behind a failure: never acknowledged
    await asyncio.sleep(0)  # the connection flushes what was written in the same iteration
    answers = transport.frames()
    assert [f.type for f in answers] == [T.SEND_ERROR] * 3
    assert [f.send_error.sequence_id for f in answers] == [0, 1, 2]
    assert all(f.send_error.error == ServerError.PersistenceError for f in answers)
    assert conn.throttle.pending_requests == 0 and producer.pending == 0
    assert len(topic.failures) == 1


async def test_resend_of_a_send_in_flight_in_a_run_waits_for_its_position() -> None:
    _conn, _transport, topic, producer = start_run(fast_send(0))
    pending = producer.pending_append(0, 0)
    assert pending is not None and not pending.done()
    topic.runs[0][1].entries_durable(7, 3, 1)
    assert pending.done()
    assert pending.result() == Position(7, 3)


async def test_a_resend_waiting_on_a_run_item_gets_its_position_once_durable() -> None:
    _, _, topic, producer = start_run(fast_send(0), fast_send(1), fast_send(2))
    (_, sink), = topic.runs
    in_flight = producer.pending_append(1, 1)
    assert in_flight is not None and not in_flight.done()
    assert producer.pending_append(9, 9) is None  # no such send queued
    assert producer.pending_append(0, 1) is None  # same key, another send
    sink.entries_durable(7, 4, 2)  # items 0 and 1 durable; answered right after
    assert in_flight.done() and in_flight.result() == Position(7, 5)
    waiting_for_last = producer.pending_append(2, 2)
    assert waiting_for_last is not None and not waiting_for_last.done()
    sink.entries_failed(1, PersistenceError("fdatasync failed"))
    assert waiting_for_last.done() and waiting_for_last.exception() is not None


async def test_a_durable_but_unanswered_run_item_is_handed_out_as_a_done_future() -> None:
    _, _, topic, producer = start_run(fast_send(0), fast_send(1))
    (_, sink), = topic.runs
    producer.state = ProducerState.CLOSED  # a detached producer answers nothing more
    sink.entries_durable(7, 0, 2)
    fut = producer.pending_append(1, 1)
    assert fut is not None and fut.done() and fut.result() == Position(7, 1)


def test_record_run_keeps_the_window_record_keeps() -> None:
    cases: list[tuple[list[int], list[list[int | None]]]] = [
        ([], [list(range(10))]),                                 # the common case
        ([5, 6], [list(range(7, 7 + RECEIPT_WINDOW + 40))]),     # trims past the window
        ([5, 9], [[6, 7, 8]]),                                   # fills a gap: sorted insert
        ([1], [[2, None, 4], [5]]),                              # a chunk's key is skipped
    ]
    for before, runs in cases:
        by_run, by_record = SequenceState("p"), SequenceState("p")
        for entry_id, key in enumerate(before):
            by_run.record(key, key, 1, entry_id)
            by_record.record(key, key, 1, entry_id)
        for ledger_id, keys in enumerate(runs, start=2):
            # single messages: a chunk carries the sequence id of its message's last chunk
            seqs = [key if key is not None else keys[i + 1] for i, key in enumerate(keys)]
            by_run.record_run(seqs, keys, ledger_id, 100)  # type: ignore[arg-type]
            for offset, key in enumerate(keys):
                if key is not None:
                    by_record.record(key, key, ledger_id, 100 + offset)
        assert list(by_run.window) == list(by_record.window)
        assert (by_run.persisted, by_run.floor) == (by_record.persisted, by_record.floor)
        assert by_run.stored.bounds == by_record.stored.bounds


async def test_a_publish_rate_past_its_limit_holds_every_producer_connection_of_the_topic() -> None:
    """Pulsar throttles all the topic's producers, not only the one whose SEND went over."""
    topic = FakeTopic()
    topic.publish_rate.rate = PublishRate(msgs=2)
    (conn_a, _), (conn_b, _) = make_connection(), make_connection()
    other_topic = FakeTopic()
    (conn_c, _) = make_connection()
    for name, conn, owner in (("a", conn_a, topic), ("b", conn_b, topic),
                              ("c", conn_c, other_topic)):
        producer = Producer(conn.producer_side, owner, 1, name, pb.Shared, False, {})  # type: ignore[arg-type]
        conn.producer_side.producers[1] = producer
        owner.producers[name] = producer
    producer_a = topic.producers["a"]
    producer_a.on_sends([fast_send(0)])
    assert not (conn_a.throttle.paused or conn_b.throttle.paused)
    producer_a.on_sends([fast_send(1)])   # the second of two a second: the window is spent
    assert conn_a.throttle.paused and conn_b.throttle.paused
    assert not conn_c.throttle.paused     # another topic's producer is not held
    assert topic.publish_rate.limited_times == 1
    for conn in (conn_a, conn_b, conn_c):
        conn.connection_lost(None)
