"""Produce/consume with the official client on each subscription type, batching on and off."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from ._helpers import receive_all, receive_none, topic_name

TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
}


@pytest.mark.parametrize("batching", [False, True], ids=["nobatch", "batch"])
@pytest.mark.parametrize("sub_type", list(TYPES))
def test_every_message_is_delivered_once_per_subscription_type(
    client: Any, sub_type: str, batching: bool
) -> None:
    topic = topic_name(sub_type)
    consumer = client.subscribe(topic, "sub", consumer_type=TYPES[sub_type])
    producer = client.create_producer(topic, batching_enabled=batching,
                                      batching_max_publish_delay_ms=5)
    for i in range(200):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 7}")
    producer.flush()
    got = [m.data().decode() for m in receive_all(consumer, 200)]
    assert sorted(got) == sorted(f"m{i}" for i in range(200))
    if sub_type in ("exclusive", "failover"):
        assert got == [f"m{i}" for i in range(200)]
    assert receive_none(consumer)


def test_second_exclusive_consumer_is_refused(client: Any) -> None:
    topic = topic_name("excl")
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    producer.send(b"still-works")
    assert first.receive(5000).data() == b"still-works"


def test_subscribing_with_another_type_is_refused(client: Any) -> None:
    topic = topic_name("mismatch")
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover)


def test_shared_spreads_messages_over_consumers(client: Any) -> None:
    topic = topic_name("spread")
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                          receiver_queue_size=10)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                          receiver_queue_size=10)
    producer = client.create_producer(topic)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    seen: dict[str, int] = {}
    counts = [0, 0]
    for _ in range(200):
        for n, c in enumerate((c1, c2)):
            try:
                msg = c.receive(50)
            except pulsar.Timeout:
                continue
            seen[msg.data().decode()] = seen.get(msg.data().decode(), 0) + 1
            counts[n] += 1
            c.acknowledge(msg)
        if len(seen) == 100:
            break
    assert len(seen) == 100
    assert min(counts) > 0


def test_unsubscribe_deletes_the_subscription(client: Any, broker: Any) -> None:
    topic = topic_name("unsub")
    consumer = client.subscribe(topic, "gone")
    consumer.unsubscribe()
    topics = broker.call(lambda: broker.service.topics[topic].subscriptions.keys())
    assert "gone" not in list(topics)


def test_closed_consumer_messages_are_redelivered_to_the_next(client: Any) -> None:
    topic = topic_name("close-redeliver")
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = receive_all(first, 5)  # the other 5 wait unacknowledged in its queue
    first.close()
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    rest = receive_all(second, 5)
    assert sorted(m.data() for m in got + rest) == sorted(f"m{i}".encode() for i in range(10))
