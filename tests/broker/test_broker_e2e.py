"""End to end with the official client (pulsar-client 3.13) against an in-process broker."""

from __future__ import annotations

import threading
from typing import Any

import pulsar
import pytest
from conftest import make_client

from broker.topics.stats import internal_stats, topic_stats


@pytest.mark.parametrize("batching", [False, True], ids=["no-batching", "batching"])
def test_produce_then_consume_exclusive(client: Any, batching: bool) -> None:
    topic = f"persistent://public/default/e2e-{batching}"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=batching,
                                      batching_max_publish_delay_ms=5)
    n = 300
    done = threading.Event()
    results: list[Any] = []

    def on_sent(res: Any, msg_id: Any) -> None:
        results.append(res)
        if len(results) == n:
            done.set()

    for i in range(n):
        producer.send_async(b"msg-%d" % i, on_sent, properties={"i": str(i)})
    assert done.wait(20)
    assert all(r == pulsar.Result.Ok for r in results)
    received = []
    for _ in range(n):
        msg = consumer.receive(5000)
        received.append((msg.data(), msg.properties()["i"]))
        consumer.acknowledge(msg)
    assert received == [(b"msg-%d" % i, str(i)) for i in range(n)]


def test_sync_send_returns_increasing_message_ids(client: Any) -> None:
    producer = client.create_producer("persistent://public/default/e2e-ids")
    ids = [producer.send(b"x") for _ in range(20)]
    keys = [(m.ledger_id(), m.entry_id()) for m in ids]
    assert keys == sorted(keys) and len(set(keys)) == 20


def test_exclusive_producer_makes_a_second_one_fail_with_producer_fenced(client: Any) -> None:
    topic = "persistent://public/default/e2e-exclusive"
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    first.send(b"still works")
    first.close()
    second = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    second.send(b"after the first closed")


def test_partitioned_topic_round_trip(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/e2e-partitioned"
    broker.call(broker.service.create_partitioned_topic, topic, 3)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(30):
        producer.send(b"%d" % i, partition_key=f"k{i}")
    got = set()
    for _ in range(30):
        msg = consumer.receive(5000)
        got.add(msg.data())
        consumer.acknowledge(msg)
    assert got == {b"%d" % i for i in range(30)}


def test_back_pressure_keeps_every_receipt(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"maxPendingPublishRequestsPerConnection": 8})
    c = make_client(b.service_url)
    try:
        producer = c.create_producer("persistent://public/default/e2e-bp",
                                     max_pending_messages=500, block_if_queue_full=True)
        n = 2000
        done = threading.Event()
        ids: list[Any] = []
        results: list[Any] = []

        def on_sent(res: Any, msg_id: Any) -> None:
            # never raise in here: the exception would cross the C++ callback boundary
            results.append(res)
            ids.append((msg_id.ledger_id(), msg_id.entry_id()))
            if len(ids) == n:
                done.set()

        for i in range(n):
            producer.send_async(b"%d" % i, on_sent)
        assert done.wait(30)
        assert set(results) == {pulsar.Result.Ok}
        assert ids == sorted(ids) and len(set(ids)) == n
    finally:
        c.close()


def test_auto_topic_creation_disabled_refuses_unknown_topics(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"allowAutoTopicCreation": False})
    c = make_client(b.service_url)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            c.create_producer("persistent://public/default/nope")
    finally:
        c.close()


def test_topic_stats_count_what_was_published_and_consumed(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/e2e-stats"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for _ in range(10):
        producer.send(b"0123456789")
    for _ in range(10):
        consumer.acknowledge(consumer.receive(5000))
    stats = broker.call(lambda: topic_stats(broker.service.topics[topic]))
    assert stats["msgInCounter"] == 10
    assert stats["msgOutCounter"] == 10
    assert stats["bytesInCounter"] > 100
    assert [p["msgInCounter"] for p in stats["publishers"]] == [10]
    assert "sub" in stats["subscriptions"]
    internal = broker.call(lambda: internal_stats(broker.service.topics[topic]))
    assert internal["entriesAddedCounter"] == 10
    assert internal["numberOfEntries"] == 10
    assert "sub" in internal["cursors"]


def test_a_message_near_the_5_mib_limit_round_trips(client: Any) -> None:
    topic = "persistent://public/default/e2e-large"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    payload = bytes(range(256)) * (5 * 1024 * 1024 // 256 - 64)  # 5 MiB minus 16 KiB
    producer.send(payload)
    msg = consumer.receive(10000)
    assert msg.data() == payload
    consumer.acknowledge(msg)


def test_wait_for_exclusive_producer_gets_the_topic_when_the_exclusive_one_leaves(
        client: Any) -> None:
    topic = "persistent://public/default/e2e-wait-exclusive"
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created: list[Any] = []
    waiter = threading.Thread(target=lambda: created.append(client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive()  # queued behind the exclusive producer
    first.close()
    waiter.join(10)
    assert len(created) == 1
    created[0].send(b"mine now")
