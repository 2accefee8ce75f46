"""Failover switch-over, negative acks, ack timeout and cumulative acks with the official client."""

from __future__ import annotations

import time
from typing import Any

import pulsar

from ._helpers import receive_all, receive_none, topic_name


def test_failover_switches_to_the_next_consumer_when_the_active_one_closes(client: Any) -> None:
    topic = topic_name("failover")
    a = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover,
                         consumer_name="a")
    b = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover,
                         consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    first = receive_all(a, 10)  # "a" sorts first: it is the active consumer
    assert receive_none(b)
    a.close()
    rest = receive_all(b, 10)
    assert [m.data() for m in first + rest] == [f"m{i}".encode() for i in range(20)]


def test_negative_ack_is_redelivered_with_a_higher_redelivery_count(client: Any) -> None:
    topic = topic_name("nack")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"again")
    msg = consumer.receive(5000)
    assert msg.redelivery_count() == 0
    consumer.negative_acknowledge(msg)
    again = consumer.receive(5000)
    assert again.data() == b"again"
    assert again.message_id() == msg.message_id()
    assert again.redelivery_count() == 1
    consumer.negative_acknowledge(again)
    third = consumer.receive(5000)
    assert third.redelivery_count() == 2
    consumer.acknowledge(third)
    assert receive_none(consumer)


def test_unacked_message_times_out_and_comes_back(client: Any) -> None:
    # 10 s is the smallest ack timeout the C++ client accepts.
    topic = topic_name("ack-timeout")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)
    producer = client.create_producer(topic)
    producer.send(b"slow")
    assert consumer.receive(5000).data() == b"slow"
    started = time.monotonic()
    again = consumer.receive(20_000)
    assert time.monotonic() - started >= 9
    assert again.data() == b"slow"
    assert again.redelivery_count() == 1


def test_exclusive_negative_ack_redelivers_everything_unacked(client: Any) -> None:
    topic = topic_name("nack-excl")
    consumer = client.subscribe(topic, "s", negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    msgs = receive_all(consumer, 3, ack=False)
    consumer.negative_acknowledge(msgs[1])
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    again = consumer.receive(5000)
    assert again.data() == b"m1"
    consumer.acknowledge(again)


def test_cumulative_ack_acknowledges_everything_before(client: Any, broker: Any) -> None:
    topic = topic_name("cumulative")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    msgs = receive_all(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(msgs[6])
    consumer.close()  # flushes the ack
    consumer = client.subscribe(topic, "s")
    assert [m.data() for m in receive_all(consumer, 3)] == [b"m7", b"m8", b"m9"]
