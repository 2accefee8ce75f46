"""Partitioned topics, and consumers resuming from their cursor across a broker restart."""

from __future__ import annotations

import hashlib
from typing import Any

import pulsar
import pytest

from tests.conftest import make_client

from ._helpers import drain, receive_all, receive_none, topic_name


def test_partitioned_topic_produce_and_consume_across_partitions(broker: Any, client: Any) -> None:
    topic = topic_name("parted")
    broker.call(broker.service.create_partitioned_topic, topic, 3)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    got = receive_all(consumer, 30)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
    partitions = {m.topic_name() for m in got}
    assert len(partitions) == 3
    assert receive_none(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["nobatch", "batch"])
def test_restart_keeps_acks_and_loses_nothing_unacked(broker_factory: Any, batching: bool) -> None:
    first = broker_factory()
    topic = topic_name("restart")
    client = make_client(first.service_url)
    consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=batching,
                                      batching_max_publish_delay_ms=5)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    received = receive_all(consumer, 100, ack=False)
    acked = {m.data() for m in received[::2]}
    for m in received[::2]:
        consumer.acknowledge(m)
    consumer.close()  # flushes the grouped acks
    client.close()
    first.stop()

    second = broker_factory(data_dir=first.data_dir)
    client = make_client(second.service_url)
    try:
        consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
        again = {m.data() for _, m in drain([consumer], idle_ms=1000)}
        everything = {f"m{i}".encode() for i in range(100)}
        # Nothing acknowledged comes back, except messages sharing a batch entry with an
        # unacknowledged one (the client acks a batch entry once all its messages are acked).
        assert not again & (acked - _same_batch_unacked(received, acked))
        assert again | acked == everything
        if not batching:
            assert again == everything - acked
    finally:
        client.close()


def _same_batch_unacked(received: list[Any], acked: set[bytes]) -> set[bytes]:
    """Acked messages that share a batch entry with an unacked one come back (entry-level acks)."""
    entries: dict[tuple[int, int], list[Any]] = {}
    for m in received:
        mid = m.message_id()
        entries.setdefault((mid.ledger_id(), mid.entry_id()), []).append(m)
    out: set[bytes] = set()
    for msgs in entries.values():
        if any(m.data() not in acked for m in msgs):
            out |= {m.data() for m in msgs if m.data() in acked}
    return out


def test_unsubscribing_leaves_the_subscription_whose_file_name_the_name_spells(
    broker_factory: Any,
) -> None:
    # A long name is stored under a hashed file name; a short name spelling that hash is a
    # different subscription, with its own file.
    first = broker_factory()
    topic = topic_name("lookalike")
    long_name = "orders-" + "x" * 300
    lookalike = "h-" + hashlib.sha256(long_name.encode()).hexdigest()[:48]
    client = make_client(first.service_url)
    keeper = client.subscribe(topic, long_name,
                              initial_position=pulsar.InitialPosition.Earliest)
    other = client.subscribe(topic, lookalike, initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(f"m{i}".encode())
    receive_all(keeper, 3)
    keeper.close()  # flushes the grouped acks
    # Its cursor is saved now, and not again before the restart (nothing changes it).
    first.call(lambda: first.service.topics[topic].ledger.cursors[long_name].flush())
    other.unsubscribe()
    client.close()
    first.stop()

    second = broker_factory(data_dir=first.data_dir)
    client = make_client(second.service_url)
    try:
        keeper = client.subscribe(topic, long_name,
                                  initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in receive_all(keeper, 3)] == [b"m3", b"m4", b"m5"]
        assert receive_none(keeper)
    finally:
        client.close()
