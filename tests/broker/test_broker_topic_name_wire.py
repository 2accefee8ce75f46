"""Topic names the binary protocol refuses: control characters in the local name, tenants
outside Pulsar's ASCII rule, names over the length limit. Each refusal answers the request
(InvalidTopicName), keeps the connection, stores nothing and caches nothing."""

from __future__ import annotations

from typing import Any

import pulsar
from broker_rawclient import RawClient
from conftest import make_client

from broker.topics.names import MAX_TOPIC_NAME_LENGTH, parse_cache_info
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
NS = "persistent://public/default"
HUGE = 4 << 20  # characters: a name that still fits in one frame


def _refusals(raw: RawClient, topic: str, request_id: int) -> list[tuple[int, str]]:
    """(error code, message) of LOOKUP, PARTITIONED_METADATA, PRODUCER and SUBSCRIBE on
    *topic*, each answered before the next is sent."""
    lookup = raw.request(C.encode_lookup(topic, request_id)).lookupTopicResponse
    assert lookup.response == pb.CommandLookupTopicResponse.Failed
    meta = raw.request(C.encode_partitioned_metadata(topic, request_id + 1))
    producer = raw.request(C.encode_producer(topic, request_id, request_id + 2))
    subscribe = raw.request(C.encode_subscribe(topic, "s", pb.Shared, request_id, request_id + 3))
    assert producer.type == T.ERROR and producer.error.request_id == request_id + 2
    assert subscribe.type == T.ERROR and subscribe.error.request_id == request_id + 3
    return [(lookup.error, lookup.message),
            (meta.partitionMetadataResponse.error, meta.partitionMetadataResponse.message),
            (producer.error.error, producer.error.message),
            (subscribe.error.error, subscribe.error.message)]


def _healthy(broker: Any, topic: str) -> None:
    client = make_client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "ok", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(b"fine")
        assert consumer.receive(5000).data() == b"fine"
    finally:
        client.close()


def _stored_topics(broker: Any) -> set[str]:
    return set(broker.call(lambda: [*broker.service.topics, *broker.service.store.ledger_names()]))


def test_control_characters_in_a_local_name_are_refused_and_nothing_is_stored(
        broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        for i, local in enumerate(["a\x00b", "a\rb", "a\nb", "a\x1b[2Jb", "a\x7fb"]):
            for code, message in _refusals(raw, f"{NS}/{local}", 10 * i + 1):
                assert code == ServerError.InvalidTopicName
                assert "control character" in message
        for tenant in ("evil\n", "\u0440ublic"):
            for code, message in _refusals(raw, f"persistent://{tenant}/default/t", 100):
                assert code == ServerError.InvalidTopicName
                assert "only ASCII letters, digits and -=:._ are allowed" in message
        assert raw.request(C.encode_ping()).type == T.PONG  # still open
        listed = raw.request(C.encode_get_topics_of_namespace(200, "public/default"))
        assert list(listed.getTopicsOfNamespaceResponse.topics) == []
    assert _stored_topics(broker) == set()
    _healthy(broker, f"{NS}/after-control")


def test_huge_topic_names_are_refused_before_parsing_and_never_cached(broker: Any) -> None:
    _healthy(broker, f"{NS}/before-huge")   # its own names are cached now
    cached_before = parse_cache_info().currsize
    with RawClient(broker.service_url, timeout=30) as raw:
        raw.handshake()
        for i in range(40):
            name = f"{NS}/huge-{i}-" + "x" * HUGE
            lookup = raw.request(C.encode_lookup(name, 2 * i + 1)).lookupTopicResponse
            assert lookup.error == ServerError.InvalidTopicName
            assert f"more than the {MAX_TOPIC_NAME_LENGTH} allowed" in lookup.message
            assert len(lookup.message) < 300   # the name is not sent back
            producer = raw.request(C.encode_producer(name, i, 2 * i + 2))
            assert producer.type == T.ERROR
            assert producer.error.error == ServerError.InvalidTopicName
        # Valid names too long to be cached: answered, parsed each time, not kept.
        for i in range(40):
            name = f"{NS}/long-{i}-" + "y" * 3000
            lookup = raw.request(C.encode_lookup(name, 1000 + i)).lookupTopicResponse
            assert lookup.response == pb.CommandLookupTopicResponse.Connect
        assert raw.request(C.encode_ping()).type == T.PONG  # still open
    assert parse_cache_info().currsize == cached_before
    assert _stored_topics(broker) == {f"{NS}/before-huge"}
    _healthy(broker, f"{NS}/before-huge")
