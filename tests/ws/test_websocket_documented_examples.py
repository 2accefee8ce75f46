"""Pulsar's documented Python examples ("Pulsar WebSocket API", client examples), run as
written with the library the documentation uses (``websocket-client``), against Horae."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

websocket = pytest.importorskip("websocket", reason="websocket-client is not installed")

TIMEOUT_S = 10


def test_documented_producer_consumer_and_reader(broker: Any) -> None:
    base = broker.web_url.replace("http://", "ws://")
    topic = "/persistent/public/default/my-topic"
    consumer = websocket.create_connection(base + "/ws/v2/consumer" + topic + "/my-sub",
                                           timeout=TIMEOUT_S)

    # the producer example
    ws = websocket.create_connection(base + "/ws/v2/producer" + topic, timeout=TIMEOUT_S)
    s = "Hello World"
    payload_string = base64.b64encode(s.encode("UTF-8")).decode("UTF-8")
    ws.send(json.dumps({"payload": payload_string,
                        "properties": {"key1": "value1", "key2": "value2"},
                        "context": 5}))
    response = json.loads(ws.recv())
    ws.close()
    assert response["result"] == "ok" and response["context"] == "5"

    # the consumer example: receive, then acknowledge successful processing
    msg = json.loads(consumer.recv())
    assert base64.b64decode(msg["payload"]) == b"Hello World"
    assert msg["properties"] == {"key1": "value1", "key2": "value2"}
    assert msg["messageId"] == response["messageId"]
    consumer.send(json.dumps({"messageId": msg["messageId"]}))
    consumer.close()

    # the reader example (from the start of the topic)
    reader = websocket.create_connection(base + "/ws/v2/reader" + topic + "?messageId=earliest",
                                         timeout=TIMEOUT_S)
    msg = json.loads(reader.recv())
    assert base64.b64decode(msg["payload"]) == b"Hello World"
    reader.send(json.dumps({"messageId": msg["messageId"]}))
    reader.close()
