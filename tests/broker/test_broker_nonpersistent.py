"""Non-persistent topics with the official client: in memory, at-most-once, dropped when no
consumer can take a message (broker/topics/nonpersistent.py)."""

from __future__ import annotations

import datetime
import json
import pathlib
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from conftest import make_client
from waiting import wait_until

TOPIC = "non-persistent://public/default/np-x"
RECEIVE_MS = 5000


def _get(broker: Any, path: str) -> Any:
    with urllib.request.urlopen(broker.web_url + path, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def test_nonpersistent_produce_consume_with_zero_ids(client: Any) -> None:
    consumer = client.subscribe(TOPIC, "sub")
    producer = client.create_producer(TOPIC)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    got = [consumer.receive(RECEIVE_MS) for _ in range(5)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(0, 0)}
    assert {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got} == {(0, 0)}
    for m in got:
        consumer.acknowledge(m)


def test_nonpersistent_message_without_subscription_is_dropped(broker: Any, client: Any) -> None:
    producer = client.create_producer(TOPIC)
    producer.send(b"nobody-listens")
    consumer = client.subscribe(TOPIC, "late")
    producer.send(b"after")
    assert consumer.receive(RECEIVE_MS).data() == b"after"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    stats = _get(broker, "/admin/v2/non-persistent/public/default/np-x/stats")
    assert stats["msgInCounter"] == 2
    assert stats["subscriptions"]["late"]["msgOutCounter"] == 1
    assert "msgDropRate" in stats and "msgDropRate" in stats["subscriptions"]["late"]


def test_nonpersistent_consumer_without_permits_drops(broker: Any, client: Any) -> None:
    consumer = client.subscribe(TOPIC, "slow", receiver_queue_size=1)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(50):
        producer.send(f"m{i}".encode())
    first = consumer.receive(RECEIVE_MS)
    assert first.data() == b"m0"
    topic = broker.service.nonpersistent.topics[TOPIC]
    sub = topic.subscriptions["slow"]
    assert sub.msg_drop_counter > 0
    assert sub.msg_out_counter + sub.msg_drop_counter == 50


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared,
                                      pulsar.ConsumerType.Failover])
def test_nonpersistent_dispatches_to_every_subscription_type(client: Any, sub_type: Any) -> None:
    c1 = client.subscribe(TOPIC, "multi", consumer_type=sub_type, consumer_name="a")
    c2 = client.subscribe(TOPIC, "multi", consumer_type=sub_type, consumer_name="b")
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode(), partition_key=f"k{i % 5}")
    got: list[bytes] = []
    for c in (c1, c2):
        while True:
            try:
                got.append(c.receive(500).data())
            except pulsar.Timeout:
                break
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))


def test_nonpersistent_topic_is_not_persisted(broker_factory: Any, tmp_path: pathlib.Path) -> None:
    b1 = broker_factory()
    c = make_client(b1.service_url)
    consumer = c.subscribe(TOPIC, "sub")
    c.create_producer(TOPIC).send(b"gone")
    assert consumer.receive(RECEIVE_MS).data() == b"gone"
    listed = _get(b1, "/admin/v2/non-persistent/public/default")
    assert TOPIC in listed
    c.close()
    assert TOPIC not in set(b1.service.store.ledger_names())
    b1.stop()
    b2 = broker_factory(data_dir=b1.data_dir)
    assert _get(b2, "/admin/v2/non-persistent/public/default") == []
    assert TOPIC not in _get(b2, "/admin/v2/namespaces/public/default/topics")


def test_nonpersistent_delayed_message_is_delivered_at_once(client: Any) -> None:
    consumer = client.subscribe(TOPIC, "delayed", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    producer.send(b"later", deliver_after=datetime.timedelta(hours=1))
    assert consumer.receive(RECEIVE_MS).data() == b"later"


def test_nonpersistent_listed_in_namespace_topics_by_mode(broker: Any, client: Any) -> None:
    client.create_producer(TOPIC)
    client.create_producer("persistent://public/default/p-y")
    wait_until(lambda: TOPIC in broker.service.nonpersistent.topics, timeout_s=5)
    all_topics = _get(broker, "/admin/v2/namespaces/public/default/topics?mode=ALL")
    assert TOPIC in all_topics and "persistent://public/default/p-y" in all_topics
    persistent = _get(broker, "/admin/v2/namespaces/public/default/topics")
    assert TOPIC not in persistent


def _call(broker: Any, method: str, path: str, body: bytes | None = None) -> int:
    req = urllib.request.Request(broker.web_url + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


def test_nonpersistent_admin_partitioned_create_list_delete(broker: Any, client: Any) -> None:
    base = "/admin/v2/non-persistent/public/default"
    assert _call(broker, "PUT", base + "/parted/partitions", b"3") == 204
    assert _get(broker, base + "/partitioned") == ["non-persistent://public/default/parted"]
    assert _get(broker, base + "/parted/partitions") == {"partitions": 3, "deleted": False}
    producer = client.create_producer("non-persistent://public/default/parted")
    producer.send(b"x")
    producer.close()
    stats = _get(broker, base + "/parted/partitioned-stats")
    assert stats["msgInCounter"] == 1 and stats["metadata"] == {"partitions": 3, "deleted": False}
    assert _call(broker, "DELETE", base + "/parted/partitions?force=true") == 204
    assert _get(broker, base + "/partitioned") == []
    assert _get(broker, base) == []


def test_nonpersistent_unload_closes_the_topic_and_clients_reconnect(broker: Any,
                                                                     client: Any) -> None:
    topic = "non-persistent://public/default/np-unload"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    assert _call(broker, "PUT", "/admin/v2/non-persistent/public/default/np-unload/unload") == 204
    # the client re-creates its producer and consumer on the fresh in-memory topic
    def consumer_back() -> bool:
        try:
            stats = _get(broker, "/admin/v2/non-persistent/public/default/np-unload/stats")
        except urllib.error.HTTPError:  # 404 until a client re-creates the topic
            return False
        return bool(stats["subscriptions"].get("s", {}).get("consumers"))

    wait_until(consumer_back)
    producer.send(b"after unload")
    assert consumer.receive(timeout_millis=10_000).data() == b"after unload"


EXPIRE_REFUSED = (405, "Expire messages on a non-persistent topic is not allowed")


@pytest.mark.parametrize(("path", "answer"), [
    ("/admin/v2/non-persistent/public/default/np-x/terminate",
     (406, "Need to provide a persistent topic name")),
    ("/admin/v2/non-persistent/public/default/np-x/all_subscription/expireMessages/10",
     EXPIRE_REFUSED),
    ("/admin/v2/non-persistent/public/default/np-x/subscription/s/expireMessages/10",
     EXPIRE_REFUSED),
])
def test_nonpersistent_termination_and_expiry_are_refused(broker: Any, path: str,
                                                          answer: tuple[int, str]) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        _call(broker, "POST", path)
    assert (refused.value.code, json.loads(refused.value.read())["reason"]) == answer
