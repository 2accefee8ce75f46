"""A topic's policies deleted at once, the broker's owned namespaces and the backlog-quota check
on demand: Pulsar's paths and answers, and their ``horae-admin`` commands."""

from __future__ import annotations

import json
from typing import Any

import pulsar
import pytest

from cli.admin.main import main
from tests.waiting import wait_until

from .conftest import Api

T = "/admin/v2/persistent/public/default"
TOPIC = "persistent://public/default/"


def _ok(reply: Any, status: int = 204) -> Any:
    assert reply.status == status, (reply.status, reply.body)
    return reply.body


def test_deleting_a_topics_policies_drops_them_and_keeps_its_properties(
        client: Any, api: Api) -> None:
    base = T + "/tp-del"
    _ok(api("PUT", base, {"team": "a"}))
    _ok(api("POST", base + "/maxProducers", 1))
    _ok(api("POST", base + "/messageTTL?messageTTL=120"))
    first = client.create_producer(TOPIC + "tp-del")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(TOPIC + "tp-del")
    _ok(api("DELETE", base + "/policies"))
    assert _ok(api("GET", base + "/maxProducers"), 200) is None
    assert _ok(api("GET", base + "/messageTTL"), 200) is None
    assert _ok(api("GET", base + "/properties"), 200) == {"team": "a"}
    second = client.create_producer(TOPIC + "tp-del")     # the limit went with its policy
    second.close()
    first.close()
    _ok(api("DELETE", base + "/policies"))                # nothing left: still 204
    # Pulsar 4.0 answers 204 for a namespace that does not exist: nothing to delete
    _ok(api("DELETE", "/admin/v2/persistent/public/nope/x/policies"))


def test_owned_namespaces_are_every_namespace(api: Api) -> None:
    _ok(api("PUT", "/admin/v2/namespaces/public/owned-x"))
    cluster = _ok(api("GET", "/admin/v2/clusters"), 200)[0]
    broker_id = _ok(api("GET", f"/admin/v2/brokers/{cluster}"), 200)[0]
    owned = _ok(api("GET", f"/admin/v2/brokers/{cluster}/{broker_id}/ownedNamespaces"), 200)
    status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    assert owned["public/default/0x00000000_0xffffffff"] == status
    assert owned["public/owned-x/0x00000000_0xffffffff"] == status
    reply = api("GET", f"/admin/v2/brokers/{cluster}/elsewhere:1/ownedNamespaces")
    assert (reply.status, reply.reason) == (
        404, "Broker id 'elsewhere:1' not found in available brokers.")
    # Pulsar 4.0 does not check the cluster of the path: the same map for any name
    assert _ok(api("GET", f"/admin/v2/brokers/other/{broker_id}/ownedNamespaces"), 200) == owned


def test_backlog_quota_check_applies_the_quotas_now(client: Any, api: Api) -> None:
    topic = TOPIC + "bq-now"
    consumer = client.subscribe(topic, "s")
    consumer.close()
    producer = client.create_producer(topic)
    for _ in range(3):
        producer.send(b"old")
    producer.close()
    stats = lambda: _ok(api("GET", T + "/bq-now/stats"), 200)["subscriptions"]["s"]  # noqa: E731
    assert stats()["msgBacklog"] == 3
    quota = {"limitSize": -1, "limitTime": 0, "policy": "consumer_backlog_eviction"}
    _ok(api("POST", T + "/bq-now/backlogQuota?backlogQuotaType=message_age", quota))
    # the timer's check is a minute away (backlogQuotaCheckIntervalInSeconds): this one is now
    _ok(api("GET", "/admin/v2/brokers/backlog-quota-check"))
    wait_until(lambda: stats()["msgBacklog"] == 0, message="the backlog evicted")


def _cli(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> Any:
    code = main(["--admin-url", broker.web_url, *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out.strip()
    return json.loads(out) if out else None


def test_horae_admin_commands(broker: Any, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    run = lambda *argv: _cli(capsys, broker, *argv)  # noqa: E731
    topic = TOPIC + "cli-tp-del"
    run("topics", "create", topic)
    run("topic-policies", "set-max-producers", topic, "-p", "3")
    assert run("topic-policies", "get-max-producers", topic) == 3
    run("topic-policies", "delete", topic)
    assert api("GET", T + "/cli-tp-del/maxProducers").body is None
    run("topicPolicies", "delete", topic, "-g")
    cluster = api("GET", "/admin/v2/clusters").body[0]
    broker_id = api("GET", f"/admin/v2/brokers/{cluster}").body[0]
    owned = run("brokers", "namespaces", cluster, "--url", broker_id)
    assert "public/default/0x00000000_0xffffffff" in owned
    run("brokers", "backlog-quota-check")
