"""Deduplication as a namespace/topic policy: REST paths, precedence, and its effect on the wire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry
from rest import http_json as _http

from protocol import commands as C
from protocol import pulsar_pb as pb


class Reply:
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body

    @property
    def reason(self) -> Any:
        return self.body.get("reason") if isinstance(self.body, dict) else None


Api = Callable[..., Reply]


@pytest.fixture
def api(broker: Any) -> Api:
    def call(method: str, path: str, *, raw: bytes | None = None) -> Reply:
        return Reply(*_http(broker.web_url, method, path, raw))
    return call

NS = "/admin/v2/namespaces/public/default"
P = "/admin/v2/persistent/public/default"
T = pb.BaseCommand


def test_namespace_deduplication_set_get_remove(api: Api) -> None:
    assert api("GET", f"{NS}/deduplication").body is None
    assert api("POST", f"{NS}/deduplication", raw=b"false").status == 204
    assert api("GET", f"{NS}/deduplication").body is False
    assert api("GET", NS).body["deduplicationEnabled"] is False
    assert api("DELETE", f"{NS}/deduplication").status == 204
    assert api("GET", f"{NS}/deduplication").body is None


def test_deduplication_policy_rejects_non_booleans_and_unknown_namespaces(api: Api) -> None:
    bad = api("POST", f"{NS}/deduplication", raw=b'"yes"')
    assert bad.status == 400
    missing = api("POST", "/admin/v2/namespaces/public/nope/deduplication", raw=b"true")
    assert missing.status == 404
    assert missing.reason == "Namespace does not exist"


def test_topic_deduplication_overrides_the_namespace(api: Api, broker: Any) -> None:
    assert api("PUT", f"{P}/dd-topic").status == 204
    assert api("POST", f"{NS}/deduplication", raw=b"false").status == 204
    assert api("POST", f"{P}/dd-topic/deduplicationEnabled", raw=b"true").status == 204
    assert api("GET", f"{P}/dd-topic/deduplicationEnabled").body is True
    with RawClient(broker.service_url) as c:
        c.handshake()
        topic = "persistent://public/default/dd-topic"
        assert c.create_producer(topic, 1, name="p").type == T.PRODUCER_SUCCESS
        first = c.request(C.encode_send(1, 0, make_entry(b"a", producer_name="p")))
        again = c.request(C.encode_send(1, 0, make_entry(b"a", producer_name="p")))
    assert first.send_receipt.message_id == again.send_receipt.message_id
    assert api("DELETE", f"{P}/dd-topic/deduplicationEnabled").status == 204
    assert api("GET", f"{P}/dd-topic/deduplicationEnabled").body is None


def test_disabled_deduplication_stores_resends_and_hides_the_sequence(
        api: Api, broker: Any) -> None:
    assert api("POST", f"{NS}/deduplication", raw=b"false").status == 204
    topic = "persistent://public/default/dd-off"
    with RawClient(broker.service_url) as c:
        c.handshake()
        assert c.create_producer(topic, 1, name="p").type == T.PRODUCER_SUCCESS
        first = c.request(C.encode_send(1, 0, make_entry(b"a", producer_name="p")))
        again = c.request(C.encode_send(1, 0, make_entry(b"a", producer_name="p")))
        assert first.send_receipt.message_id != again.send_receipt.message_id
        assert c.request(C.encode_close_producer(1, 77)).type == T.SUCCESS
        back = c.create_producer(topic, 2, name="p")
    assert back.producer_success.last_sequence_id == -1
    assert api("GET", f"{P}/dd-off/stats").body["deduplicationStatus"] == "Disabled"


def test_broker_default_off_is_honoured_and_namespace_turns_it_on(
        broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"brokerDeduplicationEnabled": False})
    topic = "persistent://public/default/dd-default"
    with RawClient(broker.service_url) as c:
        c.handshake()
        assert c.create_producer(topic, 1, name="p").type == T.PRODUCER_SUCCESS
        first = c.request(C.encode_send(1, 5, make_entry(b"a", producer_name="p", sequence_id=5)))
        again = c.request(C.encode_send(1, 5, make_entry(b"a", producer_name="p", sequence_id=5)))
        assert first.send_receipt.message_id != again.send_receipt.message_id
        assert _http(broker.web_url, "POST", f"{NS}/deduplication", b"true")[0] == 204
        third = c.request(C.encode_send(1, 5, make_entry(b"a", producer_name="p", sequence_id=5)))
        assert c.request(C.encode_close_producer(1, 78)).type == T.SUCCESS
        back = c.create_producer(topic, 2, name="p")
    assert third.send_receipt.message_id == first.send_receipt.message_id  # not stored again
    assert back.producer_success.last_sequence_id == 5
