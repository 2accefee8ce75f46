"""Advertised listeners: LOOKUP by listener name, refusal of unknown names, config validation."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pulsar
import pytest
from broker_rawclient import RawClient

from broker.config import BrokerConfig, ConfigError
from broker.listeners import parse_listeners
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand


def _lookup(raw: RawClient, topic: str, listener: str | None) -> Any:
    cmd = T(type=T.LOOKUP)
    cmd.lookupTopic.topic = topic
    cmd.lookupTopic.request_id = 3
    if listener is not None:
        cmd.lookupTopic.advertised_listener_name = listener
    return raw.request(C.encode_command(cmd)).lookupTopicResponse


def test_unknown_listener_name_is_refused(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        answer = _lookup(raw, "persistent://public/default/l", "test")
    assert answer.response == pb.CommandLookupTopicResponse.Failed
    assert answer.error == ServerError.ServiceNotReady
    assert answer.message == "the broker do not have test listener"


def test_named_listeners_answer_their_urls(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={
        "advertisedListeners": "internal:pulsar://127.0.0.1:6000,external:pulsar://example.test:7000",
        "internalListenerName": "internal"})
    with RawClient(b.service_url) as raw:
        raw.handshake()
        external = _lookup(raw, "persistent://public/default/l", "external")
        default = _lookup(raw, "persistent://public/default/l", None)
    assert external.brokerServiceUrl == "pulsar://example.test:7000"
    assert default.brokerServiceUrl == "pulsar://127.0.0.1:6000"


def _http_lookup(web_url: str, listener: str | None) -> dict[str, Any]:
    url = f"{web_url}/lookup/v2/topic/persistent/public/default/l"
    headers = {"X-Pulsar-ListenerName": listener} if listener else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body


def test_http_lookup_answers_the_listener_urls_a_binary_lookup_does(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={
        "advertisedListeners": "internal:pulsar://127.0.0.1:6000,external:pulsar://example.test:7000",
        "internalListenerName": "internal"})
    external = _http_lookup(b.web_url, "external")
    default = _http_lookup(b.web_url, None)
    assert external["brokerUrl"] == "pulsar://example.test:7000"
    assert default["brokerUrl"] == default["nativeUrl"] == "pulsar://127.0.0.1:6000"
    assert default["httpUrl"] == b.web_url


def test_official_client_with_an_unknown_listener_cannot_produce(broker: Any) -> None:
    client = pulsar.Client(broker.service_url, listener_name="test",
                           operation_timeout_seconds=3,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/l-client")
    finally:
        client.close()


def test_listener_config_is_validated() -> None:
    assert parse_listeners("a:pulsar://h:1,a:pulsar+ssl://h:2,b:pulsar://g:3") == {
        "a": "pulsar://h:1", "b": "pulsar://g:3"}
    with pytest.raises(ConfigError) as bad:
        BrokerConfig(advertised_listeners="nocolon")
    assert "advertisedListeners" in str(bad.value)
    with pytest.raises(ConfigError) as unknown:
        BrokerConfig(advertised_listeners="a:pulsar://h:1", internal_listener_name="z")
    assert "internalListenerName" in str(unknown.value)
