"""Resource groups: the admin routes with Pulsar's answers, and the group's quotas shared by
every topic of its namespaces, driven past with the official Python client."""

from __future__ import annotations

import json
import time
from typing import Any

from rest import http_json

GROUPS = "/admin/v2/resourcegroups"
NS_A = "/admin/v2/namespaces/public/rga"
NS_B = "/admin/v2/namespaces/public/rgb"


def _call(broker: Any, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    return http_json(broker.web_url, method, path, raw)


def _text(broker: Any, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(broker.web_url + path, timeout=10) as resp:
        assert resp.status == 200
        return str(resp.read().decode())


def _earliest() -> Any:
    import pulsar

    return pulsar.InitialPosition.Earliest


def test_group_routes_answer_as_pulsar(broker: Any) -> None:
    assert _call(broker, "GET", GROUPS) == (200, [])
    status, body = _call(broker, "GET", GROUPS + "/g")
    assert (status, body["reason"]) == (404, "ResourceGroup does not exist")
    assert _call(broker, "PUT", GROUPS + "/g", {"publishRateInMsgs": 10,
                                                "dispatchRateInBytes": 2048})[0] == 204
    assert _call(broker, "GET", GROUPS + "/g") == (200, {"publishRateInMsgs": 10,
                                                         "dispatchRateInBytes": 2048})
    # an update changes the given fields that are not -1, as Pulsar's read-modify-write
    assert _call(broker, "PUT", GROUPS + "/g", {"publishRateInMsgs": -1,
                                                "dispatchRateInMsgs": 5})[0] == 204
    assert _call(broker, "GET", GROUPS + "/g") == (200, {
        "publishRateInMsgs": 10, "dispatchRateInBytes": 2048, "dispatchRateInMsgs": 5})
    assert _call(broker, "PUT", GROUPS + "/bad", {"publishRateInMsgs": "x"})[0] == 400
    assert _call(broker, "PUT", GROUPS + "/bad", [1])[0] == 400
    assert _call(broker, "GET", GROUPS) == (200, ["g"])
    # a namespace joins only a group that exists
    assert _call(broker, "PUT", NS_A, {})[0] == 204
    assert _call(broker, "GET", NS_A + "/resourcegroup") == (200, None)   # empty, as Pulsar
    status, body = _call(broker, "POST", NS_A + "/resourcegroup/nope")
    assert (status, body["reason"]) == (412, "ResourceGroup does not exist")
    assert _call(broker, "POST", NS_A + "/resourcegroup/g")[0] == 204
    assert _text(broker, NS_A + "/resourcegroup") == "g"   # plain text, as Pulsar
    assert _call(broker, "GET", NS_A)[1]["resource_group_name"] == "g"
    status, body = _call(broker, "DELETE", GROUPS + "/g")
    assert (status, body["reason"]) == (412, "ResourceGroup is in use")
    assert _call(broker, "DELETE", NS_A + "/resourcegroup")[0] == 204
    assert _text(broker, NS_A + "/resourcegroup") == ""
    assert _call(broker, "DELETE", GROUPS + "/g")[0] == 204
    assert _call(broker, "DELETE", GROUPS + "/g")[0] == 404
    assert _call(broker, "GET", "/admin/v2/namespaces/public/none/resourcegroup")[0] == 404


def test_groups_and_attachments_survive_a_restart(broker_factory: Any) -> None:
    broker = broker_factory()
    assert _call(broker, "PUT", GROUPS + "/g", {"publishRateInMsgs": 3})[0] == 204
    assert _call(broker, "PUT", NS_A, {})[0] == 204
    assert _call(broker, "POST", NS_A + "/resourcegroup/g")[0] == 204
    broker.stop()
    again = broker_factory(data_dir=broker.data_dir)
    assert _call(again, "GET", GROUPS + "/g") == (200, {"publishRateInMsgs": 3})
    assert _text(again, NS_A + "/resourcegroup") == "g"


def _metric(broker: Any, name: str, group: str, monitoring_class: str) -> float:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("ResourceGroup") == group and \
                    sample.labels.get("MonitoringClass") == monitoring_class:
                return float(sample.value)
    raise AssertionError(f"no {name} for {group}/{monitoring_class}")


def test_publish_quota_is_shared_by_the_topics_of_the_groups_namespaces(
        broker: Any, client: Any) -> None:
    # four messages a second for the whole group: two topics in two namespaces share them
    assert _call(broker, "PUT", GROUPS + "/g", {"publishRateInMsgs": 4})[0] == 204
    for ns in (NS_A, NS_B):
        assert _call(broker, "PUT", ns, {})[0] == 204
        assert _call(broker, "POST", ns + "/resourcegroup/g")[0] == 204
    producers = [client.create_producer(f"persistent://public/{ns}/t", batching_enabled=False)
                 for ns in ("rga", "rgb")]
    started = time.monotonic()
    for i in range(5):
        for producer in producers:   # every send is stored and answered, none refused
            producer.send(f"m{i}".encode())
    elapsed = time.monotonic() - started
    # ten sends at four a second over the group: the last two wait for the third window
    assert elapsed >= 1.5, elapsed
    assert _metric(broker, "pulsar_resource_group_messages_used_total", "g", "Publish") == 10
    # leaving the group lifts the quota at once
    for ns in (NS_A, NS_B):
        assert _call(broker, "DELETE", ns + "/resourcegroup")[0] == 204
    started = time.monotonic()
    for i in range(12):
        producers[0].send(f"n{i}".encode())
    assert time.monotonic() - started < 2.5
    for producer in producers:
        producer.close()


def test_dispatch_quota_delays_dispatch_across_the_groups_topics(
        broker: Any, client: Any) -> None:
    assert _call(broker, "PUT", GROUPS + "/g", {"dispatchRateInMsgs": 4})[0] == 204
    for ns in (NS_A, NS_B):
        assert _call(broker, "PUT", ns, {})[0] == 204
        assert _call(broker, "POST", ns + "/resourcegroup/g")[0] == 204
    topics = [f"persistent://public/{ns}/t" for ns in ("rga", "rgb")]
    consumers = [client.subscribe(t, "s", initial_position=_earliest()) for t in topics]
    for topic in topics:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            producer.send(f"m{i}".encode())
        producer.close()
    started = time.monotonic()
    for consumer in consumers:   # eight deliveries at four a second over the group
        assert [consumer.receive(10_000).data() for _ in range(4)] == \
            [f"m{i}".encode() for i in range(4)]
    assert time.monotonic() - started >= 0.5
    assert _metric(broker, "pulsar_resource_group_messages_used_total", "g", "Dispatch") == 8
    for consumer in consumers:
        consumer.close()
