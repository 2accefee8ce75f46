"""Delayed delivery in dispatch: Shared/Key_Shared hold messages until due, Exclusive does not."""

from __future__ import annotations

import random
import time
from typing import Any

import pulsar
import pytest
from waiting import wait_until

from broker.subscriptions.subscription import BUCKET_PROPERTY_PREFIX
from tests.conftest import make_client

from ._helpers import Collector, receive_none, topic_name

STRICT = {"delayedDeliveryTickTimeMillis": 10, "isDelayedDeliveryDeliverAtTimeStrict": True}


@pytest.fixture
def strict_client(broker_factory: Any) -> Any:
    handle = broker_factory(config_overrides=STRICT)
    client = make_client(handle.service_url)
    yield client
    client.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_deliver_at_on_shared_arrives_on_time_and_never_early(strict_client: Any) -> None:
    topic = topic_name("delayed-shared")
    consumer = strict_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = strict_client.create_producer(topic)
    rng = random.Random(3)
    due: dict[bytes, int] = {}
    for i in range(30):
        at = _now_ms() + rng.randint(200, 700)
        payload = f"m{i}".encode()
        due[payload] = at
        producer.send(payload, deliver_at=at)
    lateness = []
    for _ in range(30):
        msg = consumer.receive(5000)
        now = _now_ms()
        assert now >= due[msg.data()], f"{msg.data()!r} early by {due[msg.data()] - now} ms"
        lateness.append(now - due[msg.data()])
        consumer.acknowledge(msg)
    assert max(lateness) < 1000
    assert receive_none(consumer)


def test_deliver_after_on_shared_is_held_while_plain_messages_flow(strict_client: Any) -> None:
    topic = topic_name("delayed-mixed")
    consumer = strict_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = strict_client.create_producer(topic)
    from datetime import timedelta

    producer.send(b"later", deliver_after=timedelta(milliseconds=600))
    sent = _now_ms()
    producer.send(b"now")
    assert consumer.receive(2000).data() == b"now"
    msg = consumer.receive(3000)
    assert msg.data() == b"later"
    assert _now_ms() - sent >= 550
    assert msg.redelivery_count() == 0


def test_exclusive_delivers_delayed_messages_at_once(strict_client: Any) -> None:
    topic = topic_name("delayed-excl")
    consumer = strict_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = strict_client.create_producer(topic)
    producer.send(b"x", deliver_at=_now_ms() + 60_000)
    assert consumer.receive(2000).data() == b"x"


def test_key_shared_with_random_delays_never_stalls(strict_client: Any) -> None:
    topic = topic_name("delayed-ks")
    rng = random.Random(11)
    collector = Collector()

    def sub(name: str) -> Any:
        return collector.subscribe(strict_client, topic, "ks", consumer_name=name,
                                   consumer_type=pulsar.ConsumerType.KeyShared,
                                   receiver_queue_size=20)

    sub("a")
    sub("b")
    producer = strict_client.create_producer(topic, batching_enabled=False)
    due: dict[bytes, int] = {}
    plain: set[bytes] = set()
    for i in range(300):
        key = f"k{rng.randrange(30)}"
        payload = f"{key}/{i}".encode()
        if i == 150:
            producer.flush()
            sub("c")  # a consumer joins while messages are delayed
        if rng.random() < 0.4:
            at = _now_ms() + rng.randint(1500, 2500)
            due[payload] = at
            producer.send_async(payload, None, partition_key=key, deliver_at=at)
        else:
            plain.add(payload)
            producer.send_async(payload, None, partition_key=key)
    producer.flush()
    published = _now_ms()
    assert collector.wait_for(len(plain) + len(due), timeout_s=15)
    got: dict[bytes, int] = {}
    for _, msg, at in collector.received:
        got.setdefault(msg.data(), at)
    assert set(got) == plain | set(due)
    # The plain messages never wait behind delayed ones of the same or other keys.
    plain_done_at = max(got[p] for p in plain)
    assert plain_done_at - published < 1000
    early = {p: due[p] - t for p, t in got.items() if p in due and t < due[p]}
    assert not early


def test_bucket_tracker_recovers_on_restart_and_delivers_on_time(broker_factory: Any) -> None:
    config = {**STRICT, "delayedDeliveryTrackerFactoryClassName": "bucket",
              "delayedDeliveryMinIndexCountPerBucket": 20,
              "managedLedgerMaxEntriesPerLedger": 40}
    first = broker_factory(config_overrides=config)
    topic = topic_name("delayed-bucket")
    client = make_client(first.service_url)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    due: dict[bytes, int] = {}
    for i in range(150):
        at = _now_ms() + 2500 + i * 10
        due[f"m{i}".encode()] = at
        producer.send_async(f"m{i}".encode(), None, deliver_at=at)
    producer.flush()

    def delayed() -> int:
        sub = first.service.topics[topic].subscriptions["s"]
        return sub.msg_delayed

    # the tracker fills as the dispatcher reads: poll its count
    wait_until(lambda: first.call(delayed) >= 150, timeout_s=5, interval_s=0.05,
               message="the tracker holds all 150 delayed messages")
    assert first.call(delayed) == 150
    consumer.close()
    client.close()
    first.stop()

    second = broker_factory(data_dir=first.data_dir, config_overrides=config)

    async def recovered() -> tuple[bool, int]:
        sub = (await second.service.get_topic(topic, create=False)).subscriptions["s"]
        return any(k.startswith(BUCKET_PROPERTY_PREFIX) for k in sub.cursor.properties), \
            sub.msg_delayed

    has_buckets, pending = second.call(recovered)
    assert has_buckets  # sealed buckets were persisted and the tracker came back eagerly
    assert pending > 0
    client = make_client(second.service_url)
    try:
        collector = Collector()
        collector.subscribe(client, topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        assert collector.wait_for(150, timeout_s=15)
        collector.wait_idle(300)
        got = [(m.data(), at) for _, m, at in collector.received]
        assert sorted(p for p, _ in got) == sorted(due)
        assert not [p for p, at in got if at < due[p]]
    finally:
        client.close()


def test_shared_delivers_at_once_when_delayed_delivery_is_disabled(broker_factory: Any) -> None:
    handle = broker_factory(config_overrides={"delayedDeliveryEnabled": False})
    client = make_client(handle.service_url)
    try:
        topic = topic_name("delayed-off")
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        producer.send(b"x", deliver_at=_now_ms() + 60_000)
        assert consumer.receive(2000).data() == b"x"
    finally:
        client.close()
