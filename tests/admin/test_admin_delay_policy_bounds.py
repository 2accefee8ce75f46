"""Delayed-delivery policies at the REST layer: max/fixed delay bounded (412 with the reason),
``?applied=true`` on a partition reports what the broker enforces (its partitioned topic's
policy), and the fixed delay (PIP-437) as the official client sees it."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Api

P = "/admin/v2/persistent/public/default"
NS = "/admin/v2/namespaces/public/default/delayedDelivery"
T = "persistent://public/default"
CENTURY_MS = 100 * 365 * 86_400_000


@pytest.fixture
def broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides={"delayedDeliveryTickTimeMillis": 10})


@pytest.mark.parametrize("key", ["fixedDeliveryDelayInMillis", "maxDeliveryDelayInMillis"])
@pytest.mark.parametrize("value", [2**63, 2**63 - 1, CENTURY_MS + 1, -1])
def test_out_of_range_delays_are_412_with_the_reason(api: Api, key: str, value: int) -> None:
    assert api("PUT", f"{P}/b1").status == 204
    for path in (f"{P}/b1/delayedDelivery", NS):
        reply = api("POST", path, {key: value})
        assert reply.status == 412, (path, reply)
        assert str(reply.reason).startswith(key), reply
    assert api("GET", f"{P}/b1/delayedDelivery").body is None
    assert api("GET", NS).body is None


def test_the_largest_accepted_delay_is_a_century(api: Api) -> None:
    assert api("PUT", f"{P}/b2").status == 204
    reply = api("POST", f"{P}/b2/delayedDelivery", {"maxDeliveryDelayInMillis": CENTURY_MS})
    assert reply.status == 204
    assert api("GET", f"{P}/b2/delayedDelivery").body == {"maxDeliveryDelayInMillis": CENTURY_MS}


def test_applied_policy_of_a_partition_is_its_partitioned_topics(api: Api) -> None:
    assert api("PUT", f"{P}/b3/partitions", 2).status == 204
    assert api("POST", f"{P}/b3/delayedDelivery",
               {"active": True, "fixedDeliveryDelayInMillis": 5000}).status == 204
    applied = api("GET", f"{P}/b3-partition-1/delayedDelivery?applied=true")
    assert applied.status == 200
    assert applied.body["fixedDeliveryDelayInMillis"] == 5000
    assert api("GET", f"{P}/b3-partition-1/delayedDelivery").body is None   # none of its own
    assert api("POST", f"{P}/b3-partition-1/delayedDelivery",
               {"fixedDeliveryDelayInMillis": 700}).status == 204
    own = api("GET", f"{P}/b3-partition-1/delayedDelivery?applied=true")
    assert own.body["fixedDeliveryDelayInMillis"] == 700      # its own wins, as in the broker


def _overridden(web_url: str, topic: str) -> float:
    with urllib.request.urlopen(web_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name.startswith("pulsar_broker_topic_messages_fixed_delay_overridden")
                    and sample.labels.get("topic") == topic
                    and not sample.name.endswith("_created")):
                return float(sample.value)
    return 0.0


def test_fixed_delay_holds_every_message_for_its_delay(api: Api, client: Any, broker: Any) -> None:
    fixed_ms = 1500
    assert api("PUT", f"{P}/fx").status == 204
    assert api("POST", f"{P}/fx/delayedDelivery",
               {"active": True, "fixedDeliveryDelayInMillis": fixed_ms}).status == 204
    consumer = client.subscribe(f"{T}/fx", "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{T}/fx", batching_enabled=False)
    producer.send(b"plain")
    producer.send(b"own-time", deliver_at=int(time.time() * 1000) + 60_000)   # overridden
    got: dict[bytes, int] = {}
    for _ in range(2):
        msg = consumer.receive(10_000)
        got[msg.data()] = int(time.time() * 1000) - msg.publish_timestamp()
        consumer.acknowledge(msg)
    assert set(got) == {b"plain", b"own-time"}
    assert all(held >= fixed_ms - 10 for held in got.values()), got      # one tick early at most
    assert all(held < 30_000 for held in got.values()), got              # not the client's 60 s
    assert _overridden(broker.web_url, f"{T}/fx") == 1
