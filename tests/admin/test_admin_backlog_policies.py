"""Retention, message TTL, backlog quotas and inactive-topic policies: REST as Pulsar, and what
the broker does with them (official client against in-process brokers)."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from conftest import make_client
from waiting import wait_until

from broker.topics.trim import retention_bound
from storage.ledger_state import LedgerInfo

from .conftest import Api, http

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"
FULL = "persistent://public/default"


def test_namespace_policies_set_get_remove_and_document(api: Api) -> None:
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert api("POST", NS + "/retention", retention).status == 204
    assert api("POST", NS + "/messageTTL", 30).status == 204
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert api("POST", NS + "/backlogQuota?backlogQuotaType=destination_storage",
               quota).status == 204
    inactive = {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                "maxInactiveDurationSeconds": 120, "deleteWhileInactive": True}
    assert api("POST", NS + "/inactiveTopicPolicies", inactive).status == 204
    assert api("GET", NS + "/retention").body == retention
    assert api("GET", NS + "/messageTTL").body == 30
    written = {**quota, "limit": 1024}  # Pulsar writes limitSize under its old name too
    assert api("GET", NS + "/backlogQuotaMap").body == {"destination_storage": written}
    assert api("GET", NS + "/inactiveTopicPolicies").body == inactive
    doc = api("GET", NS).body
    assert doc["retention_policies"] == retention
    assert doc["message_ttl_in_seconds"] == 30
    assert doc["backlog_quota_map"] == {"destination_storage": written}
    assert doc["inactive_topic_policies"] == inactive
    for path in ("/retention", "/messageTTL", "/inactiveTopicPolicies",
                 "/backlogQuota?backlogQuotaType=destination_storage"):
        assert api("DELETE", NS + path).status == 204
    doc = api("GET", NS).body
    assert "retention_policies" not in doc  # unset policies are left out, as Pulsar does
    assert "message_ttl_in_seconds" not in doc
    assert doc["backlog_quota_map"] == {}


def test_topic_policies_and_applied_values(api: Api) -> None:
    assert api("PUT", T + "/pol").status == 204
    assert api("POST", NS + "/messageTTL", 30).status == 204
    assert api("GET", T + "/pol/messageTTL").body is None
    assert api("GET", T + "/pol/messageTTL?applied=true").body == 30
    assert api("POST", T + "/pol/messageTTL?messageTTL=5").status == 204
    assert api("GET", T + "/pol/messageTTL?applied=true").body == 5
    assert api("GET", T + "/pol/retention?applied=true").body == {
        "retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    quota = {"limitSize": -1, "limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert api("POST", T + "/pol/backlogQuota?backlogQuotaType=message_age", quota).status == 204
    assert api("GET", T + "/pol/backlogQuotaMap").body == {"message_age": {**quota, "limit": -1}}


def test_numeric_strings_and_the_old_limit_name_are_read_as_pulsar_reads_them(api: Api) -> None:
    # Jackson coerces a JSON string to a Long field; "limit" is limitSize's deprecated name
    body = {"limit": "10240", "policy": "producer_request_hold"}
    assert api("POST", NS + "/backlogQuota", body).status == 204
    assert api("GET", NS + "/backlogQuotaMap").body["destination_storage"] == {
        "limit": 10240, "limitSize": 10240, "limitTime": -1, "policy": "producer_request_hold"}
    assert api("POST", NS + "/retention", {"retentionTimeInMinutes": "5",
                                          "retentionSizeInMB": 1}).status == 204


@pytest.mark.parametrize(("path", "body", "status", "reason"), [
    ("/messageTTL", -1, 412, "Invalid value for message TTL, message TTL must >= 0"),
    ("/messageTTL", "x", 400, None),
    ("/retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 0}, 412, None),
    ("/backlogQuota", {"limitSize": 1, "policy": "drop_everything"}, 400, None),
    ("/backlogQuota?backlogQuotaType=sideways", {"limitSize": 1, "policy": "producer_exception"},
     400, None),
    ("/inactiveTopicPolicies", {"inactiveTopicDeleteMode": "whenever"}, 412, None),
])
def test_bad_policy_values_are_refused(api: Api, path: str, body: Any, status: int,
                                       reason: str | None) -> None:
    reply = api("POST", NS + path, body)
    assert reply.status == status
    if reason is not None:
        assert reply.reason == reason


def test_message_ttl_expires_unacked_messages(broker: Any, client: Any, api: Api) -> None:
    client.subscribe(f"{FULL}/ttl", "s").close()
    producer = client.create_producer(f"{FULL}/ttl", batching_enabled=False)
    for i in range(3):
        producer.send(b"%d" % i)
    assert api("POST", T + "/ttl/messageTTL?messageTTL=1").status == 204
    topic = broker.service.topics[f"{FULL}/ttl"]
    assert broker.call(topic.backlog.apply_ttl) == 0        # younger than the TTL
    time.sleep(1.1)   # the messages must age past a 1 s TTL: real time, nothing to wait on
    producer.send(b"young")
    assert broker.call(topic.backlog.apply_ttl) == 3
    sub = api("GET", T + "/ttl/stats").body["subscriptions"]["s"]
    assert sub["msgBacklog"] == 1
    assert sub["totalMsgExpired"] == 3
    producer.close()


def test_producer_exception_quota_refuses_producers_and_fails_sends(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"backlogQuotaCheckIntervalInSeconds": 1})
    client = make_client(broker.service_url)
    try:
        client.subscribe(f"{FULL}/q", "s").close()
        producer = client.create_producer(f"{FULL}/q", batching_enabled=False,
                                          send_timeout_millis=10_000)
        quota = {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"}
        assert http(broker.web_url, "POST", T + "/q/backlogQuota", quota).status == 204
        for _ in range(3):
            producer.send(b"x" * 100)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(f"{FULL}/q")
        # the periodic check disconnects the producer; its re-creation fails its sends
        with pytest.raises(pulsar.PulsarException):
            wait_until(lambda: producer.send(b"y") and False, timeout_s=15,
                       message="a send refused by the quota")
    finally:
        client.close()


def test_consumer_backlog_eviction_drops_the_oldest_backlog(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"backlogQuotaCheckIntervalInSeconds": 1})
    client = make_client(broker.service_url)
    try:
        client.subscribe(f"{FULL}/ev", "s").close()
        producer = client.create_producer(f"{FULL}/ev", batching_enabled=False)
        quota = {"limitSize": 1000, "limitTime": -1, "policy": "consumer_backlog_eviction"}
        assert http(broker.web_url, "POST", T + "/ev/backlogQuota", quota).status == 204
        for i in range(20):
            producer.send(b"%03d" % i + b"x" * 200)
        wait_until(lambda: http(broker.web_url, "GET", T + "/ev/stats").body
                   ["subscriptions"]["s"]["msgBacklog"] < 20, timeout_s=15,
                   message="backlog evicted")
        consumer = client.subscribe(f"{FULL}/ev", "s")
        first = consumer.receive(timeout_millis=5000).data()
        assert first[:3] != b"000"       # the oldest went, the newest stay
        consumer.close()
        producer.close()
    finally:
        client.close()


def test_inactive_topics_are_deleted_when_enabled(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={
        "brokerDeleteInactiveTopicsEnabled": True,
        "brokerDeleteInactiveTopicsFrequencySeconds": 1,
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 1})
    assert http(broker.web_url, "PUT", T + "/idle").status == 204
    assert http(broker.web_url, "PUT", T + "/kept").status == 204
    assert http(broker.web_url, "PUT", T + "/kept/subscription/s").status == 204
    wait_until(lambda: f"{FULL}/idle" not in http(broker.web_url, "GET", T).body,
               timeout_s=15, message="idle topic deleted")
    assert f"{FULL}/kept" in http(broker.web_url, "GET", T).body   # it has a subscription


def test_inactive_topics_are_kept_by_default(broker: Any, api: Api) -> None:
    assert api("PUT", T + "/stay").status == 204
    assert api("GET", NS + "/inactiveTopicPolicies?applied=true").body[
        "deleteWhileInactive"] is False
    assert broker.service.inactive.deleted == 0


def _info(ledger_id: int, size: int, created_ms: int) -> LedgerInfo:
    return LedgerInfo(ledger_id=ledger_id, entries=1, size_bytes=size, created_ms=created_ms,
                      sealed=True)


def test_retention_bound_follows_pulsar_rules() -> None:
    now = 10 * 3_600_000
    infos = [_info(1, 1 << 20, now - 3 * 3_600_000), _info(2, 1 << 20, now - 2 * 3_600_000),
             _info(3, 1 << 20, now - 30 * 60_000), _info(4, 1 << 20, now)]
    assert retention_bound(infos, 0, 0, now) is None            # no retention: trim all
    assert retention_bound(infos, -1, -1, now) == -1            # keep everything
    assert retention_bound(infos, 60, -1, now) == 1             # ledger 2 closed 30 min ago
    assert retention_bound(infos, -1, 2, now) == 2              # keep 2 MB
    assert retention_bound(infos, 60, 3, now) == 1              # either rule deletes


def test_retention_keeps_consumed_ledgers(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"managedLedgerMaxEntriesPerLedger": 2})
    client = make_client(broker.service_url)
    try:
        assert http(broker.web_url, "POST", T + "/ret/retention",
                    {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).status == 404
        assert http(broker.web_url, "PUT", T + "/ret").status == 204
        assert http(broker.web_url, "POST", T + "/ret/retention",
                    {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).status == 204
        consumer = client.subscribe(f"{FULL}/ret", "s")
        producer = client.create_producer(f"{FULL}/ret", batching_enabled=False)
        for i in range(6):
            producer.send(b"%d" % i)
        for _ in range(6):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        topic = broker.service.topics[f"{FULL}/ret"]
        wait_until(lambda: topic.subscriptions["s"].cursor.backlog == 0, message="all acked")
        before = len(topic.ledger.ledgers)
        assert before >= 3
        assert broker.call(topic.trimmer.bound) == -1
        assert broker.call(lambda: topic.ledger.trim(topic.trimmer.bound())) == []
        assert len(topic.ledger.ledgers) == before
        assert http(broker.web_url, "DELETE", T + "/ret/retention").status == 204
        assert broker.call(topic.trimmer.bound) is None
        # without retention the consumed ledgers go (once the dedup snapshot passed them too)
        wait_until(lambda: broker.call(lambda: topic.ledger.trim(topic.trimmer.bound())),
                   timeout_s=15, message="consumed ledgers trimmed")
        assert len(topic.ledger.ledgers) < before
        consumer.close()
        producer.close()
    finally:
        client.close()
