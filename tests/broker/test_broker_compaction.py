"""Topic compaction: admin trigger/status, the read_compacted view, tombstones, restart, threshold."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from conftest import make_client
from rest import http_json as _http

P = "/admin/v2/persistent/public/default"



def _compact(broker: Any, local: str) -> dict[str, str]:
    assert _http(broker.web_url, "PUT", f"{P}/{local}/compaction", b"")[0] == 204
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, doc = _http(broker.web_url, "GET", f"{P}/{local}/compaction")
        assert status == 200
        if doc["status"] != "RUNNING":
            return dict(doc)
        time.sleep(0.05)
    raise AssertionError("compaction did not finish")


def _drain(consumer: Any) -> list[Any]:
    out = []
    while True:
        try:
            msg = consumer.receive(500)
        except pulsar.Timeout:
            return out
        out.append(msg)
        consumer.acknowledge(msg)


def _produce(client: Any, topic: str, items: list[tuple[str | None, bytes | None]]) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for key, value in items:
        if key is None:
            producer.send(value)
        else:
            producer.send(value, partition_key=key)
    producer.close()


def test_status_is_not_run_before_the_first_compaction(broker: Any, client: Any) -> None:
    client.create_producer("persistent://public/default/cmp-none").close()
    assert _http(broker.web_url, "GET", f"{P}/cmp-none/compaction") == \
        (200, {"status": "NOT_RUN", "lastError": ""})
    assert _http(broker.web_url, "PUT", f"{P}/cmp-missing/compaction", b"")[0] == 404


def test_read_compacted_sees_latest_values_and_tombstones_remove_keys(
        broker: Any, client: Any) -> None:
    topic = "persistent://public/default/cmp-view"
    _produce(client, topic, [("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"),
                             ("c", None), (None, b"keyless"), ("b", b"b2")])
    assert _compact(broker, "cmp-view") == {"status": "SUCCESS", "lastError": ""}
    _produce(client, topic, [("a", b"a3")])  # after the horizon: delivered as written
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    compacted = []
    while reader.has_message_available():
        compacted.append(reader.read_next(5000).data())
    assert compacted == [b"a2", b"b2", b"a3"]
    consumer = client.subscribe(topic, "c", is_read_compacted=True,
                                initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in _drain(consumer)] == [b"a2", b"b2", b"a3"]
    full = client.create_reader(topic, pulsar.MessageId.earliest)
    everything = []
    while full.has_message_available():
        everything.append(full.read_next(5000).data())
    assert len(everything) == 8


def test_read_compacted_needs_an_exclusive_or_failover_subscription(client: Any) -> None:
    with pytest.raises(pulsar.PulsarException):
        client.subscribe("persistent://public/default/cmp-shared", "s",
                         consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)


def test_compacted_view_survives_a_restart(broker_factory: Any) -> None:
    first = broker_factory()
    topic = "persistent://public/default/cmp-restart"
    c = make_client(first.service_url)
    try:
        _produce(c, topic, [("k", b"old"), ("k", b"new")])
    finally:
        c.close()
    assert _compact(first, "cmp-restart")["status"] == "SUCCESS"
    first.stop()
    second = broker_factory(data_dir=first.data_dir)
    c = make_client(second.service_url)
    try:
        consumer = c.subscribe(topic, "s", is_read_compacted=True,
                               initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in _drain(consumer)] == [b"new"]
    finally:
        c.close()


def test_compaction_threshold_policy_compacts_automatically(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/cmp-auto"
    client.create_producer(topic).close()
    assert _http(broker.web_url, "POST", f"{P}/cmp-auto/compactionThreshold", b"100")[0] == 204
    assert _http(broker.web_url, "GET", f"{P}/cmp-auto/compactionThreshold")[1] == 100
    _produce(client, topic, [("k", b"x" * 100), ("k", b"y" * 100)])
    deadline = time.monotonic() + 10
    doc: Any = None
    while time.monotonic() < deadline:
        doc = _http(broker.web_url, "GET", f"{P}/cmp-auto/compaction")[1]
        if doc["status"] == "SUCCESS":
            break
        time.sleep(0.1)
    assert doc == {"status": "SUCCESS", "lastError": ""}
    bad = _http(broker.web_url, "POST", f"{P}/cmp-auto/compactionThreshold", b"-1")
    assert bad[0] == 412
