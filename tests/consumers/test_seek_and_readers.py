"""Seek by message id and by publish time; readers from earliest, latest and a message id."""

from __future__ import annotations

import time
from typing import Any

import pulsar
from waiting import wait_until

from ._helpers import receive_all, receive_none, topic_name


def _publish(client: Any, topic: str, n: int, start: int = 0) -> list[Any]:
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(start, start + n)]
    producer.close()
    return ids


def test_seek_by_message_id_replays_from_there(client: Any) -> None:
    topic = topic_name("seek-id")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    ids = _publish(client, topic, 10)
    receive_all(consumer, 10)
    consumer.seek(ids[4])
    got = [m.data() for m in receive_all(consumer, 5)]
    # The broker restarts at m4 (as Pulsar's does); the C++ client drops the seek id itself
    # unless startMessageIdInclusive, so the consumer sees m5.. m9.
    assert got == [f"m{i}".encode() for i in range(5, 10)]
    assert receive_none(consumer)


def test_seek_to_earliest_replays_everything(client: Any) -> None:
    topic = topic_name("seek-earliest")
    consumer = client.subscribe(topic, "s")
    _publish(client, topic, 5)
    receive_all(consumer, 5)
    consumer.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in receive_all(consumer, 5)] == [f"m{i}".encode() for i in range(5)]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms_after(ms: int) -> int:
    """Wait for the wall clock (publish times' clock, in ms) to pass ``ms``; the new time."""
    return wait_until(lambda: (now := _now_ms()) > ms and now, timeout_s=1, interval_s=0.001,
                      message=f"the clock passes {ms} ms")


def test_seek_by_publish_time_starts_at_the_first_later_message(client: Any) -> None:
    topic = topic_name("seek-time")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    _publish(client, topic, 5)
    cut = _ms_after(_now_ms())  # publish times are in ms: a cut strictly between the groups
    _ms_after(cut)
    _publish(client, topic, 5, start=5)
    receive_all(consumer, 10)
    consumer.seek(cut)
    got = [m.data() for m in receive_all(consumer, 5)]
    assert got == [f"m{i}".encode() for i in range(5, 10)]
    assert receive_none(consumer)


def test_reader_from_earliest_reads_everything(client: Any) -> None:
    topic = topic_name("reader-earliest")
    _publish(client, topic, 5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000).data())
    assert got == [f"m{i}".encode() for i in range(5)]


def test_reader_from_latest_reads_only_new_messages(client: Any) -> None:
    topic = topic_name("reader-latest")
    _publish(client, topic, 3)
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    _publish(client, topic, 2, start=3)
    assert reader.has_message_available()
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"m3", b"m4"]


def test_reader_from_a_message_id_starts_after_it(client: Any) -> None:
    topic = topic_name("reader-id")
    ids = _publish(client, topic, 6)
    reader = client.create_reader(topic, ids[2])
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"m3", b"m4", b"m5"]
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"m2"


def test_reader_on_an_empty_topic_has_nothing_available(client: Any) -> None:
    topic = topic_name("reader-empty")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    _publish(client, topic, 1)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m0"
    assert not reader.has_message_available()


def test_reader_seek_by_time(client: Any) -> None:
    topic = topic_name("reader-seek")
    _publish(client, topic, 3)
    cut = _ms_after(_now_ms())
    _ms_after(cut)
    _publish(client, topic, 3, start=3)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    reader.seek(cut)
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"m3", b"m4", b"m5"]
