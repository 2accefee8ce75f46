"""Replace by key (``delayedDeliveryReplaceByKey``) with the official Python client: a keyed
delayed message replaces the pending one with its key, a tombstone (the key, an empty payload)
cancels it, on every Shared and Key_Shared subscription; ordinary messages are unaffected and,
with the policy off, everything is delivered as before. Plus the REST policy at both levels
and ``horae-admin``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from conftest import make_client
from rest import http_json
from waiting import wait_until

NS = "/admin/v2/namespaces/public/default"
TP = "/admin/v2/persistent/public/default"
T = "persistent://public/default"
CONFIG = {"delayedDeliveryTickTimeMillis": 10, "isDelayedDeliveryDeliverAtTimeStrict": True}


@pytest.fixture
def env(broker_factory: Any) -> Iterator[tuple[Any, Any]]:
    broker = broker_factory(config_overrides=CONFIG)
    client = make_client(broker.service_url)
    yield broker, client
    client.close()


def _set_policy(web: str, path: str, on: bool) -> None:
    status, body = http_json(web, "POST", f"{path}/delayedDeliveryReplaceByKey",
                             b"true" if on else b"false")
    assert status == 204, body


def _receive(consumer: Any, until_s: float,
             expect: frozenset[bytes] = frozenset()) -> list[tuple[bytes, float]]:
    """Every message received (and acknowledged) before ``until_s`` (monotonic), with when;
    once every ``expect``ed payload came, 1 s more for strays."""
    got: list[tuple[bytes, float]] = []
    while (left := until_s - time.monotonic()) > 0:
        done = bool(expect) and expect <= {data for data, _ in got}
        try:
            msg = consumer.receive(1000 if done else max(1, int(left * 1000)))
        except pulsar.Timeout:
            break
        got.append((msg.data(), time.monotonic()))
        consumer.acknowledge(msg)
    return got


def _backlog(web: str, topic: str, sub: str) -> int:
    status, doc = http_json(web, "GET", f"{TP}/{topic}/stats")
    assert status == 200, doc
    return int(doc["subscriptions"][sub]["msgBacklog"])


def test_reschedule_moves_delivery_on_shared_and_key_shared(env: tuple[Any, Any]) -> None:
    broker, client = env
    _set_policy(broker.web_url, NS, True)
    topic = "rbk-move"
    shared = client.subscribe(f"{T}/{topic}", "s", consumer_type=pulsar.ConsumerType.Shared)
    keyed = client.subscribe(f"{T}/{topic}", "k", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    start = time.monotonic()
    producer.send(b"later-v1", partition_key="later", deliver_after=pulsar.timedelta(seconds=1))
    producer.send(b"earlier-v1", partition_key="earlier",
                  deliver_after=pulsar.timedelta(seconds=3))
    producer.send(b"later-v2", partition_key="later", deliver_after=pulsar.timedelta(seconds=2))
    producer.send(b"earlier-v2", partition_key="earlier",
                  deliver_after=pulsar.timedelta(milliseconds=500))
    producer.send(b"plain", partition_key="later")       # ordinary: delivered at once
    for consumer in (shared, keyed):
        got = _receive(consumer, start + 30,
                       frozenset((b"earlier-v2", b"later-v2", b"plain")))
        payloads = [data for data, _ in got]
        assert sorted(payloads) == [b"earlier-v2", b"later-v2", b"plain"], payloads
        when = {data: at - start for data, at in got}
        assert when[b"earlier-v2"] >= 0.5
        assert when[b"later-v2"] >= 2.0
    for sub in ("s", "k"):
        wait_until(lambda sub=sub: _backlog(broker.web_url, topic, sub) == 0, timeout_s=10,
                   message=f"replaced messages acknowledged on {sub}")


@pytest.mark.parametrize("batching", [False, True])
def test_tombstone_cancels_and_is_not_delivered(env: tuple[Any, Any], batching: bool) -> None:
    broker, client = env
    topic = f"rbk-tomb-{batching}"
    _set_policy(broker.web_url, NS, False)
    status, _ = http_json(broker.web_url, "PUT", f"{TP}/{topic}")
    assert status in (204, 409)
    _set_policy(broker.web_url, f"{TP}/{topic}", True)       # the topic level beats the namespace
    consumer = client.subscribe(f"{T}/{topic}", "s", consumer_type=pulsar.ConsumerType.Shared)
    delayed = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    cancels = client.create_producer(f"{T}/{topic}", batching_enabled=batching)
    start = time.monotonic()
    delayed.send(b"job-a", partition_key="a", deliver_after=pulsar.timedelta(seconds=1))
    delayed.send(b"job-b", partition_key="b", deliver_after=pulsar.timedelta(seconds=1))
    cancels.send(b"", partition_key="a")
    got = _receive(consumer, start + 30, frozenset((b"job-b",)))
    assert [data for data, _ in got] == [b"job-b"]
    wait_until(lambda: _backlog(broker.web_url, topic, "s") == 0, timeout_s=10,
               message="cancelled message and tombstone acknowledged")


def test_policy_off_delivers_everything_as_before(env: tuple[Any, Any]) -> None:
    broker, client = env
    topic = "rbk-off"
    _set_policy(broker.web_url, NS, False)
    consumer = client.subscribe(f"{T}/{topic}", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    start = time.monotonic()
    producer.send(b"v1", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=500))
    producer.send(b"v2", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=800))
    producer.send(b"", partition_key="k")
    got = _receive(consumer, start + 30, frozenset((b"", b"v1", b"v2")))
    assert sorted(data for data, _ in got) == [b"", b"v1", b"v2"]


def test_policy_switched_off_at_run_time_stops_replacing(env: tuple[Any, Any]) -> None:
    broker, client = env
    topic = "rbk-switch"
    _set_policy(broker.web_url, NS, True)
    consumer = client.subscribe(f"{T}/{topic}", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    start = time.monotonic()
    producer.send(b"v1", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=300))
    producer.send(b"v2", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=600))
    assert [d for d, _ in _receive(consumer, start + 30, frozenset((b"v2",)))] == [b"v2"]
    status, body = http_json(broker.web_url, "DELETE", f"{NS}/delayedDeliveryReplaceByKey")
    assert status == 204, body
    start = time.monotonic()
    producer.send(b"w1", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=300))
    producer.send(b"w2", partition_key="k", deliver_after=pulsar.timedelta(milliseconds=600))
    assert sorted(d for d, _ in _receive(consumer, start + 30, frozenset((b"w1", b"w2"))))\
        == [b"w1", b"w2"]


def test_replace_by_key_policy_rest_at_both_levels(env: tuple[Any, Any]) -> None:
    broker, _ = env
    web = broker.web_url
    path = f"{NS}/delayedDeliveryReplaceByKey"
    assert http_json(web, "DELETE", path)[0] == 204
    assert http_json(web, "GET", path) == (200, None)
    assert http_json(web, "POST", path, b"true")[0] == 204
    assert http_json(web, "GET", path) == (200, True)
    assert http_json(web, "GET", NS)[1]["delayed_delivery_replace_by_key"] is True
    status, body = http_json(web, "POST", path, b'"yes"')
    assert status == 400 and "true or false" in body["reason"]
    assert http_json(web, "DELETE", path)[0] == 204
    assert http_json(web, "GET", path) == (200, None)

    assert http_json(web, "PUT", f"{TP}/rbk-rest")[0] == 204
    tpath = f"{TP}/rbk-rest/delayedDeliveryReplaceByKey"
    assert http_json(web, "GET", tpath) == (200, None)
    assert http_json(web, "POST", tpath, b"false")[0] == 204
    assert http_json(web, "GET", tpath) == (200, False)
    assert http_json(web, "DELETE", tpath)[0] == 204
    assert http_json(web, "GET", tpath) == (200, None)
    status, body = http_json(web, "GET", f"{TP}/rbk-missing/delayedDeliveryReplaceByKey")
    assert status == 404, body
    status, body = http_json(web, "GET", "/admin/v2/namespaces/public/nope/"
                                         "delayedDeliveryReplaceByKey")
    assert status == 404, body
