"""A policy change reaches clients already attached, without their reconnecting (Pulsar's
onPoliciesUpdate / onUpdate), on the official Python client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rest import http_json

NS = "/admin/v2/namespaces/public/live"
TOPIC = "persistent://public/live/t"
TOPIC_PATH = "/admin/v2/persistent/public/live/t"


def _call(broker: Any, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    return http_json(broker.web_url, method, path, raw)


@pytest.fixture
def live(broker: Any, client: Any) -> Iterator[Any]:
    """The namespace ``public/live`` and its topic ``t`` (created by a producer)."""
    assert _call(broker, "PUT", NS, {})[0] == 204
    client.create_producer(TOPIC).close()
    yield broker


def _rate(msgs: int) -> dict[str, Any]:
    return {"dispatchThrottlingRateInMsg": msgs, "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1, "relativeToPublishRate": False}


def _receive_all(consumer: Any, count: int) -> tuple[list[bytes], float]:
    started = time.monotonic()
    got = [consumer.receive(10_000).data() for _ in range(count)]
    return got, time.monotonic() - started


def test_a_lowered_dispatch_rate_throttles_a_consumer_already_receiving(
        live: Any, client: Any) -> None:
    consumer = client.subscribe(TOPIC, "s")
    producer = client.create_producer(TOPIC, batching_enabled=False)
    producer.send(b"before")
    assert consumer.receive(10_000).data() == b"before"
    # the namespace's subscription dispatch rate, set while the consumer is attached
    assert _call(live, "POST", NS + "/subscriptionDispatchRate", _rate(3))[0] == 204
    for i in range(9):
        producer.send(f"m{i}".encode())
    got, elapsed = _receive_all(consumer, 9)
    assert got == [f"m{i}".encode() for i in range(9)]
    # three a second: the last three wait for the third period (>= 2 s after the first)
    assert elapsed >= 1.5, elapsed
    # the topic's dispatch rate (over all its subscriptions), also live
    assert _call(live, "DELETE", NS + "/subscriptionDispatchRate")[0] == 204
    assert _call(live, "POST", TOPIC_PATH + "/dispatchRate", _rate(3))[0] == 204
    for i in range(9):
        producer.send(f"n{i}".encode())
    got, elapsed = _receive_all(consumer, 9)
    assert got == [f"n{i}".encode() for i in range(9)]
    assert elapsed >= 1.5, elapsed
    consumer.close()
    producer.close()


def test_a_raised_or_lowered_unacked_limit_reaches_an_attached_consumer(
        live: Any, client: Any) -> None:
    import pulsar

    consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=100)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    # lowered while attached: three unacknowledged, then nothing
    assert _call(live, "POST", NS + "/maxUnackedMessagesPerConsumer", 3)[0] == 204
    for i in range(10):
        producer.send(f"m{i}".encode())
    held = [consumer.receive(10_000) for _ in range(3)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)
    # raised (0: no limit) at the topic level: the rest comes without an ack
    assert _call(live, "POST", TOPIC_PATH + "/maxUnackedMessagesOnConsumer", 0)[0] == 204
    rest = [consumer.receive(10_000) for _ in range(7)]
    assert sorted(m.data() for m in held + rest) == sorted(f"m{i}".encode() for i in range(10))
    consumer.close()
    producer.close()


def test_a_publish_rate_set_on_a_live_producer_throttles_it(live: Any, client: Any) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    producer.send(b"before")
    rate = {"publishThrottlingRateInMsg": 4, "publishThrottlingRateInByte": -1}
    assert _call(live, "POST", NS + "/publishRate", rate)[0] == 204
    started = time.monotonic()
    for i in range(10):
        producer.send(f"m{i}".encode())
    # four a second: the ninth and tenth wait for the third window (>= 2 s after the first)
    assert time.monotonic() - started >= 1.5
    producer.close()


def test_a_lowered_max_consumers_refuses_the_next_consumer_and_keeps_the_attached(
        live: Any, client: Any) -> None:
    import pulsar

    shared = pulsar.ConsumerType.Shared
    consumers = [client.subscribe(TOPIC, "s", consumer_type=shared) for _ in range(2)]
    assert _call(live, "POST", TOPIC_PATH + "/maxConsumers", 1)[0] == 204
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s", consumer_type=shared)
    producer = client.create_producer(TOPIC)
    producer.send(b"still served")
    assert any(_try_receive(c) == b"still served" for c in consumers)
    for consumer in consumers:
        consumer.close()
    producer.close()


def _try_receive(consumer: Any) -> bytes | None:
    import pulsar

    try:
        data: bytes = consumer.receive(3000).data()
    except pulsar.Timeout:
        return None
    return data


def test_a_subscription_without_consumers_expires_after_its_expiration_time(
        live: Any, client: Any) -> None:
    """Pulsar's checkInactiveSubscriptions: the namespace's value over broker.conf;
    subscriptions with a consumer stay. The idle clock is moved, not waited for."""
    service = live.service
    expiry = service.subscription_expiry
    offset = [0.0]
    expiry.clock = lambda: time.time() + offset[0]

    def check() -> int:
        result: int = live.call(expiry.check, service.topics)
        return result

    def subscriptions() -> set[str]:
        return set(_call(live, "GET", TOPIC_PATH + "/subscriptions")[1])

    status, body = _call(live, "POST", NS + "/subscriptionExpirationTime", -1)
    assert (status, body["reason"]) == (412, "Invalid value for subscription expiration time")
    assert _call(live, "POST", NS + "/subscriptionExpirationTime", 10)[0] == 204
    assert _call(live, "GET", NS + "/subscriptionExpirationTime") == (200, 10)
    assert _call(live, "GET", NS)[1]["subscription_expiration_time_minutes"] == 10
    client.subscribe(TOPIC, "idle").close()
    attached = client.subscribe(TOPIC, "attached")
    assert check() == 0                      # first seen without consumers now
    offset[0] = 9 * 60.0
    assert check() == 0 and subscriptions() == {"idle", "attached"}
    offset[0] = 10 * 60.0 + 1
    assert check() == 1
    assert subscriptions() == {"attached"}   # the one with a consumer stays
    # removed: broker.conf's subscriptionExpirationTimeMinutes (0, never) applies
    assert _call(live, "DELETE", NS + "/subscriptionExpirationTime")[0] == 204
    assert _call(live, "GET", NS + "/subscriptionExpirationTime") == (200, None)
    attached.close()
    assert check() == 0
    offset[0] = 60 * 60.0
    assert check() == 0 and subscriptions() == {"attached"}
    # Pulsar's REST API has no topic level for it
    assert _call(live, "POST", TOPIC_PATH + "/subscriptionExpirationTime", 0)[0] == 404
    assert _call(live, "POST", NS + "/subscriptionExpirationTime", 1)[0] == 204
    # idle since its consumer left (its cursor's lastActive), an hour ago on the moved clock
    assert check() == 1 and subscriptions() == set()
    assert expiry.expired == 2


def test_broker_conf_subscription_expiration_is_checked_every_interval(
        broker_factory: Any) -> None:
    import pulsar
    from conftest import make_client
    from waiting import wait_until

    broker = broker_factory(config_overrides={"subscriptionExpirationTimeMinutes": 1,
                                              "subscriptionExpiryCheckIntervalInMinutes": 1})
    expiry = broker.service.subscription_expiry
    assert expiry.interval_s == 60.0
    client = make_client(broker.service_url)
    try:
        client.subscribe("persistent://public/default/e", "idle",
                         consumer_type=pulsar.ConsumerType.Shared).close()
        offset = [0.0]
        expiry.clock = lambda: time.time() + offset[0]
        broker.call(expiry.check, broker.service.topics)   # first seen without consumers
        offset[0] = 61.0
        # the timer's next look (forced now rather than a minute later) deletes it
        broker.call(setattr, expiry, "next_check_at", 0.0)
        wait_until(lambda: expiry.expired == 1, message="the timer expired the subscription")
        status, subs = _call(broker, "GET", "/admin/v2/persistent/public/default/e/subscriptions")
        assert (status, subs) == (200, [])
    finally:
        client.close()


def test_a_dispatch_rate_relative_to_the_publish_rate_adds_it_to_the_set_limits() -> None:
    """Pulsar's relativeToPublishRate: the limit is the configured one plus what is published
    per second (only the limits that are set grow)."""
    from broker.subscriptions.dispatch_rate import DispatchRate, TopicDispatch

    published = (40.0, 4096.0)
    relative = DispatchRate(10, -1, 1, relative=True)
    assert relative.plus_published(lambda: published) == DispatchRate(50, -1, 1)
    assert DispatchRate(10, 100).plus_published(lambda: published) == DispatchRate(10, 100)
    topic = TopicDispatch(lambda: (0, 0), lambda: published)
    topic.rate = relative
    assert topic.allowance(0.0)[0] == 50
    topic.rate = DispatchRate(10, -1, 1)
    assert topic.allowance(5.0)[0] == 10


def test_relative_to_publish_rate_is_stored_and_answered(live: Any) -> None:
    rate = dict(_rate(5), relativeToPublishRate=True)
    assert _call(live, "POST", TOPIC_PATH + "/subscriptionDispatchRate", rate)[0] == 204
    assert _call(live, "GET", TOPIC_PATH + "/subscriptionDispatchRate") == (200, rate)
    service = live.service
    tn = live.call(lambda: next(t.name for t in service.topics.values() if t.full == TOPIC))
    applied = live.call(service.policies.limits.subscription_dispatch_rate, tn)
    assert applied.relative and applied.msgs == 5


def test_a_dynamic_broker_rate_reaches_an_attached_consumer(live: Any, client: Any) -> None:
    """``POST /admin/v2/brokers/configuration/{key}/{value}`` of a rate key: the broker's
    default changes for the topics already loaded, not only for the next ones."""
    consumer = client.subscribe(TOPIC, "s")
    producer = client.create_producer(TOPIC, batching_enabled=False)
    producer.send(b"before")
    assert consumer.receive(10_000).data() == b"before"
    key = "/admin/v2/brokers/configuration/dispatchThrottlingRatePerSubscriptionInMsg"
    assert _call(live, "POST", key + "/3")[0] == 200
    for i in range(9):
        producer.send(f"m{i}".encode())
    got, elapsed = _receive_all(consumer, 9)
    assert got == [f"m{i}".encode() for i in range(9)]
    assert elapsed >= 1.5, elapsed
    # back to the file's value (0, no limit): released at once
    assert _call(live, "DELETE", key)[0] == 200
    for i in range(30):
        producer.send(f"n{i}".encode())
    got, elapsed = _receive_all(consumer, 30)
    assert got == [f"n{i}".encode() for i in range(30)]
    assert elapsed < 9.0, elapsed   # 30 at three a second would take nine seconds
    consumer.close()
    producer.close()
