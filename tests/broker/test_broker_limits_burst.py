"""Producer and consumer limits hold under a burst of concurrent requests.

A burst of PRODUCER or SUBSCRIBE commands on a topic that is not loaded yet (first use, or
after an admin unload), on one connection or several, all wait for the same topic load; the
limit must still admit exactly as many as it allows (ProducerBusy / ConsumerBusy for the rest,
the connections stay open).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from broker_rawclient import RawClient
from rest import http_json
from waiting import wait_until

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
LIMIT = 2
BURST = 50
SHARED = pb.CommandSubscribe.Shared


def _answers(raw: RawClient, count: int) -> list[pb.BaseCommand]:
    return [raw.recv_command(timeout=30) for _ in range(count)]


def _outcomes(answers: list[pb.BaseCommand]) -> Counter[str]:
    out: Counter[str] = Counter()
    for a in answers:
        if a.type == T.ERROR:
            out[f"{ServerError(a.error.error).name}: {a.error.message}"] += 1
        else:
            out[T.Type.Name(a.type)] += 1
    return out


def _producer(topic: str, producer_id: int, request_id: int, *, schema: bool) -> bytes:
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic = topic
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    if schema:
        cmd.producer.schema.name = "s"
        cmd.producer.schema.schema_data = b""
        cmd.producer.schema.type = pb.Schema.String
    return C.encode_command(cmd)


def _producer_burst(service_url: str, topic: str, connections: int, *,
                    schema: bool = False) -> Counter[str]:
    clients = [RawClient(service_url, timeout=30) for _ in range(connections)]
    try:
        for raw in clients:
            raw.handshake()
        per = BURST // connections
        for n, raw in enumerate(clients):
            raw.send(b"".join(_producer(topic, n * per + i, 100 + i, schema=schema)
                              for i in range(per)))
        answers = [a for raw in clients for a in _answers(raw, per)]
        for raw in clients:
            assert raw.request(C.encode_ping()).type == T.PONG  # every connection stays
        return _outcomes(answers)
    finally:
        for raw in clients:
            raw.close()


def _unload(broker: Any, topic: str) -> None:
    path = "/admin/v2/" + topic.replace("://", "/") + "/unload"
    status, _ = http_json(broker.web_url, "PUT", path)
    assert status == 204


@pytest.mark.parametrize("connections", [1, 5])
@pytest.mark.parametrize("schema", [False, True])
@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_producer_burst_on_an_unloaded_topic_admits_exactly_the_limit(
        broker_factory: Callable[..., Any], connections: int, schema: bool, domain: str) -> None:
    broker = broker_factory(config_overrides={"maxProducersPerTopic": LIMIT})
    topic = f"{domain}://public/default/producer-burst-{connections}-{schema}"
    assert _producer_burst(broker.service_url, topic, connections, schema=schema) == Counter({
        "PRODUCER_SUCCESS": LIMIT,
        "ProducerBusy: Topic reached max producers limit": BURST - LIMIT})


@pytest.mark.parametrize("schema", [False, True])
def test_producer_burst_after_an_admin_unload_admits_exactly_the_limit(
        broker_factory: Callable[..., Any], schema: bool) -> None:
    broker = broker_factory(config_overrides={"maxProducersPerTopic": LIMIT})
    topic = "persistent://public/default/producer-burst-unloaded"
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(topic).type == T.PRODUCER_SUCCESS
    _unload(broker, topic)
    assert _producer_burst(broker.service_url, topic, 5, schema=schema) == Counter({
        "PRODUCER_SUCCESS": LIMIT,
        "ProducerBusy: Topic reached max producers limit": BURST - LIMIT})


def _subscribe_burst(service_url: str, topic: str, subscription: Callable[[int], str],
                     connections: int) -> Counter[str]:
    clients = [RawClient(service_url, timeout=30) for _ in range(connections)]
    try:
        for raw in clients:
            raw.handshake()
        per = BURST // connections
        for n, raw in enumerate(clients):
            raw.send(b"".join(C.encode_subscribe(topic, subscription(n * per + i), SHARED,
                                                 n * per + i, 100 + i) for i in range(per)))
        answers = [a for raw in clients for a in _answers(raw, per)]
        for raw in clients:
            assert raw.request(C.encode_ping()).type == T.PONG
        return _outcomes(answers)
    finally:
        for raw in clients:
            raw.close()


@pytest.mark.parametrize("unloaded_first", [False, True])
def test_subscribe_burst_admits_exactly_the_subscription_limit(
        broker_factory: Callable[..., Any], unloaded_first: bool) -> None:
    broker = broker_factory(config_overrides={"maxConsumersPerSubscription": LIMIT})
    topic = f"persistent://public/default/sub-burst-{unloaded_first}"
    if unloaded_first:
        with RawClient(broker.service_url) as raw:
            raw.handshake()
            assert raw.request(C.encode_subscribe(topic, "s", SHARED, 1, 1)).type == T.SUCCESS
        _unload(broker, topic)
    assert _subscribe_burst(broker.service_url, topic, lambda i: "s", 5) == Counter({
        "SUCCESS": LIMIT,
        "ConsumerBusy: Subscription reached max consumers limit": BURST - LIMIT})


@pytest.mark.parametrize("unloaded_first", [False, True])
def test_subscribe_burst_admits_exactly_the_topic_limit(
        broker_factory: Callable[..., Any], unloaded_first: bool) -> None:
    broker = broker_factory(config_overrides={"maxConsumersPerTopic": LIMIT})
    topic = f"persistent://public/default/topic-consumer-burst-{unloaded_first}"
    if unloaded_first:
        with RawClient(broker.service_url) as raw:
            raw.handshake()
            assert raw.request(C.encode_subscribe(topic, "s", SHARED, 1, 1)).type == T.SUCCESS
        _unload(broker, topic)
    assert _subscribe_burst(broker.service_url, topic, lambda i: f"s{i % 7}", 5) == Counter({
        "SUCCESS": LIMIT,
        "ConsumerBusy: Topic reached max consumers limit": BURST - LIMIT})



def _subscribes_in_flight(broker: Any) -> int:
    return sum(len(side._subscribing) for conn in broker.server.connections
               if (side := conn.existing_consumer_side) is not None)


def test_subscribe_burst_waiting_on_a_cursor_revision_admits_exactly_the_limit(
        broker_factory: Callable[..., Any]) -> None:
    # Every subscribe of the burst waits for a running cursor revision (an admin reset, say)
    # before it attaches; the limit must be decided when it attaches, not before it waits.
    broker = broker_factory(config_overrides={"maxConsumersPerSubscription": LIMIT})
    topic = "persistent://public/default/sub-burst-revision"
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.request(C.encode_subscribe(topic, "s", SHARED, 1, 1)).type == T.SUCCESS
        assert raw.request(C.encode_close_consumer(1, 2)).type == T.SUCCESS
    sub = broker.call(lambda: broker.service.topics[topic].subscriptions["s"])
    revision = broker.call(sub.revisions.start)
    clients = [RawClient(broker.service_url, timeout=30) for _ in range(5)]
    try:
        for raw in clients:
            raw.handshake()
        per = BURST // len(clients)
        for n, raw in enumerate(clients):
            raw.send(b"".join(C.encode_subscribe(topic, "s", SHARED, 10 + n * per + i, 100 + i)
                              for i in range(per)))
        wait_until(lambda: broker.call(_subscribes_in_flight, broker) == BURST, timeout_s=30)
        broker.call(sub.revisions.end, revision)
        answers = [a for raw in clients for a in _answers(raw, per)]
    finally:
        for raw in clients:
            raw.close()
    assert _outcomes(answers) == Counter({
        "SUCCESS": LIMIT, "ConsumerBusy: Subscription reached max consumers limit": BURST - LIMIT})
