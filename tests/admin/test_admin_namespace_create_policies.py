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


def test_create_attaches_a_resource_group_and_keeps_the_cluster_dispatch_rate(api: Api) -> None:
    cluster = api("GET", "/admin/v2/clusters").body[0]
    other = {**RATE, "dispatchThrottlingRateInMsg": 99}
    # a group that does not exist yet: stored unchecked, as Pulsar's create stores it
    assert api("PUT", "/admin/v2/namespaces/public/early", {"resource_group_name": "g"}).status == 204
    assert api("GET", "/admin/v2/namespaces/public/early/resourcegroup").body == "g"
    assert api("PUT", "/admin/v2/resourcegroups/g", {"publishRateInMsgs": 100}).status == 204

    body = {"resource_group_name": "g", "clusterDispatchRate": {cluster: RATE, "elsewhere": other}}
    assert api("PUT", "/admin/v2/namespaces/public/grouped", body).status == 204
    assert api("GET", "/admin/v2/namespaces/public/grouped/resourcegroup").body == "g"
    doc = api("GET", "/admin/v2/namespaces/public/grouped").body
    assert doc["resource_group_name"] == "g"
    assert doc["clusterDispatchRate"] == {cluster: RATE} and "topicDispatchRate" not in doc
    # attached: the group cannot go
    assert api("DELETE", "/admin/v2/resourcegroups/g").status == 412
    # the namespace's dispatchRate is unset, as in Pulsar; its topics are held to the cluster rate
    ns_rate = api("GET", "/admin/v2/namespaces/public/grouped/dispatchRate")
    assert (ns_rate.status, ns_rate.body) == (200, None)
    topic = "/admin/v2/persistent/public/grouped/t"
    assert api("PUT", topic).status == 204
    assert api("GET", topic + "/dispatchRate?applied=true").body == RATE
    # the dispatchRate route writes and removes both, as Pulsar's
    assert api("POST", "/admin/v2/namespaces/public/grouped/dispatchRate", other).status == 204
    doc = api("GET", "/admin/v2/namespaces/public/grouped").body
    assert doc["clusterDispatchRate"] == doc["topicDispatchRate"] == {cluster: other}
    assert api("GET", topic + "/dispatchRate?applied=true").body == other
    assert api("DELETE", "/admin/v2/namespaces/public/grouped/dispatchRate").status == 204
    doc = api("GET", "/admin/v2/namespaces/public/grouped").body
    assert "clusterDispatchRate" not in doc and "topicDispatchRate" not in doc
    assert api("GET", topic + "/dispatchRate?applied=true").body[
        "dispatchThrottlingRateInMsg"] == 0                    # the broker's default

    # topicDispatchRate's entry, where there is one, is the rate (Pulsar's topics read it first)
    both = {"topicDispatchRate": {cluster: other}, "clusterDispatchRate": {cluster: RATE}}
    assert api("PUT", "/admin/v2/namespaces/public/both", both).status == 204
    assert api("PUT", "/admin/v2/persistent/public/both/t").status == 204
    assert api("GET", "/admin/v2/persistent/public/both/t/dispatchRate?applied=true").body == other
    bad = api("PUT", "/admin/v2/namespaces/public/badrate",
              {"clusterDispatchRate": {cluster: {"dispatchThrottlingRateInMsg": "x"}}})
    assert bad.status == 400


def test_create_keeps_offload_settings_and_entry_filters_as_pulsar(api: Api) -> None:
    ns = "/admin/v2/namespaces/public/offl"
    body = {"offload_threshold": 1000, "offload_threshold_in_seconds": -1,
            "offload_deletion_lag_ms": 5000, "entryFilters": {"entryFilterNames": "f1,f2"}}
    assert api("PUT", ns, body).status == 204
    # the old Policies fields are read while the offload document has no value
    assert api("GET", ns + "/offloadThreshold").body == 1000
    assert api("GET", ns + "/offloadThresholdInSeconds").body == -1
    assert api("GET", ns + "/offloadDeletionLagMs").body == 5000
    doc = api("GET", ns).body
    assert (doc["offload_threshold"], doc["offload_deletion_lag_ms"]) == (1000, 5000)
    assert "offload_threshold_in_seconds" not in doc and "offload_policies" not in doc
    assert doc["entryFilters"] == {"entryFilterNames": "f1,f2"}

    # setting the document takes them into it, and they go from the Policies
    offload = {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "b",
               "s3ManagedLedgerOffloadRegion": "r"}
    assert api("POST", ns + "/offloadPolicies", offload).status == 204
    stored = api("GET", ns + "/offloadPolicies").body
    assert stored["managedLedgerOffloadThresholdInBytes"] == 1000
    assert stored["managedLedgerOffloadDeletionLagInMillis"] == 5000
    assert "managedLedgerOffloadThresholdInSeconds" not in stored
    doc = api("GET", ns).body
    assert "offload_threshold" not in doc and "offload_deletion_lag_ms" not in doc
    assert doc["offload_policies"]["s3ManagedLedgerOffloadBucket"] == "b"
    assert api("GET", ns + "/offloadThreshold").body == 1000

    # a create body's offload document is stored as Pulsar's create stores it
    whole = {"offload_policies": {"managedLedgerOffloadDriver": "filesystem",
                                  "managedLedgerOffloadThresholdInBytes": 10}}
    assert api("PUT", "/admin/v2/namespaces/public/offl2", whole).status == 204
    stored = api("GET", "/admin/v2/namespaces/public/offl2/offloadPolicies").body
    assert stored["managedLedgerOffloadDriver"] == "filesystem"
    assert stored["managedLedgerOffloadMaxThreads"] == 2          # Pulsar's default filled in
    assert api("GET", "/admin/v2/namespaces/public/offl2/offloadThreshold").body == 10
    # Pulsar's EntryFilters reads a bare string as its names
    assert api("PUT", "/admin/v2/namespaces/public/offl4", {"entryFilters": "f3"}).status == 204
    assert api("GET", "/admin/v2/namespaces/public/offl4").body["entryFilters"] == {
        "entryFilterNames": "f3"}
    for field, value in (("offload_threshold", "big"), ("offload_policies", [1]),
                         ("entryFilters", ["f1"])):
        reply = api("PUT", "/admin/v2/namespaces/public/offl3", {field: value})
        assert reply.status == 400, (field, reply)
    assert "public/offl3" not in api("GET", "/admin/v2/namespaces/public").body
