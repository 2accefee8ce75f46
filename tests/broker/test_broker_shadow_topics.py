"""Shadow topics: created with PULSAR.SHADOW_SOURCE, consumed with the official client (the
source's messages and ids, cursors of its own), producers refused, the source's shadowTopics
policy with Pulsar's answers, unload and delete of either side, and a kill -9."""

from __future__ import annotations

import json
from typing import Any

from broker_rawclient import RawClient, make_entry
from conftest import make_client
from rest import http_json

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

NS = "public/default"
SRC = f"persistent://{NS}/src"
SHADOW = f"persistent://{NS}/shadow"
KEY = "PULSAR.SHADOW_SOURCE"


def _path(full: str) -> str:
    return "/admin/v2/" + full.replace("://", "/")


def _call(web_url: str, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    return http_json(web_url, method, path, raw)


def _create_shadow(web_url: str, shadow: str = SHADOW, source: str = SRC) -> tuple[int, Any]:
    return _call(web_url, "PUT", _path(shadow), {KEY: source})


def _receive(consumer: Any, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(msg)
        out.append(msg)
    return out


def _next_unseen(consumer: Any, seen: set[bytes]) -> bytes:
    """The next message not in *seen*: an acknowledgement still in the client's group when
    the topic was unloaded may be redelivered (at least once), a message is never skipped."""
    for _ in range(len(seen) + 1):
        msg = consumer.receive(timeout_millis=15_000)
        consumer.acknowledge(msg)
        if msg.data() not in seen:
            return bytes(msg.data())
    raise AssertionError(f"only {seen} redelivered")


def test_shadow_consumers_read_the_source_with_their_own_cursors(broker: Any) -> None:
    import pulsar

    web = broker.web_url
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(SRC)
        before = [producer.send(f"old-{i}".encode()) for i in range(3)]
        assert _create_shadow(web)[0] == 204
        assert _call(web, "GET", _path(SHADOW) + "/properties") == (200, {KEY: SRC})
        shadow_sub = client.subscribe(SHADOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = _receive(shadow_sub, 3)
        assert [m.data() for m in got] == [b"old-0", b"old-1", b"old-2"]
        # the source's message ids, as Pulsar's shadow replicates them
        assert [str(m.message_id()) for m in got] == [str(i) for i in before]
        # new messages reach the shadow's consumers as the source gets them
        producer.send(b"new")
        assert shadow_sub.receive(timeout_millis=10_000).data() == b"new"
        # the shadow's subscription is its own: the source has none, and keeps its backlog
        status, stats = _call(web, "GET", _path(SRC) + "/stats")
        assert status == 200 and stats["subscriptions"] == {}
        src_sub = client.subscribe(SRC, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in _receive(src_sub, 4)] == [b"old-0", b"old-1", b"old-2", b"new"]
        status, stats = _call(web, "GET", _path(SHADOW) + "/stats")
        assert status == 200 and list(stats["subscriptions"]) == ["s"]
    finally:
        client.close()
    _assert_send_refused(broker.service_url)


def _assert_send_refused(service_url: str) -> None:
    """A producer attaches to a shadow, as in Pulsar, and its SEND gets Pulsar's SEND_ERROR
    (the official clients reconnect and re-send on a SEND_ERROR, so the raw client looks)."""
    with RawClient(service_url) as raw:
        raw.handshake()
        name = raw.create_producer(SHADOW, 1).producer_success.producer_name
        refused = raw.request(C.encode_send(1, 0, make_entry(b"nope", producer_name=name)))
    assert refused.type == pb.BaseCommand.SEND_ERROR
    assert refused.send_error.error == ServerError.NotAllowedError
    assert refused.send_error.message == "Cannot send messages to a shadow topic"


def test_shadow_topics_policy_answers_as_pulsar(broker: Any) -> None:
    web = broker.web_url
    route = _path(SRC) + "/shadowTopics"
    assert _call(web, "GET", route)[0] == 404   # the source must exist
    assert _call(web, "PUT", _path(SRC))[0] == 204
    assert _call(web, "GET", route) == (200, None)   # an empty 200, as Pulsar
    status, body = _call(web, "PUT", route, [])
    assert (status, body["reason"]) == (412, "Cannot specify empty shadow topics, please use remove command instead.")
    status, body = _call(web, "PUT", route, ["non-persistent://public/default/x"])
    assert (status, body["reason"]) == (412, "Only persistent topic can be set as shadow topic")
    status, body = _call(web, "PUT", route, [SHADOW])
    assert (status, body["reason"]) == (412, f"Shadow topic [{SHADOW}] not exists.")
    status, body = _call(web, "PUT", route, ["persistent://bad"])
    assert (status, body["reason"]) == (403, "Invalid shadow topic name: persistent://bad")
    assert _create_shadow(web)[0] == 204
    assert _call(web, "PUT", route, [SHADOW])[0] == 204
    assert _call(web, "GET", route) == (200, [SHADOW])
    # a source listing shadows is not deleted without force
    status, body = _call(web, "DELETE", _path(SRC))
    assert (status, body["reason"]) == (
        422, f"Delete forbidden. Topic {SRC} is replicated to shadow topics.")
    assert _call(web, "DELETE", route)[0] == 204
    assert _call(web, "GET", route) == (200, None)   # an empty 200, as Pulsar
    # the source must exist
    status, body = _create_shadow(web, f"persistent://{NS}/s2", f"persistent://{NS}/nope")
    assert (status, body["reason"]) == (404, f"Topic persistent://{NS}/nope not found")
    assert _call(web, "GET", _path(f"persistent://{NS}/s2") + "/properties")[0] == 404


def test_a_shadow_of_a_shadow_reads_the_first_source(broker: Any) -> None:
    import pulsar

    web = broker.web_url
    second = f"persistent://{NS}/second"
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(SRC)
        first = producer.send(b"one")
        assert _create_shadow(web)[0] == 204
        assert _create_shadow(web, second, SHADOW)[0] == 204   # Pulsar creates it too
        sub = client.subscribe(second, "s", initial_position=pulsar.InitialPosition.Earliest)
        msg = sub.receive(timeout_millis=10_000)
        assert (msg.data(), str(msg.message_id())) == (b"one", str(first))
        producer.send(b"two")
        assert sub.receive(timeout_millis=10_000).data() == b"two"
        # unloading the first source unloads both shadows; the second resumes
        assert _call(web, "PUT", _path(SRC) + "/unload")[0] == 204
        producer.send(b"three")
        assert _next_unseen(sub, {b"one", b"two"}) == b"three"
    finally:
        client.close()


def test_partitioned_shadow_reads_the_same_partition(broker: Any) -> None:
    import pulsar

    web = broker.web_url
    assert _call(web, "PUT", _path(SRC) + "/partitions", 2)[0] == 204
    body = {"partitions": 2, "properties": {KEY: SRC}}
    assert _call(web, "PUT", _path(SHADOW) + "/partitions", body)[0] == 204
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(SRC + "-partition-1")
        sent = producer.send(b"p1")
        sub = client.subscribe(SHADOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        msg = sub.receive(timeout_millis=10_000)
        assert msg.data() == b"p1" and msg.topic_name() == SHADOW + "-partition-1"
        assert (msg.message_id().ledger_id(), msg.message_id().entry_id()) == (
            sent.ledger_id(), sent.entry_id())
    finally:
        client.close()


def test_unload_and_delete_of_either_side(broker: Any) -> None:
    import pulsar

    web = broker.web_url
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(SRC)
        producer.send(b"a")
        assert _create_shadow(web)[0] == 204
        sub = client.subscribe(SHADOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in _receive(sub, 1)] == [b"a"]
        # unloading the source unloads its shadow too; both come back, the cursor kept
        assert _call(web, "PUT", _path(SRC) + "/unload")[0] == 204
        producer.send(b"b")
        assert _next_unseen(sub, {b"a"}) == b"b"
        assert _call(web, "PUT", _path(SHADOW) + "/unload")[0] == 204
        producer.send(b"c")
        assert _next_unseen(sub, {b"a", b"b"}) == b"c"
        sub.close()
        # deleting the shadow leaves the source and its messages alone
        assert _call(web, "DELETE", _path(SHADOW))[0] == 204
        assert _call(web, "GET", _path(SHADOW) + "/properties")[0] == 404
        src_sub = client.subscribe(SRC, "x", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in _receive(src_sub, 3)] == [b"a", b"b", b"c"]
        # a shadow created again starts with no cursor of the old one
        assert _create_shadow(web)[0] == 204
        status, stats = _call(web, "GET", _path(SHADOW) + "/stats")
        assert status == 200 and stats["subscriptions"] == {}
    finally:
        client.close()


def test_shadow_relation_and_cursors_survive_kill_9(run_broker_process: Any,
                                                   tmp_path: Any) -> None:
    import pulsar

    data = tmp_path / "data"
    proc = run_broker_process(data)
    assert _create_shadow(proc.web_url)[0] == 404
    client = make_client(proc.service_url)
    try:
        producer = client.create_producer(SRC)
        for i in range(4):
            producer.send(f"m{i}".encode())
        assert _create_shadow(proc.web_url)[0] == 204
        sub = client.subscribe(SHADOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        msgs = [sub.receive(timeout_millis=10_000) for _ in range(4)]
        sub.acknowledge(msgs[0])
        sub.acknowledge(msgs[1])
    finally:
        client.close()   # flushes the client's acknowledgements
    proc.stop()   # a clean stop persists the shadow's cursor; then a kill -9 of the next one
    proc = run_broker_process(data)
    client = make_client(proc.service_url)
    try:
        sub = client.subscribe(SHADOW, "s")
        assert [m.data() for m in _receive(sub, 2)] == [b"m2", b"m3"]
        producer = client.create_producer(SRC)
        producer.send(b"after")
        assert sub.receive(timeout_millis=10_000).data() == b"after"
    finally:
        client.close()
    proc.kill()
    proc = run_broker_process(data)
    assert _call(proc.web_url, "GET", _path(SHADOW) + "/properties") == (200, {KEY: SRC})
    _assert_send_refused(proc.service_url)
    client = make_client(proc.service_url)
    try:
        sub = client.subscribe(SHADOW, "s")
        src = client.create_producer(SRC)
        src.send(b"later")
        # whatever the kill lost of the last acks is redelivered, never a message twice lost
        seen = set()
        while b"later" not in seen:
            seen.add(sub.receive(timeout_millis=10_000).data())
        assert b"after" in seen and seen <= {b"m2", b"m3", b"after", b"later"}
    finally:
        client.close()
    proc.stop()


def test_a_shadow_has_its_source_schema(broker: Any) -> None:
    import pulsar
    from pulsar.schema import StringSchema

    web = broker.web_url
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(SRC, schema=StringSchema())
        producer.send("typed")
        assert _create_shadow(web)[0] == 204
        # a consumer with the source's schema is accepted on the shadow, as Pulsar reuses
        # the source's schema for it
        sub = client.subscribe(SHADOW, "s", schema=StringSchema(),
                               initial_position=pulsar.InitialPosition.Earliest)
        assert sub.receive(timeout_millis=10_000).value() == "typed"
    finally:
        client.close()


def test_a_cycle_of_shadow_sources_is_refused_not_awaited(broker: Any) -> None:
    web = broker.web_url
    assert _call(web, "PUT", _path(SRC))[0] == 204
    assert _create_shadow(web)[0] == 204
    # properties edited after creation make each the other's source
    assert _call(web, "PUT", _path(SRC) + "/properties", {KEY: SHADOW})[0] == 204
    assert _call(web, "PUT", _path(SRC) + "/unload")[0] == 204
    status, body = _call(web, "GET", _path(SRC) + "/stats")
    assert status >= 400 and "cycle of shadow sources" in body["reason"]
    # removing the property makes the source a topic of its own again
    assert _call(web, "DELETE", _path(SRC) + f"/properties?key={KEY}")[0] == 204
    assert _call(web, "GET", _path(SRC) + "/stats")[0] == 200
