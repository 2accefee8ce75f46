"""Namespace and topic limits enforced on the official Python client: Pulsar's errors past them,
topic over namespace over broker.conf."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient
from conftest import make_client
from rest import http_json

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand.Type

NS = "/admin/v2/namespaces/public/limited"
TOPIC = "persistent://public/limited/t"
TOPIC_PATH = "/admin/v2/persistent/public/limited/t"


def _call(broker: Any, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    return http_json(broker.web_url, method, path, raw)


@pytest.fixture
def limited(broker: Any, client: Any) -> Iterator[Any]:
    """The namespace ``public/limited`` and its topic ``t`` (created by a producer)."""
    assert _call(broker, "PUT", NS, {})[0] == 204
    client.create_producer(TOPIC).close()
    yield broker


def test_max_consumers_per_topic_and_per_subscription_from_namespace_and_topic(
        limited: Any, client: Any) -> None:
    import pulsar

    shared = pulsar.ConsumerType.Shared
    assert _call(limited, "POST", NS + "/maxConsumersPerTopic", 2)[0] == 204
    assert _call(limited, "GET", NS + "/maxConsumersPerTopic") == (200, 2)
    assert _call(limited, "GET", NS)[1]["max_consumers_per_topic"] == 2
    consumers = [client.subscribe(TOPIC, f"s{i}", consumer_type=shared) for i in range(2)]
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s2", consumer_type=shared)
    # the topic's own limit comes first
    assert _call(limited, "POST", TOPIC_PATH + "/maxConsumers", 3)[0] == 204
    consumers.append(client.subscribe(TOPIC, "s0", consumer_type=shared))
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s0", consumer_type=shared)
    assert _call(limited, "DELETE", TOPIC_PATH + "/maxConsumers")[0] == 204
    assert _call(limited, "DELETE", NS + "/maxConsumersPerTopic")[0] == 204
    # per subscription: namespace 2, then topic 1
    assert _call(limited, "POST", NS + "/maxConsumersPerSubscription", 2)[0] == 204
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s0", consumer_type=shared)
    consumers.append(client.subscribe(TOPIC, "s1", consumer_type=shared))
    assert _call(limited, "POST", TOPIC_PATH + "/maxConsumersPerSubscription", 1)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/maxConsumersPerSubscription") == (200, 1)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s1", consumer_type=shared)
    consumers.append(client.subscribe(TOPIC, "s3", consumer_type=shared))
    status, body = _call(limited, "POST", NS + "/maxConsumersPerTopic", -1)
    assert (status, body["reason"]) == (412, "maxConsumersPerTopic must be 0 or more")
    for consumer in consumers:
        consumer.close()


def test_a_create_namespace_body_sets_its_count_limits(broker: Any, client: Any) -> None:
    import pulsar

    assert _call(broker, "PUT", NS, {"max_consumers_per_subscription": 1})[0] == 204
    assert _call(broker, "GET", NS + "/maxConsumersPerSubscription") == (200, 1)
    consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
    consumer.close()
    status, body = _call(broker, "PUT", "/admin/v2/namespaces/public/other",
                         {"max_consumers_per_topic": -2})
    assert (status, body["reason"]) == (412, "maxConsumersPerTopic must be 0 or more")


def test_max_subscriptions_per_topic_refuses_a_new_subscription_not_an_existing_one(
        broker_factory: Any) -> None:
    import pulsar

    broker = broker_factory(config_overrides={"maxSubscriptionsPerTopic": 3})
    client = make_client(broker.service_url)
    try:
        assert _call(broker, "PUT", NS, {})[0] == 204
        client.create_producer(TOPIC).close()
        assert _call(broker, "POST", NS + "/maxSubscriptionsPerTopic", 2)[0] == 204
        assert _call(broker, "GET", NS)[1]["max_subscriptions_per_topic"] == 2
        consumers = [client.subscribe(TOPIC, f"s{i}") for i in range(2)]
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(TOPIC, "s2")
        consumers[1].close()
        consumers[1] = client.subscribe(TOPIC, "s1")   # an existing one is no new subscription
        assert _call(broker, "POST", TOPIC_PATH + "/maxSubscriptionsPerTopic", 1)[0] == 204
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(TOPIC, "s3")
        # without namespace and topic values the broker's maxSubscriptionsPerTopic applies
        assert _call(broker, "DELETE", TOPIC_PATH + "/maxSubscriptionsPerTopic")[0] == 204
        assert _call(broker, "DELETE", NS + "/maxSubscriptionsPerTopic")[0] == 204
        consumers.append(client.subscribe(TOPIC, "s3"))
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(TOPIC, "s4")
        # non-persistent topics count their subscriptions too
        assert _call(broker, "POST", NS + "/maxSubscriptionsPerTopic", 1)[0] == 204
        np_topic = "non-persistent://public/limited/np"
        consumers.append(client.subscribe(np_topic, "a"))
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(np_topic, "b")
        for consumer in consumers:
            consumer.close()
    finally:
        client.close()


def test_auto_topic_creation_off_refuses_consumers_and_producers_of_missing_topics(
        broker_factory: Any) -> None:
    import pulsar

    broker = broker_factory(config_overrides={"allowAutoTopicCreation": False})
    client = make_client(broker.service_url)
    try:
        assert _call(broker, "PUT", NS, {})[0] == 204
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(TOPIC, "s")
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(TOPIC)
        # the namespace's override allows it there, non-partitioned
        assert _call(broker, "POST", NS + "/autoTopicCreation",
                     {"allowAutoTopicCreation": True, "topicType": "non-partitioned"})[0] == 204
        assert _call(broker, "GET", NS + "/autoTopicCreation") == (
            200, {"allowAutoTopicCreation": True, "topicType": "non-partitioned"})
        client.subscribe(TOPIC, "s").close()
        assert _call(broker, "GET", TOPIC_PATH + "/subscriptions") == (200, ["s"])
        # partitioned, with the override's partitions
        assert _call(broker, "POST", NS + "/autoTopicCreation",
                     {"allowAutoTopicCreation": True, "topicType": "partitioned",
                      "defaultNumPartitions": 3})[0] == 204
        client.create_producer("persistent://public/limited/parted").close()
        assert _call(broker, "GET", "/admin/v2/persistent/public/limited/parted/partitions"
                     )[1]["partitions"] == 3
        status, body = _call(broker, "POST", NS + "/autoTopicCreation",
                             {"allowAutoTopicCreation": True, "topicType": "partitioned"})
        assert (status, body["reason"]) == (
            412, "Invalid configuration for autoTopicCreationOverride. the detail is "
                 "[defaultNumPartitions] cannot be null when the type is partitioned.")
        assert _call(broker, "DELETE", NS + "/autoTopicCreation")[0] == 204
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe("persistent://public/limited/other", "s")
    finally:
        client.close()


def test_auto_subscription_creation_off_refuses_a_missing_durable_subscription(
        limited: Any, client: Any) -> None:
    import pulsar

    client.subscribe(TOPIC, "kept").close()
    assert _call(limited, "POST", NS + "/autoSubscriptionCreation",
                 {"allowAutoSubscriptionCreation": False})[0] == 204
    assert _call(limited, "GET", NS)[1]["autoSubscriptionCreationOverride"] == {
        "allowAutoSubscriptionCreation": False}
    with RawClient(limited.service_url) as raw:
        raw.handshake()
        refused = raw.request(C.encode_subscribe(TOPIC, "new", 0, 1, 1))
        assert refused.type == T.ERROR
        assert (refused.error.error, refused.error.message) == (
            ServerError.SubscriptionNotFound, "Subscription new does not exist")
    # the official client retries SubscriptionNotFound until its operation timeout
    impatient = make_client(limited.service_url, operation_timeout_seconds=1)
    try:
        with pytest.raises(pulsar.Timeout):
            impatient.subscribe(TOPIC, "new")
    finally:
        impatient.close()
    client.subscribe(TOPIC, "kept").close()          # an existing one is fine
    client.create_reader(TOPIC, pulsar.MessageId.earliest).close()   # non-durable: fine
    # the topic's override comes first
    assert _call(limited, "POST", TOPIC_PATH + "/autoSubscriptionCreation",
                 {"allowAutoSubscriptionCreation": True})[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/autoSubscriptionCreation") == (
        200, {"allowAutoSubscriptionCreation": True})
    client.subscribe(TOPIC, "new").close()
    assert _call(limited, "DELETE", TOPIC_PATH + "/autoSubscriptionCreation")[0] == 204
    with RawClient(limited.service_url) as raw:
        raw.handshake()
        refused = raw.request(C.encode_subscribe(TOPIC, "newer", 0, 1, 1))
        assert refused.error.error == ServerError.SubscriptionNotFound


def test_subscription_types_enabled_refuses_other_types_with_not_allowed(
        broker_factory: Any) -> None:
    import pulsar

    broker = broker_factory(config_overrides={"subscriptionTypesEnabled": "Exclusive,Shared"})
    client = make_client(broker.service_url)
    try:
        assert _call(broker, "PUT", NS, {})[0] == 204
        assert _call(broker, "GET", NS + "/subscriptionTypesEnabled") == (200, [])
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(TOPIC, "f", consumer_type=pulsar.ConsumerType.Failover)
        client.subscribe(TOPIC, "e").close()
        assert _call(broker, "POST", NS + "/subscriptionTypesEnabled", ["Failover"])[0] == 204
        assert _call(broker, "GET", NS)[1]["subscription_types_enabled"] == ["Failover"]
        client.subscribe(TOPIC, "f", consumer_type=pulsar.ConsumerType.Failover).close()
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(TOPIC, "e")
        # the topic's list comes first
        assert _call(broker, "POST", TOPIC_PATH + "/subscriptionTypesEnabled",
                     ["Key_Shared", "Exclusive"])[0] == 204
        assert _call(broker, "GET", TOPIC_PATH + "/subscriptionTypesEnabled") == (
            200, ["Exclusive", "Key_Shared"])
        client.subscribe(TOPIC, "e").close()
        with RawClient(broker.service_url) as raw:
            raw.handshake()
            refused = raw.request(C.encode_subscribe(TOPIC, "f", 2, 1, 1))
            assert (refused.error.error, refused.error.message) == (
                ServerError.NotAllowedError, f"Topic[{{{TOPIC}}}] doesn't support Failover sub type!")
        status, _ = _call(broker, "POST", NS + "/subscriptionTypesEnabled", ["Queue"])
        assert status == 400
    finally:
        client.close()


def _stats(broker: Any) -> Any:
    status, stats = _call(broker, "GET", TOPIC_PATH + "/stats")
    assert status == 200
    return stats


def _topic_metric(broker: Any, name: str) -> float | None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("topic") == TOPIC:
                return float(sample.value)
    return None


def _blocked_metric(broker: Any, subscription: str) -> float | None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "pulsar_subscription_blocked_on_unacked_messages" and \
                    sample.labels.get("subscription") == subscription:
                return float(sample.value)
    return None


def test_max_unacked_messages_per_consumer_holds_delivery_until_half_are_acked(
        limited: Any, client: Any) -> None:
    import pulsar
    from waiting import wait_until

    assert _call(limited, "POST", NS + "/maxUnackedMessagesPerConsumer", 4)[0] == 204
    assert _call(limited, "GET", NS)[1]["max_unacked_messages_per_consumer"] == 4
    consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    received = [consumer.receive(5000) for _ in range(4)]

    def held() -> bool:
        c = _stats(limited)["subscriptions"]["s"]["consumers"][0]
        return bool(c["blockedConsumerOnUnackedMsgs"]) and c["unackedMessages"] == 4
    wait_until(held, message="the consumer is blocked on 4 unacked messages")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)   # nothing more while blocked
    for msg in received[:2]:    # down to half the limit: unblocked
        consumer.acknowledge(msg)
    received = received[2:] + [consumer.receive(5000) for _ in range(2)]
    assert [m.data() for m in received] == [b"m2", b"m3", b"m4", b"m5"]
    # the topic's limit comes first
    status, body = _call(limited, "POST", TOPIC_PATH + "/maxUnackedMessagesOnConsumer", -1)
    assert (status, body["reason"]) == (412, "maxUnackedNum must be 0 or more")
    assert _call(limited, "POST", TOPIC_PATH + "/maxUnackedMessagesOnConsumer", 0)[0] == 204
    consumer.close()
    consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
    # topic 0 (no limit) over namespace 4: the eight unacknowledged come at once
    assert sorted(consumer.receive(5000).data() for _ in range(8)) == \
        sorted(f"m{i}".encode() for i in range(2, 10))
    consumer.close()
    producer.close()


def test_max_unacked_messages_per_subscription_holds_dispatch_with_a_metric(
        limited: Any, client: Any) -> None:
    import pulsar
    from waiting import wait_until

    assert _call(limited, "POST", TOPIC_PATH + "/maxUnackedMessagesOnSubscription", 4)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/maxUnackedMessagesOnSubscription") == (200, 4)
    shared = pulsar.ConsumerType.Shared
    consumers = [client.subscribe(TOPIC, "s", consumer_type=shared, receiver_queue_size=3)
                 for _ in range(2)]
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    wait_until(lambda: _stats(limited)["subscriptions"]["s"]["blockedSubscriptionOnUnackedMsgs"],
               message="the subscription is blocked on unacked messages")
    sub = _stats(limited)["subscriptions"]["s"]
    assert 4 <= sub["unackedMessages"] <= 6   # a round may overshoot, as in Pulsar
    assert _blocked_metric(limited, "s") == 1.0
    got: set[bytes] = set()

    def drain() -> bool:
        for consumer in consumers:
            try:
                msg = consumer.receive(100)
            except pulsar.Timeout:
                continue
            got.add(msg.data())
            consumer.acknowledge(msg)
        return len(got) == 10
    wait_until(drain, message="acks unblock the subscription until all ten are delivered")
    wait_until(lambda: _blocked_metric(limited, "s") == 0.0, message="the metric drops to 0")
    for consumer in consumers:
        consumer.close()
    producer.close()


def test_max_topics_per_namespace_refuses_the_topic_past_it(limited: Any, client: Any) -> None:
    import pulsar

    assert _call(limited, "POST", NS + "/maxTopicsPerNamespace", 2)[0] == 204
    assert _call(limited, "GET", NS)[1]["max_topics_per_namespace"] == 2
    client.create_producer("persistent://public/limited/second").close()   # t is the first
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer("persistent://public/limited/third")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe("persistent://public/limited/third", "s")
    client.create_producer(TOPIC).close()           # existing topics are not counted again
    status, body = _call(limited, "PUT", "/admin/v2/persistent/public/limited/parted/partitions", 2)
    assert (status, body["reason"]) == (412, "Exceed maximum number of topics in namespace.")
    status, body = _call(limited, "PUT", "/admin/v2/persistent/public/limited/plain")
    assert (status, body["reason"]) == (409, "Exceed maximum number of topics in namespace.")
    assert _call(limited, "POST", NS + "/maxTopicsPerNamespace", 4)[0] == 204
    assert _call(limited, "PUT", "/admin/v2/persistent/public/limited/parted/partitions",
                 2)[0] == 204     # each partition counts: 2 + 2 = 4
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer("persistent://public/limited/third")


def test_subscription_dispatch_rate_delays_dispatch_to_the_next_period(
        limited: Any, client: Any) -> None:
    import time

    rate = {"dispatchThrottlingRateInMsg": 3, "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1, "relativeToPublishRate": False}
    assert _call(limited, "POST", NS + "/subscriptionDispatchRate",
                 {"dispatchThrottlingRateInMsg": 1000})[0] == 204
    assert _call(limited, "GET", NS)[1]["subscriptionDispatchRate"] == {"standalone": {
        "dispatchThrottlingRateInMsg": 1000, "dispatchThrottlingRateInByte": -1,
        "ratePeriodInSecond": 1, "relativeToPublishRate": False}}
    assert _call(limited, "POST", TOPIC_PATH + "/subscriptionDispatchRate", rate)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/subscriptionDispatchRate") == (200, rate)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(9):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(TOPIC, "s", initial_position=pulsar_earliest())
    started = time.monotonic()
    got = [consumer.receive(10_000).data() for _ in range(9)]
    elapsed = time.monotonic() - started
    assert got == [f"m{i}".encode() for i in range(9)]
    # three messages a second: the last three wait for the third period (>= 2 s after the first)
    assert elapsed >= 1.5, elapsed
    status, _ = _call(limited, "POST", TOPIC_PATH + "/subscriptionDispatchRate",
                      {"ratePeriodInSecond": 0})
    assert status == 412
    consumer.close()
    producer.close()


def pulsar_earliest() -> Any:
    import pulsar

    return pulsar.InitialPosition.Earliest


def test_publish_rate_throttles_by_pausing_reads_and_counts_it(
        limited: Any, client: Any) -> None:
    import time

    assert _call(limited, "POST", NS + "/publishRate",
                 {"publishThrottlingRateInMsg": 1000})[0] == 204
    assert _call(limited, "GET", NS)[1]["publishMaxMessageRate"] == {"standalone": {
        "publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1}}
    rate = {"publishThrottlingRateInMsg": 4, "publishThrottlingRateInByte": -1}
    assert _call(limited, "POST", TOPIC_PATH + "/publishRate", rate)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/publishRate") == (200, rate)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    started = time.monotonic()
    for i in range(10):
        producer.send(f"m{i}".encode())      # every send is stored and answered, none refused
    elapsed = time.monotonic() - started
    # four a second: the ninth and tenth wait for the third window (>= 2 s after the first)
    assert elapsed >= 1.5, elapsed
    stats = _stats(limited)
    assert stats["publishRateLimitedTimes"] >= 2
    assert stats["msgInCounter"] == 10
    assert _topic_metric(limited, "pulsar_publish_rate_limit_times") == \
        stats["publishRateLimitedTimes"]
    producer.close()


def test_topic_dispatch_rate_is_shared_by_its_subscriptions(limited: Any, client: Any) -> None:
    import time

    rate = {"dispatchThrottlingRateInMsg": 4, "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1, "relativeToPublishRate": False}
    assert _call(limited, "POST", NS + "/dispatchRate", rate)[0] == 204
    assert _call(limited, "GET", NS)[1]["topicDispatchRate"] == {"standalone": rate}
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(4):
        producer.send(f"m{i}".encode())
    consumers = [client.subscribe(TOPIC, name, initial_position=pulsar_earliest())
                 for name in ("a", "b")]
    started = time.monotonic()
    for consumer in consumers:   # eight deliveries at four a second over the topic
        assert [consumer.receive(10_000).data() for _ in range(4)] == \
            [f"m{i}".encode() for i in range(4)]
    assert time.monotonic() - started >= 0.5
    for consumer in consumers:
        consumer.close()
    producer.close()


def test_subscribe_rate_refuses_a_consumer_subscribing_too_often(limited: Any) -> None:
    rate = {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 30}
    assert _call(limited, "POST", NS + "/subscribeRate", {"subscribeThrottlingRatePerConsumer": 9})[0] == 204
    assert _call(limited, "GET", NS)[1]["clusterSubscribeRate"] == {"standalone": {
        "subscribeThrottlingRatePerConsumer": 9, "ratePeriodInSecond": 30}}
    assert _call(limited, "POST", TOPIC_PATH + "/subscribeRate", rate)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/subscribeRate") == (200, rate)
    with RawClient(limited.service_url) as raw:
        raw.handshake()
        for request_id in (1, 3):
            answer = raw.request(C.encode_subscribe(TOPIC, "s", 1, 7, request_id,
                                                    consumer_name="c"))
            assert answer.type == T.SUCCESS
            assert raw.request(C.encode_close_consumer(7, request_id + 1)).type == T.SUCCESS
        refused = raw.request(C.encode_subscribe(TOPIC, "s", 1, 7, 5, consumer_name="c"))
        assert (refused.error.error, refused.error.message) == (
            ServerError.NotAllowedError,
            "Subscribe limited by subscribe rate limit per consumer.")
        # another consumer (another id) has its own count
        answer = raw.request(C.encode_subscribe(TOPIC, "s", 1, 8, 6, consumer_name="c"))
        assert answer.type == T.SUCCESS


def test_topic_max_message_size_refuses_a_larger_send(limited: Any) -> None:
    from broker_rawclient import make_entry

    assert _call(limited, "POST", TOPIC_PATH + "/maxMessageSize", 100)[0] == 204
    assert _call(limited, "GET", TOPIC_PATH + "/maxMessageSize") == (200, 100)
    with RawClient(limited.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(TOPIC).type == T.PRODUCER_SUCCESS
        assert raw.request(C.encode_send(1, 0, make_entry(b"small"))).type == T.SEND_RECEIPT
        refused = raw.request(C.encode_send(1, 1, make_entry(b"x" * 200, sequence_id=1)))
        assert refused.type == T.SEND_ERROR
        assert (refused.send_error.error, refused.send_error.message) == (
            ServerError.NotAllowedError, "Exceed maximum message size")
    refusal = ("topic-level maxMessageSize must be greater than or equal to 0 and must be "
               "smaller than that in the broker-level")
    for value in (-1, 5 * 1024 * 1024 + 1):   # the broker's maxMessageSize bounds it
        assert _call(limited, "POST", TOPIC_PATH + "/maxMessageSize", value) == (
            412, {"reason": refusal})
