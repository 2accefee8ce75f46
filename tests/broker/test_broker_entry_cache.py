"""Which topics' new entries the entry cache keeps: those of a topic one of whose subscriptions
has a consumer attached (Pulsar caches an entry only while its managed ledger has active
cursors, and a cursor is active while its subscription has consumers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
from conftest import make_client


def test_a_topic_caches_new_entries_only_while_a_subscription_has_a_consumer(
        broker_factory: Callable[..., Any]) -> None:
    # no aging: what is cached stays until the byte budget pushes it out
    broker = broker_factory(config_overrides={"managedLedgerCacheEvictionTimeThresholdMillis": 0})

    def cached_bytes() -> int:
        return int(broker.call(lambda: broker.service.store.cache.size_bytes))

    client = make_client(broker.service_url)
    try:
        topic = "persistent://public/default/cached-while-read"
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(b"unread-%d" % i)
        assert cached_bytes() == 0   # nobody reads the topic: nothing cached
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(5):
            producer.send(b"read-%d" % i)
        after_subscribe = cached_bytes()
        assert after_subscribe >= 5 * len(b"read-0")
        received = [consumer.receive(10_000) for _ in range(10)]
        assert [m.data() for m in received] == [b"unread-%d" % i for i in range(5)] + [
            b"read-%d" % i for i in range(5)]   # the first five from disk
        for message in received:
            consumer.acknowledge(message)
        consumer.close()
        producer.send(b"consumer-away")
        assert cached_bytes() == after_subscribe   # the subscription's consumer is away
        consumer = client.subscribe(topic, "s")
        producer.send(b"consumer-back")
        back = cached_bytes()
        assert back > after_subscribe
        assert [consumer.receive(10_000).data() for _ in range(2)] == [
            b"consumer-away", b"consumer-back"]   # the first from disk
        consumer.unsubscribe()
        producer.send(b"unread-again")
        assert cached_bytes() == back   # the subscription is gone: not cached
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        producer.send(b"read-by-reader")
        assert cached_bytes() > back   # a reader counts too
        assert reader.read_next(10_000).data() == b"unread-0"
        reader.close()
        producer.close()
    finally:
        client.close()


def test_inactive_cursors_count_when_configured(broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory(config_overrides={"managedLedgerCacheEvictionTimeThresholdMillis": 0,
                                              "managedLedgerCacheForInactiveCursors": True})

    def cached_bytes() -> int:
        return int(broker.call(lambda: broker.service.store.cache.size_bytes))

    client = make_client(broker.service_url)
    try:
        topic = "persistent://public/default/cached-for-inactive"
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"unread")
        assert cached_bytes() == 0   # no subscription at all: still not cached
        client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
        producer.send(b"consumer-away")
        assert cached_bytes() >= len(b"consumer-away")   # the subscription counts
        producer.close()
    finally:
        client.close()
