"""Key_Shared: per-key order and no loss while consumers join and leave; STICKY ranges."""

from __future__ import annotations

import random
from typing import Any

import pulsar
import pytest

from ._helpers import Collector, drain, topic_name

KEYS = [f"key-{i}" for i in range(40)]


def _check_order(received: list[tuple[str, int]]) -> None:
    """First receipts of each key come in publish order."""
    last: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for key, seq in received:
        if (key, seq) in seen:
            continue  # an at-least-once duplicate (redelivered after a consumer left)
        seen.add((key, seq))
        assert seq > last.get(key, -1), f"{key}: {seq} after {last.get(key)}"
        last[key] = seq


def test_key_order_is_kept_while_consumers_join_and_leave(client: Any) -> None:
    topic = topic_name("ks-order")
    rng = random.Random(7)
    producer = client.create_producer(topic, batching_enabled=False)
    next_seq = dict.fromkeys(KEYS, 0)
    published: set[tuple[str, int]] = set()
    collector = Collector(work_s=0.001)

    def publish(n: int) -> None:
        for _ in range(n):
            key = rng.choice(KEYS)
            seq = next_seq[key]
            next_seq[key] += 1
            producer.send_async(f"{key}/{seq}".encode(), None, partition_key=key)
            published.add((key, seq))
        producer.flush()

    def sub(name: str) -> Any:
        return collector.subscribe(client, topic, "ks", consumer_name=name,
                                   consumer_type=pulsar.ConsumerType.KeyShared,
                                   receiver_queue_size=20)

    c1 = sub("c1")
    publish(300)
    assert collector.wait_for(100)
    sub("c2")
    c3 = sub("c3")
    publish(300)
    assert collector.wait_for(400)
    c3.close()  # leaves with messages in its queue: they go to the others
    publish(300)
    sub("c4")
    publish(300)
    c1.close()
    publish(100)

    def ids(received: list[tuple[Any, Any, int]]) -> list[tuple[str, int]]:
        pairs = [m.data().decode().split("/") for _, m, _ in received]
        return [(k, int(s)) for k, s in pairs]

    # Every message arrives (a message of a consumer that left waits for the keys' earlier
    # messages to be acknowledged before it may go to one that joined later: no fixed time)
    collector.wait_until(lambda received: set(ids(received)) >= published)
    collector.wait_idle(300)   # and any duplicate still on its way, for the order check
    received_ids = ids(collector.received)
    _check_order(received_ids)
    assert set(received_ids) == published


def test_sticky_consumers_get_only_their_ranges(client: Any) -> None:
    topic = topic_name("ks-sticky")
    low = client.subscribe(
        topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]))
    high = client.subscribe(
        topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)]))
    producer = client.create_producer(topic)
    for i in range(100):
        producer.send_async(f"{i}".encode(), None, partition_key=f"k{i % 10}")
    producer.flush()
    by_consumer: dict[int, set[str]] = {0: set(), 1: set()}
    total = 0
    for c, msg in drain([low, high]):
        by_consumer[0 if c is low else 1].add(msg.partition_key())
        c.acknowledge(msg)
        total += 1
    assert total == 100
    assert not by_consumer[0] & by_consumer[1]


def test_overlapping_sticky_ranges_are_refused(client: Any) -> None:
    topic = topic_name("ks-overlap")
    client.subscribe(
        topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 1000)]))
    with pytest.raises(pulsar.ConsumerAssignError):
        client.subscribe(
            topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(500, 2000)]))


def test_hash_range_auto_split_when_consistent_hashing_is_off(broker_factory: Any) -> None:
    """``subscriptionKeySharedUseConsistentHashing=false`` (the Go client's CI setting): the
    second consumer takes the lower half of the hash range, whatever the consumers' names."""
    from conftest import make_client

    from protocol.metadata import sticky_key_hash

    handle = broker_factory(config_overrides={"subscriptionKeySharedUseConsistentHashing": False})
    client = make_client(handle.service_url)
    try:
        topic = topic_name("ks-split")
        first = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        second = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        keys = ["key-shared-0", "key-shared-1", "key-shared-2"]
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"{i}".encode(), partition_key=keys[i % 3])
        got: dict[str, set[str]] = {"first": set(), "second": set()}
        for c, msg in drain([first, second]):
            got["first" if c is first else "second"].add(msg.partition_key())
            c.acknowledge(msg)
        assert got == {"first": {k for k in keys if sticky_key_hash(k.encode()) > 32768},
                       "second": {k for k in keys if sticky_key_hash(k.encode()) <= 32768}}
        assert got["first"] and got["second"]
    finally:
        client.close()
