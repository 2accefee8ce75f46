"""Publish back-pressure as Pulsar does it: stop reading, never fail the SEND.

``maxPendingPublishRequestsPerConnection`` holds one connection; ``maxMessagePublishBufferSizeInMB``
holds every connection of the broker; both resume at half. The wire tests hold the topic's
appends (the store answers only when the test lets it) so the pending SENDs are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry
from waiting import wait_until

from broker.net.throttle import PublishBuffer, ReadThrottle
from protocol import commands as C
from protocol import pulsar_pb as pb

T = pb.BaseCommand
MB = 1024 * 1024
TOPIC = "persistent://public/default/throttled"


class FakeReader:
    def __init__(self) -> None:
        self.reading = True
        self.resumes = 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self.resumes += 1


def _throttle(buffer: PublishBuffer, max_requests: int = 1000) -> tuple[ReadThrottle, FakeReader]:
    reader = FakeReader()
    throttle = ReadThrottle(buffer, max_requests, lambda: None)
    throttle.attach(reader)
    return throttle, reader


def test_buffer_full_pauses_every_connection_and_half_resumes_them() -> None:
    buffer = PublishBuffer(1)
    a, reader_a = _throttle(buffer)
    b, reader_b = _throttle(buffer)
    a.started(1, MB // 2)
    b.started(1, MB // 2 - 1)
    assert reader_a.reading and reader_b.reading and not buffer.throttled
    b.started(1, 1)  # exactly 1 MiB pending
    assert buffer.throttled and not reader_a.reading and not reader_b.reading
    c, reader_c = _throttle(buffer)  # a connection made while full is not read either
    assert not reader_c.reading and c.paused
    a.finished(1, MB // 2)  # 1/2 MiB left: not below half yet
    assert not reader_a.reading
    b.finished(1, 1)
    assert not buffer.throttled and reader_a.reading and reader_b.reading and reader_c.reading
    assert buffer.pending_bytes == MB // 2 - 1 and buffer.throttled_times == 1


def test_request_limit_and_buffer_are_independent_reasons() -> None:
    buffer = PublishBuffer(1)
    a, reader = _throttle(buffer, max_requests=2)
    a.started(1, MB)  # buffer full
    a.started(1, 0)  # and 2 requests pending
    assert not reader.reading
    a.finished(1, MB)  # buffer lets go, 1 request left = half of 2: both released
    assert reader.reading and reader.resumes == 1
    a.started(1, 0)
    a.started(1, 0)
    assert not reader.reading  # the request limit alone
    buffer.add(MB)  # another connection fills the buffer
    a.finished(2, 0)
    assert not reader.reading  # still held by the buffer
    buffer.release(MB)
    assert reader.reading


def test_detached_connection_gives_its_bytes_back_once() -> None:
    buffer = PublishBuffer(1)
    a, _ = _throttle(buffer)
    _, reader_b = _throttle(buffer)
    a.started(1, MB)
    assert not reader_b.reading
    a.detach()
    assert buffer.pending_bytes == 0 and reader_b.reading
    a.finished(1, MB)  # the lost connection's append answered later: counted once only
    a.detach()
    assert buffer.pending_bytes == 0 and a.pending_requests == 0


def test_non_positive_size_disables_the_buffer_limit() -> None:
    buffer = PublishBuffer(-1)
    a, reader = _throttle(buffer)
    a.started(1, 10 * MB)
    assert reader.reading and not buffer.throttled


# ---------------------------------------------------------------------------- on the wire


class _HeldSink:
    """Stands between a ledger run and the producer's sink: reports wait for ``release``."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.released = False

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self._report("entries_durable", (ledger_id, first_entry_id, count))

    def entries_failed(self, count: int, error: BaseException) -> None:
        self._report("entries_failed", (count, error))

    def _report(self, name: str, args: tuple[Any, ...]) -> None:
        if self.released:
            getattr(self.sink, name)(*args)
        else:
            self.calls.append((name, args))

    def release(self) -> None:
        self.released = True
        for name, args in self.calls:
            getattr(self.sink, name)(*args)


class HeldAppends:
    """Wraps a topic's ``append_run`` (the SENDs of one socket read, or one SEND) so the
    producer hears of their durability only when :meth:`release` is called."""

    def __init__(self, topic: Any) -> None:
        self.topic = topic
        self.real_run = topic.append_run
        self.runs: list[_HeldSink] = []
        self.count = 0  # entries held
        topic.append_run = self.append_run

    def append_run(self, entries: list[bytes], sink: Any, messages: Any = ()) -> None:
        held = _HeldSink(sink)
        self.runs.append(held)
        self.count += len(entries)
        self.real_run(entries, held, messages)

    async def release(self) -> None:
        self.topic.append_run = self.real_run
        for run in self.runs:
            run.release()


@pytest.fixture
def held_broker(broker_factory: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    def start(**overrides: Any) -> tuple[Any, Callable[[], HeldAppends]]:
        broker = broker_factory(config_overrides=overrides)

        def hold() -> HeldAppends:
            async def wrap() -> HeldAppends:
                return HeldAppends(await broker.service.get_topic(TOPIC, create=True))
            return broker.call(wrap)  # type: ignore[no-any-return]
        return broker, hold
    yield start


def _no_pong(raw: RawClient) -> bool:
    raw.send(C.encode_ping())
    try:
        raw.recv_command(timeout=0.5)
    except TimeoutError:
        return True
    return False


def test_pending_requests_limit_stops_reading_one_connection_only(
        held_broker: Callable[..., Any]) -> None:
    broker, hold = held_broker(maxPendingPublishRequestsPerConnection=3)
    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        assert a.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        held = hold()
        for seq in range(3):
            a.send(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq)))
        wait_until(lambda: broker.call(lambda: held.count) == 3)
        assert _no_pong(a)  # not read: the PING waits in the socket
        assert b.request(C.encode_ping()).type == T.PONG  # the other connection is read
        broker.call(held.release)
        answers = [a.recv_command() for _ in range(4)]
        assert [c.type for c in answers] == [T.SEND_RECEIPT] * 3 + [T.PONG]
        assert [c.send_receipt.sequence_id for c in answers[:3]] == [0, 1, 2]


def test_publish_buffer_full_stops_reading_every_connection_until_half_answered(
        held_broker: Callable[..., Any]) -> None:
    broker, hold = held_broker(maxMessagePublishBufferSizeInMB=1)
    payload = b"p" * (300 * 1024)
    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        assert a.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        held = hold()
        for seq in range(4):  # 1.2 MiB unanswered >= 1 MiB
            a.send(C.encode_send(1, seq, make_entry(payload, sequence_id=seq)))
        wait_until(lambda: broker.call(lambda: broker.server.publish_buffer.throttled))
        assert _no_pong(b)  # a connection that publishes nothing is held too, as in Pulsar
        broker.call(held.release)
        assert b.recv_command().type == T.PONG  # the held PING is read and answered
        receipts = [a.recv_command() for _ in range(4)]
        assert [c.send_receipt.sequence_id for c in receipts] == [0, 1, 2, 3]
        assert broker.call(lambda: broker.server.publish_buffer.pending_bytes) == 0
        assert a.request(C.encode_ping()).type == T.PONG


def test_connection_closed_with_sends_pending_releases_its_share_of_the_buffer(
        held_broker: Callable[..., Any]) -> None:
    broker, hold = held_broker(maxMessagePublishBufferSizeInMB=1)
    payload = b"p" * (600 * 1024)

    def close_publisher() -> None:
        for conn in list(broker.server.connections):
            if conn.producer_side.producers:
                conn.close("test")

    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        assert a.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        held = hold()
        for seq in range(2):
            a.send(C.encode_send(1, seq, make_entry(payload, sequence_id=seq)))
        wait_until(lambda: broker.call(lambda: broker.server.publish_buffer.throttled))
        assert _no_pong(b)
        broker.call(close_publisher)  # its SENDs still unanswered
        assert a.is_closed_by_peer()
        assert b.recv_command().type == T.PONG  # b is read again at once
        assert broker.call(lambda: broker.server.publish_buffer.pending_bytes) == 0
        broker.call(held.release)  # the appends finish later: nothing counted twice
        assert broker.call(lambda: broker.server.publish_buffer.pending_bytes) == 0
        assert b.request(C.encode_ping()).type == T.PONG
