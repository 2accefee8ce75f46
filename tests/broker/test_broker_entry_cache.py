"""Which topics' new entries the entry cache keeps: those of a topic with a subscription only
(Pulsar caches an entry only while its managed ledger has active cursors), and with one
subscription, only until it read them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
from conftest import make_client


def test_a_topic_caches_new_entries_only_while_it_has_a_subscription(
        broker_factory: Callable[..., Any]) -> None:
    # no aging: what is cached stays until the byte budget pushes it out
    broker = broker_factory(config_overrides={"managedLedgerCacheEvictionTimeThresholdMillis": 0})

    def cached_bytes() -> int:
        return int(broker.call(lambda: broker.service.store.cache.size_bytes))

    client = make_client(broker.service_url)
    earliest = pulsar.InitialPosition.Earliest
    try:
        topic = "persistent://public/default/cached-while-read"
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(b"unread-%d" % i)
        assert cached_bytes() == 0   # nobody reads the topic: nothing cached
        client.subscribe(topic, "s", initial_position=earliest).close()   # the subscription stays
        for i in range(5):
            producer.send(b"read-%d" % i)
        assert cached_bytes() >= 5 * len(b"read-0")
        consumer = client.subscribe(topic, "s", initial_position=earliest)
        received = [consumer.receive(10_000) for _ in range(10)]
        assert [m.data() for m in received] == [b"unread-%d" % i for i in range(5)] + [
            b"read-%d" % i for i in range(5)]   # the first five from disk
        for message in received:
            consumer.acknowledge(message)
        assert cached_bytes() == 0   # its only subscription read them: they left
        client.subscribe(topic, "other", initial_position=earliest).close()
        producer.send(b"read-by-one-of-two")
        assert consumer.receive(10_000).data() == b"read-by-one-of-two"
        assert cached_bytes() > 0   # the other subscription has yet to read it
        consumer.unsubscribe()
        client.subscribe(topic, "other").unsubscribe()
        before = cached_bytes()
        producer.send(b"unread-again")
        assert cached_bytes() == before   # no subscription: not cached
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        caching = broker.call(lambda: broker.service.topics[topic].ledger.caching)
        assert caching.on and caching.lone   # a reader's subscription counts too
        assert reader.read_next(10_000).data() == b"unread-0"
        reader.close()
        producer.close()
    finally:
        client.close()
