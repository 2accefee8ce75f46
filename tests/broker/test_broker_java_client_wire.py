"""Wire facts the Pulsar Java client depends on, pinned with a raw client.

The Java client (tests/compat/test_java_client.py runs it for real) reads some optional fields
unconditionally and acts on commands the C++ client cannot handle; these tests keep Horae's
answers the way Pulsar's broker gives them.
"""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from broker_rawclient import RawClient

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.framing import encode_command
from tests.rest import http_json

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


@pytest.mark.parametrize(("client_version", "told"), [
    ("Pulsar-Java-v4.0.8", True),
    ("Pulsar-CPP-v4.2.0", False),  # closes its connection on REACHED_END_OF_TOPIC
])
def test_reached_end_of_topic_goes_only_to_clients_that_handle_it(
        broker: Any, client: Any, client_version: str, told: bool) -> None:
    topic = f"persistent://public/default/java-end-of-topic-{told}"
    with RawClient(broker.service_url) as raw:
        raw.send(C.encode_connect(client_version, 20))
        assert raw.recv_command().type == T.CONNECTED
        assert raw.request(C.encode_subscribe(topic, "sub", 0, 1, 1)).type == T.SUCCESS
        producer = client.create_producer(topic)
        producer.send(b"last")
        producer.close()
        raw.send(C.encode_flow(1, 10))
        message = raw.recv_command()
        assert message.type == T.MESSAGE
        status, _ = http_json(broker.web_url, "POST",
                              f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/terminate")
        assert status == 200
        # Terminated, but the message is not acknowledged yet: not the end for this subscription.
        raw.send(C.encode_ping())
        assert raw.recv_command().type == T.PONG
        ids = [(message.message.message_id.ledgerId, message.message.message_id.entryId)]
        raw.send(C.encode_ack(1, ids))
        raw.send(C.encode_ping())  # answered after anything the ack caused
        if told:
            end = raw.recv_command()
            assert end.type == T.REACHED_END_OF_TOPIC and end.reachedEndOfTopic.consumer_id == 1
        assert raw.recv_command().type == T.PONG


def test_an_initial_subscription_needs_the_right_to_consume(broker_factory: Callable[..., Any]) -> None:
    secret = b"s" * 32
    secured = broker_factory(config_overrides={
        "authenticationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "authorizationEnabled": True, "superUserRoles": "admin"})
    request = urllib.request.Request(
        secured.web_url + "/admin/v2/namespaces/public/default/permissions/writer",
        data=b'["produce"]', method="POST",
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + jwt.encode({"sub": "admin"}, secret, "HS256")})
    with urllib.request.urlopen(request, timeout=10) as granted:
        assert granted.status == 204
    topic = "persistent://public/default/java-initial-subscription-authz"
    with RawClient(secured.service_url) as raw:
        connect = pb.BaseCommand(type=T.CONNECT)
        connect.connect.client_version = "Pulsar-Java-v4.0.8"
        connect.connect.protocol_version = 20
        connect.connect.auth_method_name = "token"
        connect.connect.auth_data = jwt.encode({"sub": "writer"}, secret, "HS256").encode()
        raw.send(encode_command(connect))
        assert raw.recv_command().type == T.CONNECTED
        refused = raw.request(_producer(topic, 1, 1, "dlq-sub"))
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
        assert raw.create_producer(topic, 2).type == T.PRODUCER_SUCCESS
