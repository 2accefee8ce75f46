"""Wire facts the Pulsar Java client depends on, pinned with a raw client.

The Java client (tests/compat/test_java_client.py runs it for real) reads some optional fields
unconditionally and acts on commands the C++ client cannot handle; these tests keep Horae's
answers the way Pulsar's broker gives them.
"""

from __future__ import annotations

from typing import Any

from broker_rawclient import RawClient

from protocol import pulsar_pb as pb
from protocol.framing import encode_command

T = pb.BaseCommand


def test_a_schemaless_producer_gets_an_empty_schema_version(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        answer = raw.create_producer("persistent://public/default/java-schemaless")
    assert answer.type == T.PRODUCER_SUCCESS
    assert answer.producer_success.HasField("schema_version")
    assert answer.producer_success.schema_version == b""



def _producer(topic: str, producer_id: int, request_id: int, initial_subscription: str) -> bytes:
    cmd = pb.BaseCommand(type=T.PRODUCER)
    cmd.producer.topic = topic
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    cmd.producer.initial_subscription_name = initial_subscription
    return encode_command(cmd)


def test_a_producers_initial_subscription_is_created_at_the_earliest_position(
        broker: Any, client: Any) -> None:
    # What the Java client's dead-letter producer asks for (DeadLetterPolicy.initialSubscriptionName).
    topic = "persistent://public/default/java-initial-subscription"
    before = client.create_producer(topic)
    before.send(b"published before the subscription existed")
    before.close()
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        for producer_id in (1, 2):  # the second finds it there
            answer = raw.request(_producer(topic, producer_id, producer_id, "dlq-sub"))
            assert answer.type == T.PRODUCER_SUCCESS, answer
    # Subscribing later at the default (latest) position still finds the earlier message.
    consumer = client.subscribe(topic, "dlq-sub")
    try:
        assert consumer.receive(10_000).data() == b"published before the subscription existed"
    finally:
        consumer.close()


def test_an_initial_subscription_with_a_reserved_name_refuses_the_producer(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        answer = raw.request(_producer("persistent://public/default/java-reserved-initial", 1, 3,
                                       "pulsar.dedup"))
    assert answer.type == T.ERROR
    assert answer.error.error == pb.NotAllowedError
    assert answer.error.message.startswith("Failed to create the initial subscription: ")
