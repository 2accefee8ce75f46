"""Delayed-delivery policies over REST: namespace and topic level, 412 on invalid values."""

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


def test_invalid_policy_values_are_412_with_a_reason(api: Api) -> None:
    assert api("PUT", f"{P}/bad").status == 204
    for path in (NS, f"{P}/bad/delayedDelivery"):
        negative = api("POST", path, {"tickTime": -5})
        assert negative.status == 412
        assert "tickTime" in negative.reason
        unknown = api("POST", path, {"delay": 5})
        assert unknown.status == 412
        assert "Unknown" in unknown.reason
        not_object = api("POST", path, [1, 2])
        assert not_object.status == 412
        fraction = api("POST", path, {"maxDeliveryDelayInMillis": 1.5})
        assert fraction.status == 412
    assert api("GET", NS).body is None


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
