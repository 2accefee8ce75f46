"""Creating a namespace with a Pulsar Policies body sets every policy of it Horae keeps: each
reads back through its own route, a bad field is refused as that route refuses it (and nothing
is created), and the policies are kept across a restart."""

from __future__ import annotations

from typing import Any

from .conftest import Api, http

NS = "/admin/v2/namespaces/public/made"

RATE = {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": 2048,
        "relativeToPublishRate": False, "ratePeriodInSecond": 1}
QUOTA = {"limitSize": 1024, "limitTime": -1, "policy": "producer_request_hold"}


def _body(cluster: str) -> dict[str, Any]:
    return {
        "bundles": {"numBundles": 1},
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        "message_ttl_in_seconds": 300,
        "backlog_quota_map": {"destination_storage": QUOTA},
        "topicDispatchRate": {cluster: RATE},
        "subscriptionDispatchRate": {cluster: RATE},
        "clusterSubscribeRate": {cluster: {"subscribeThrottlingRatePerConsumer": 5,
                                           "ratePeriodInSecond": 30}},
        "publishMaxMessageRate": {cluster: {"publishThrottlingRateInMsg": 100,
                                            "publishThrottlingRateInByte": 1000}},
        "max_producers_per_topic": 3, "max_consumers_per_topic": 4,
        "max_unacked_messages_per_consumer": 500, "deduplicationEnabled": True,
        "delayed_delivery_policies": {"active": True, "tickTime": 500,
                                      "maxDeliveryDelayInMillis": 60000},
        "schema_compatibility_strategy": "FORWARD", "schema_validation_enforced": True,
        "subscription_expiration_time_minutes": 7,
        "autoTopicCreationOverride": {"allowAutoTopicCreation": False},
        "inactive_topic_policies": {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                    "maxInactiveDurationSeconds": 120,
                                    "deleteWhileInactive": True},
        "properties": {"team": "a"},
        "encryption_required": False, "subscription_types_enabled": [],
    }


def _read_back(url: str) -> None:
    def get(suffix: str) -> Any:
        reply = http(url, "GET", NS + suffix)
        assert reply.status == 200, (suffix, reply)
        return reply.body

    assert get("/retention") == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert get("/messageTTL") == 300
    assert get("/backlogQuotaMap")["destination_storage"]["limitSize"] == 1024
    assert get("/dispatchRate") == RATE
    assert get("/subscriptionDispatchRate") == RATE
    assert get("/subscribeRate") == {"subscribeThrottlingRatePerConsumer": 5,
                                     "ratePeriodInSecond": 30}
    assert get("/publishRate") == {"publishThrottlingRateInMsg": 100,
                                   "publishThrottlingRateInByte": 1000}
    assert (get("/maxProducersPerTopic"), get("/maxConsumersPerTopic")) == (3, 4)
    assert get("/maxUnackedMessagesPerConsumer") == 500
    assert get("/deduplication") is True
    assert get("/delayedDelivery")["tickTime"] == 500
    assert get("/schemaCompatibilityStrategy") == "FORWARD"
    assert get("/schemaValidationEnforced") is True
    assert get("/subscriptionExpirationTime") == 7
    assert get("/autoTopicCreation") == {"allowAutoTopicCreation": False}
    assert get("/inactiveTopicPolicies")["maxInactiveDurationSeconds"] == 120
    assert get("/properties") == {"team": "a"}
    assert get("/encryptionRequired") is False
    assert get("/subscriptionTypesEnabled") == []


def test_create_with_a_policies_body_sets_each_policy_and_keeps_it(
        broker_factory: Any, tmp_path: Any) -> None:
    data = tmp_path / "made"
    first = broker_factory(data_dir=data)
    cluster = http(first.web_url, "GET", "/admin/v2/clusters").body[0]
    assert http(first.web_url, "PUT", NS, _body(cluster)).status == 204
    _read_back(first.web_url)
    first.stop()
    second = broker_factory(data_dir=data)
    _read_back(second.web_url)


def test_a_bad_policy_field_refuses_the_creation(api: Api) -> None:
    for field, value, status in (
            ("message_ttl_in_seconds", -1, 412),
            ("retention_policies", {"retentionTimeInMinutes": -2}, 412),
            ("backlog_quota_map", {"destination_storage": {"policy": "nope"}}, 400),
            ("schema_compatibility_strategy", "SIDEWAYS", 400),
            ("inactive_topic_policies", {"maxInactiveDurationSeconds": 0}, 412),
            ("autoTopicCreationOverride", {"allowAutoTopicCreation": True}, 412),
            ("deduplicationEnabled", "yes", 400),
            ("properties", ["a"], 400)):
        reply = api("PUT", "/admin/v2/namespaces/public/bad", {field: value})
        assert reply.status == status, (field, reply)
    assert "public/bad" not in api("GET", "/admin/v2/namespaces/public").body
    ttl = api("PUT", "/admin/v2/namespaces/public/bad", {"message_ttl_in_seconds": -1})
    assert ttl.reason == "Invalid value for message TTL, message TTL must >= 0"
