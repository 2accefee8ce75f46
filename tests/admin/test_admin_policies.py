"""Delayed-delivery policies over REST: namespace and topic level, 412 on invalid values, 400
on wrongly typed ones."""

from __future__ import annotations

from typing import Any

from .conftest import Api

NS = "/admin/v2/namespaces/public/default/delayedDelivery"
P = "/admin/v2/persistent/public/default"


def test_namespace_policy_set_get_remove(api: Api) -> None:
    assert api("GET", NS).body is None
    policy = {"active": True, "tickTime": 500, "maxDeliveryDelayInMillis": 60_000,
              "fixedDeliveryDelayInMillis": 0}
    assert api("POST", NS, policy).status == 204
    assert api("GET", NS).body == policy
    assert api("DELETE", NS).status == 204
    assert api("GET", NS).body is None


def test_applied_policy_resolves_topic_over_namespace_over_broker(api: Api) -> None:
    assert api("PUT", f"{P}/pol").status == 204
    assert api("POST", NS, {"tickTime": 200, "maxDeliveryDelayInMillis": 10_000}).status == 204
    topic_policy = {"maxDeliveryDelayInMillis": 5_000}
    assert api("POST", f"{P}/pol/delayedDelivery", topic_policy).status == 204
    applied = api("GET", f"{P}/pol/delayedDelivery?applied=true").body
    assert applied == {"active": True, "tickTime": 200, "maxDeliveryDelayInMillis": 5_000,
                       "fixedDeliveryDelayInMillis": 0}
    assert api("GET", f"{P}/pol/delayedDelivery").body == {"maxDeliveryDelayInMillis": 5_000}
    ns_applied = api("GET", NS + "?applied=true").body
    assert ns_applied["maxDeliveryDelayInMillis"] == 10_000
    assert api("DELETE", f"{P}/pol/delayedDelivery").status == 204
    assert api("GET", f"{P}/pol/delayedDelivery").body is None


def test_invalid_policy_values_are_412_with_a_reason_and_unknown_fields_dropped(api: Api) -> None:
    assert api("PUT", f"{P}/bad").status == 204
    for path in (NS, f"{P}/bad/delayedDelivery"):
        negative = api("POST", path, {"tickTime": -5})
        assert negative.status == 412
        assert "tickTime" in negative.reason
        # an unknown field is dropped, as Pulsar's JSON binding drops it (204, nothing stored)
        assert api("POST", path, {"delay": 5}).status == 204
    assert api("GET", NS).body in (None, {})


def test_wrongly_typed_policy_bodies_are_400_as_pulsar_answers_them(api: Api) -> None:
    assert api("PUT", f"{P}/typed").status == 204
    for path in (NS, f"{P}/typed/delayedDelivery"):
        for body, field in (([1, 2], "JSON object"), ("x", "JSON object"),
                            ({"tickTime": "x"}, "tickTime"), ({"active": "maybe"}, "active"),
                            ({"maxDeliveryDelayInMillis": 1.5}, "maxDeliveryDelayInMillis"),
                            ({"fixedDeliveryDelayInMillis": [1]}, "fixedDeliveryDelayInMillis")):
            reply = api("POST", path, body)
            assert reply.status == 400, (path, body, reply)
            assert field in reply.reason
    assert api("GET", NS).body is None
    assert api("GET", f"{P}/typed/delayedDelivery").body is None


def test_policies_of_missing_namespaces_and_topics_are_404(api: Api) -> None:
    ns = api("GET", "/admin/v2/namespaces/public/nope/delayedDelivery")
    assert (ns.status, ns.reason) == (404, "Namespace does not exist")
    topic = api("POST", f"{P}/nope/delayedDelivery", {"tickTime": 5})
    assert (topic.status, topic.reason) == (404, "Topic not found")
    assert api("PUT", f"{P}/parted/partitions", 2).status == 204
    assert api("POST", f"{P}/parted/delayedDelivery", {"tickTime": 5}).status == 204


def test_a_policy_set_over_rest_applies_to_the_loaded_topic_at_once(
        api: Api, client: Any, broker: Any) -> None:
    """No restart: the loaded topic's resolved policy changes with the next POST/DELETE.

    (The rejection itself is the delayed area's test: the C++ client answers a SEND_ERROR by
    reconnecting and resending, so observing it through the official client takes a send
    timeout.)"""
    full = "persistent://public/default/guarded"
    producer = client.create_producer(full, batching_enabled=False)
    producer.send(b"before")

    def policy() -> Any:
        return broker.call(lambda: broker.service.topics[full].delivery.delay_policy())

    assert policy().max_delay_ms == 0
    body = {"maxDeliveryDelayInMillis": 1_000, "tickTime": 10}
    assert api("POST", f"{P}/guarded/delayedDelivery", body).status == 204
    assert (policy().max_delay_ms, policy().tick_time_ms) == (1_000, 10)
    assert api("POST", NS, {"fixedDeliveryDelayInMillis": 5_000}).status == 204
    assert (policy().fixed_delay_ms, policy().max_delay_ms) == (5_000, 0)   # fixed beats max
    assert api("DELETE", f"{P}/guarded/delayedDelivery").status == 204
    assert api("DELETE", NS).status == 204
    assert (policy().max_delay_ms, policy().fixed_delay_ms) == (0, 0)
    producer.close()


def test_limit_refusals_are_pulsars_texts_at_each_level(api: Api) -> None:
    """Pulsar's NamespacesBase and PersistentTopicsBase word some refusals differently per
    level; each is answered 412 with the level's own text."""
    ns = "/admin/v2/namespaces/public/default"
    assert api("PUT", f"{P}/texts").status == 204
    topic = f"{P}/texts"
    cases = [
        (f"{ns}/maxProducersPerTopic", "maxProducersPerTopic must be 0 or more"),
        (f"{topic}/maxProducers", "maxProducers must be 0 or more"),
        (f"{ns}/maxConsumersPerTopic", "maxConsumersPerTopic must be 0 or more"),
        (f"{topic}/maxConsumers", "maxConsumers must be 0 or more"),
        (f"{ns}/maxConsumersPerSubscription", "maxConsumersPerSubscription must be 0 or more"),
        (f"{topic}/maxConsumersPerSubscription", "Invalid value for maxConsumersPerSubscription"),
        (f"{ns}/compactionThreshold", "compactionThreshold must be 0 or more"),
        (f"{topic}/compactionThreshold", "Invalid value for compactionThreshold"),
        (f"{ns}/messageTTL", "Invalid value for message TTL, message TTL must >= 0"),
        (f"{topic}/messageTTL", "Invalid value for message TTL"),
        (f"{topic}/maxUnackedMessagesOnConsumer", "maxUnackedNum must be 0 or more"),
        (f"{ns}/maxUnackedMessagesPerSubscription",
         "maxUnackedMessagesPerSubscription must be 0 or more"),
        (f"{ns}/subscriptionExpirationTime", "Invalid value for subscription expiration time"),
    ]
    for path, reason in cases:
        reply = api("POST", path, -1)
        assert (reply.status, reply.reason) == (412, reason), path
    reply = api("POST", f"{ns}/autoTopicCreation", {"allowAutoTopicCreation": True,
                                                   "topicType": "sideways"})
    assert (reply.status, reply.reason) == (412, "Invalid configuration for "
                                            "autoTopicCreationOverride. the detail is Unknown "
                                            "topic type [sideways]")


def test_schema_validation_enforced_reads_false_while_unset_as_pulsar(api: Api) -> None:
    """Pulsar keeps schema validation as a primitive boolean: its getters answer ``false``
    while unset, not an empty body. Pulsar 4.0 has no DELETE of it: the namespace path falls to
    the bundle route (412), the topic one is 405; setting ``false`` turns it off."""
    ns = "/admin/v2/namespaces/public/default/schemaValidationEnforced"
    topic = f"{P}/sve/schemaValidationEnforced"
    assert api("PUT", f"{P}/sve").status == 204
    for path in (ns, topic):
        unset = api("GET", path)
        assert (unset.status, unset.body) == (200, False)
        assert api("POST", path, True).status == 204
        assert api("GET", path).body is True
        assert api("DELETE", path).status == (412 if path == ns else 405)
        assert api("POST", path, False).status == 204
        assert api("GET", path).body is False


def test_count_and_rate_topic_policies_refuse_a_partition_and_name_a_missing_topic(
        api: Api) -> None:
    assert api("PUT", f"{P}/parts/partitions", 2).status == 204
    for suffix, body in (("maxProducers", 3), ("maxConsumers", 3), ("messageTTL", 60),
                         ("dispatchRate", {"dispatchThrottlingRateInMsg": 5}),
                         ("backlogQuotaMap", None), ("replication", ["x"])):
        for method in ("GET", "POST", "DELETE"):
            if suffix == "backlogQuotaMap" and method != "GET":
                continue
            reply = api(method, f"{P}/parts-partition-1/{suffix}",
                        body if method == "POST" else None)
            assert (reply.status, reply.reason) == (
                412, "Not allowed to set/get topic policy for a partition"), (suffix, method)
        reply = api("GET", f"{P}/never/{suffix}")
        assert (reply.status, reply.reason) == (
            404, "Topic persistent://public/default/never not found"), suffix
    assert api("POST", f"{P}/parts/maxProducers", 3).status == 204
    assert api("GET", f"{P}/parts/maxProducers").body == 3
    for domain in ("persistent", "non-persistent"):
        reply = api("PUT", f"/admin/v2/{domain}/public/default/x-partition-y/partitions", 2)
        assert (reply.status, reply.reason) == (
            412, "Partitioned Topic Name should not contain '-partition-'")
