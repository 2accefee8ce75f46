"""Delayed delivery in dispatch: Shared/Key_Shared hold messages until due, Exclusive does not."""

from __future__ import annotations

import random
import time
from typing import Any

import pulsar
import pytest

from tests.conftest import make_client

from ._helpers import drain, receive_none, topic_name

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

    def sub(name: str) -> Any:
        return strict_client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                       consumer_name=name, receiver_queue_size=20)

    consumers = [sub("a"), sub("b")]
    producer = strict_client.create_producer(topic, batching_enabled=False)
    due: dict[bytes, int] = {}
    plain: set[bytes] = set()
    for i in range(300):
        key = f"k{rng.randrange(30)}"
        payload = f"{key}/{i}".encode()
        if i == 150:
            consumers.append(sub("c"))  # a consumer joins while messages are delayed
        if rng.random() < 0.4:
            at = _now_ms() + rng.randint(800, 1500)
            due[payload] = at
            producer.send_async(payload, None, partition_key=key, deliver_at=at)
        else:
            plain.add(payload)
            producer.send_async(payload, None, partition_key=key)
    producer.flush()
    published = _now_ms()
    got: dict[bytes, int] = {}
    plain_done_at = None
    for c, msg in drain(consumers, idle_ms=2500):
        now = _now_ms()
        got.setdefault(msg.data(), now)
        c.acknowledge(msg)
        if plain_done_at is None and plain <= got.keys():
            plain_done_at = now
    assert set(got) == plain | set(due)
    # The plain messages never wait behind delayed ones of the same or other keys.
    assert plain_done_at is not None and plain_done_at - published < 700
    early = {p: due[p] - t for p, t in got.items() if p in due and t < due[p]}
    assert not early
