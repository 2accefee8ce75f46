"""Commands and fields the Java, Go and C++ clients use, each answered as Pulsar answers it."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry
from conftest import make_client
from rest import http_json
from waiting import wait_until

from broker.net import topic_watchers
from broker.topics.heartbeat import TopicVersion
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.metadata import split_entry
from protocol.topic_list import encode_watch_topic_list, encode_watch_topic_list_close, topics_hash

T = pb.BaseCommand
_U64 = (1 << 64) - 1


@pytest.fixture
def raw(broker: Any) -> Any:
    with RawClient(broker.service_url) as c:
        c.handshake()
        yield c


def test_last_message_id_of_an_empty_topic_is_minus_one_minus_one(raw: RawClient) -> None:
    topic = "persistent://public/default/empty-last-id"
    assert raw.request(C.encode_subscribe(topic, "s", 1, 5, 100)).type == T.SUCCESS
    answer = raw.request(C.encode_get_last_message_id(5, 101))
    assert answer.type == T.GET_LAST_MESSAGE_ID_RESPONSE
    mid = answer.getLastMessageIdResponse.last_message_id
    assert (mid.ledgerId, mid.entryId) == (_U64, _U64)

    assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
    receipt = raw.request(C.encode_send(1, 0, make_entry(b"x")))
    answer = raw.request(C.encode_get_last_message_id(5, 102))
    mid = answer.getLastMessageIdResponse.last_message_id
    sent = receipt.send_receipt.message_id
    assert (mid.ledgerId, mid.entryId) == (sent.ledgerId, sent.entryId)


def test_official_client_reads_an_empty_topic_as_earliest(client: Any) -> None:
    import pulsar

    consumer = client.subscribe("empty-last-id-client", "s")
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (-1, -1)
    reader = client.create_reader("empty-last-id-client", pulsar.MessageId.earliest)
    assert not reader.has_message_available()


@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_subscription_name_is_refused_as_pulsar_refuses_it(raw: RawClient,
                                                                  name: str) -> None:
    answer = raw.request(C.encode_subscribe("persistent://public/default/blank-sub", name,
                                            0, 5, 100))
    assert answer.type == T.ERROR
    assert answer.error.request_id == 100
    assert answer.error.error == ServerError.ProducerBusy
    assert answer.error.message == "Empty subscription name"


def test_official_client_fails_a_subscribe_without_a_name(client: Any) -> None:
    import pulsar

    with pytest.raises(pulsar.InvalidConfiguration):
        client.subscribe("blank-sub-client", "")


def test_seek_by_publish_time_keeps_the_message_published_at_that_millisecond(
        broker: Any, raw: RawClient, client: Any) -> None:
    # Pulsar's PersistentMessageFinder finds the newest entry published *before* the time and
    # starts after it: an entry whose publish time equals the target is delivered again.
    topic = "persistent://public/default/seek-same-ms"
    consumer = client.subscribe(topic, "s")
    assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
    for seq, (payload, published) in enumerate([(b"a", 1000), (b"b", 2000), (b"c", 2000),
                                                (b"d", 3000)]):
        answer = raw.request(C.encode_send(1, seq, make_entry(payload, sequence_id=seq,
                                                              publish_time=published)))
        assert answer.type == T.SEND_RECEIPT
    assert [consumer.receive(5000).data() for _ in range(4)] == [b"a", b"b", b"c", b"d"]
    consumer.seek(2000)
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"b", b"c", b"d"]
    consumer.seek(2001)
    assert consumer.receive(5000).data() == b"d"


def test_namespace_max_producers_per_topic_is_enforced_at_producer_creation(
        broker: Any, client: Any) -> None:
    import pulsar

    status, _ = http_json(broker.web_url, "PUT", "/admin/v2/namespaces/public/limited",
                          json.dumps({"max_producers_per_topic": 2}).encode())
    assert status == 204
    status, doc = http_json(broker.web_url, "GET", "/admin/v2/namespaces/public/limited")
    assert doc["max_producers_per_topic"] == 2
    topic = "persistent://public/limited/t"
    producers = [client.create_producer(topic) for _ in range(2)]
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    # The topic's own limit comes first, as in Pulsar's topic > namespace > broker order.
    status, _ = http_json(broker.web_url, "POST",
                          "/admin/v2/persistent/public/limited/t/maxProducers", b"3")
    assert status == 204
    producers.append(client.create_producer(topic))
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    status, body = http_json(broker.web_url, "POST",
                             "/admin/v2/namespaces/public/limited/maxProducersPerTopic", b"-1")
    assert (status, body["reason"]) == (412, "maxProducersPerTopic must be 0 or more")
    for producer in producers:
        producer.close()


def test_unsubscribe_force_disconnects_the_other_consumers_and_deletes(broker: Any) -> None:
    topic = "persistent://public/default/unsub-force"
    with RawClient(broker.service_url) as first, RawClient(broker.service_url) as second:
        first.handshake()
        second.handshake()
        for c in (first, second):
            assert c.request(C.encode_subscribe(topic, "s", 1, 7, 1)).type == T.SUCCESS
        refused = first.request(C.encode_unsubscribe(7, 2))
        assert refused.type == T.ERROR
        assert refused.error.error == ServerError.MetadataError
        assert refused.error.message == "Unconnected or shared consumer attempting to unsubscribe"
        done = first.request(C.encode_unsubscribe(7, 3, force=True))
        assert (done.type, done.success.request_id) == (T.SUCCESS, 3)
        closed = second.recv_command()
        assert (closed.type, closed.close_consumer.consumer_id) == (T.CLOSE_CONSUMER, 7)
    status, stats = http_json(broker.web_url, "GET",
                              "/admin/v2/persistent/public/default/unsub-force/stats")
    assert status == 200 and "s" not in stats["subscriptions"]


def _subscribe_rolled_back(topic: str, sub: str, consumer_id: int, request_id: int,
                           seconds: int) -> bytes:
    cmd = pb.BaseCommand(type=T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic, s.subscription, s.subType = topic, sub, pb.CommandSubscribe.Exclusive
    s.consumer_id, s.request_id = consumer_id, request_id
    s.start_message_rollback_duration_sec = seconds
    return C.encode_command(cmd)


def _receive_payloads(raw: RawClient, consumer_id: int, count: int) -> list[bytes]:
    raw.send(C.encode_flow(consumer_id, 100))
    got = []
    for _ in range(count):
        frame = raw.recv_frame()
        assert frame.command.type == T.MESSAGE and frame.entry is not None
        got.append(bytes(split_entry(frame.entry)[1]))
    return got


def test_subscribe_rollback_duration_starts_at_the_messages_of_that_period(
        raw: RawClient) -> None:
    topic = "persistent://public/default/rollback"
    now = int(time.time() * 1000)
    assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
    for seq, age_s in enumerate((300, 100, 10)):
        entry = make_entry(f"{age_s}s".encode(), sequence_id=seq,
                           publish_time=now - age_s * 1000)
        assert raw.request(C.encode_send(1, seq, entry)).type == T.SEND_RECEIPT
    # A new subscription (initial position Latest) rolled back 200 s.
    assert raw.request(_subscribe_rolled_back(topic, "s", 5, 10, 200)).type == T.SUCCESS
    assert _receive_payloads(raw, 5, 2) == [b"100s", b"10s"]
    assert raw.request(C.encode_close_consumer(5, 11)).type == T.SUCCESS
    # An existing subscription is rolled back too.
    assert raw.request(_subscribe_rolled_back(topic, "s", 6, 12, 30)).type == T.SUCCESS
    assert _receive_payloads(raw, 6, 1) == [b"10s"]


def _subscribe_with_properties(topic: str, sub: str, consumer_id: int, request_id: int,
                               properties: dict[str, str], *, durable: bool = True) -> bytes:
    cmd = pb.BaseCommand(type=T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic, s.subscription, s.subType = topic, sub, pb.CommandSubscribe.Shared
    s.consumer_id, s.request_id, s.durable = consumer_id, request_id, durable
    for key, value in properties.items():
        s.subscription_properties.add(key=key, value=value)
    return C.encode_command(cmd)


def _subscription_stats(broker: Any, local: str, sub: str) -> dict[str, Any]:
    status, stats = http_json(broker.web_url, "GET",
                              f"/admin/v2/persistent/public/default/{local}/stats")
    assert status == 200
    return dict(stats["subscriptions"][sub])


def test_subscription_properties_are_kept_durable_and_shown_in_stats(
        broker_factory: Any) -> None:
    first = broker_factory()
    topic = "persistent://public/default/sub-props"
    with RawClient(first.service_url) as raw:
        raw.handshake()
        answer = raw.request(_subscribe_with_properties(topic, "s", 1, 1, {"team": "billing"}))
        assert answer.type == T.SUCCESS
        # Created once: a later subscribe does not change them (Pulsar opens the cursor once).
        answer = raw.request(_subscribe_with_properties(topic, "s", 2, 2, {"team": "other"}))
        assert answer.type == T.SUCCESS
        answer = raw.request(_subscribe_with_properties(topic, "r", 3, 3, {"k": "v"},
                                                        durable=False))
        assert answer.type == T.SUCCESS
        assert _subscription_stats(first, "sub-props", "s")["subscriptionProperties"] == \
            {"team": "billing"}
        assert _subscription_stats(first, "sub-props", "r")["subscriptionProperties"] == \
            {"k": "v"}
    first.stop()
    second = broker_factory(data_dir=first.data_dir)
    assert _subscription_stats(second, "sub-props", "s")["subscriptionProperties"] == \
        {"team": "billing"}


def test_auto_created_topics_are_partitioned_when_the_broker_says_so(
        broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"allowAutoTopicCreationType": "partitioned",
                                         "defaultNumPartitions": 3})
    with RawClient(b.service_url) as raw:
        raw.handshake()
        answer = raw.request(C.encode_partitioned_metadata("auto-parted", 1))
        assert answer.partitionMetadataResponse.partitions == 3
        # A partition's name, and a topic that exists unpartitioned, stay as they are.
        answer = raw.request(C.encode_partitioned_metadata("other-partition-0", 2))
        assert answer.partitionMetadataResponse.partitions == 0
        assert raw.create_producer("persistent://public/default/plain", 1).type == \
            T.PRODUCER_SUCCESS
        answer = raw.request(C.encode_partitioned_metadata("plain", 3))
        assert answer.partitionMetadataResponse.partitions == 0
    status, body = http_json(b.web_url, "GET",
                             "/admin/v2/persistent/public/default/auto-parted/partitions")
    assert (status, body["partitions"]) == (200, 3)
    # The client's HTTP lookup asks with checkAllowAutoCreation=true.
    status, body = http_json(
        b.web_url, "GET",
        "/admin/v2/persistent/public/default/by-http/partitions?checkAllowAutoCreation=true")
    assert (status, body["partitions"]) == (200, 3)
    client = make_client(b.service_url)
    try:
        producer = client.create_producer("official-parted")
        producer.send(b"x")
        status, body = http_json(b.web_url, "GET",
                                 "/admin/v2/persistent/public/default/official-parted/partitions")
        assert body["partitions"] == 3
    finally:
        client.close()


def _protobuf_native(message: Any) -> bytes:
    """A PROTOBUF_NATIVE schema definition as the clients build it for *message*'s class."""
    from google.protobuf import descriptor_pb2

    files = descriptor_pb2.FileDescriptorSet()
    message.DESCRIPTOR.file.CopyToProto(files.file.add())
    return json.dumps({
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode(),
        "rootMessageTypeName": message.DESCRIPTOR.full_name,
        "rootFileDescriptorName": message.DESCRIPTOR.file.name,
    }).encode()


def _producer_with_schema(topic: str, producer_id: int, request_id: int,
                          schema_type: int, data: bytes) -> bytes:
    cmd = pb.BaseCommand(type=T.PRODUCER)
    p = cmd.producer
    p.topic, p.producer_id, p.request_id = topic, producer_id, request_id
    p.schema.name, p.schema.type, p.schema.schema_data = "s", schema_type, data
    return C.encode_command(cmd)


def test_protobuf_native_schemas_may_not_change_their_root_message(raw: RawClient) -> None:
    topic = "persistent://public/default/protobuf-native"
    native = pb.Schema.ProtobufNative
    first = _protobuf_native(pb.MessageIdData)
    assert raw.request(_producer_with_schema(topic, 1, 1, native, first)).type == \
        T.PRODUCER_SUCCESS
    assert raw.request(C.encode_close_producer(1, 2)).type == T.SUCCESS
    refused = raw.request(_producer_with_schema(topic, 2, 3, native,
                                                _protobuf_native(pb.KeyValue)))
    assert refused.type == T.ERROR
    assert refused.error.error == ServerError.IncompatibleSchema
    assert "Protobuf root message isn't allow change!" in refused.error.message
    assert raw.request(_producer_with_schema(topic, 3, 4, native, first)).type == \
        T.PRODUCER_SUCCESS


def test_schema_validation_enforced_refuses_producers_without_a_schema(
        broker_factory: Any) -> None:
    import pulsar
    from pulsar.schema import Record, String, StringSchema

    class Greeting(Record):
        text = String()

    enforced = broker_factory(config_overrides={"isSchemaValidationEnforced": True})
    client = make_client(enforced.service_url)
    try:
        client.create_producer("typed", schema=pulsar.schema.AvroSchema(Greeting)).close()
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer("typed")
        client.subscribe("typed", "no-schema-consumers-are-fine").close()
        client.create_producer("untyped").close()  # a topic without schema takes anyone
    finally:
        client.close()

    # Off by default; the namespace policy turns it on.
    plain = broker_factory()
    client = make_client(plain.service_url)
    try:
        client.create_producer("typed", schema=StringSchema()).close()
        client.create_producer("typed").close()
        status, _ = http_json(plain.web_url, "POST",
                              "/admin/v2/namespaces/public/default/schemaValidationEnforced",
                              b"true")
        assert status == 204
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer("typed")
    finally:
        client.close()


def test_topic_list_watchers_report_matching_topics_as_they_come_and_go(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        connected = raw.handshake()
        assert connected.feature_flags.supports_topic_watchers
        assert raw.create_producer("persistent://public/default/watched-a", 1).type == \
            T.PRODUCER_SUCCESS
        assert raw.create_producer("persistent://public/default/other", 2).type == \
            T.PRODUCER_SUCCESS
        ok = raw.request(encode_watch_topic_list(10, 7, "public/default",
                                                 "persistent://public/default/watched-.*"))
        assert ok.type == T.WATCH_TOPIC_LIST_SUCCESS
        success = ok.watchTopicListSuccess
        assert (success.request_id, success.watcher_id) == (10, 7)
        assert list(success.topic) == ["persistent://public/default/watched-a"]
        assert success.topics_hash == topics_hash(["persistent://public/default/watched-a"])

        # A new matching topic, and partitions of a new partitioned one, are pushed.
        raw.send(C.encode_producer("persistent://public/default/watched-b", 3, 11))
        answers = {c.type: c for c in (raw.recv_command(), raw.recv_command())}
        assert set(answers) == {T.PRODUCER_SUCCESS, T.WATCH_TOPIC_UPDATE}
        update = answers[T.WATCH_TOPIC_UPDATE].watchTopicUpdate
        assert (update.watcher_id, list(update.new_topics), list(update.deleted_topics)) == \
            (7, ["persistent://public/default/watched-b"], [])
        assert update.topics_hash == topics_hash(["persistent://public/default/watched-a",
                                                  "persistent://public/default/watched-b"])
        status, _ = http_json(broker.web_url, "PUT",
                              "/admin/v2/persistent/public/default/watched-p/partitions", b"2")
        assert status == 204
        # the partitions of one creation in one update
        assert list(raw.recv_command().watchTopicUpdate.new_topics) == \
            ["persistent://public/default/watched-p-partition-0",
             "persistent://public/default/watched-p-partition-1"]

        # A deleted one too; then, closed, the watcher says nothing more.
        assert raw.request(C.encode_close_producer(3, 20)).type == T.SUCCESS
        status, _ = http_json(broker.web_url, "DELETE",
                              "/admin/v2/persistent/public/default/watched-b")
        assert status == 204
        update = raw.recv_command().watchTopicUpdate
        assert list(update.deleted_topics) == ["persistent://public/default/watched-b"]
        closed = raw.request(encode_watch_topic_list_close(21, 7))
        assert (closed.type, closed.success.request_id) == (T.SUCCESS, 21)
        assert raw.create_producer("persistent://public/default/watched-c", 4).type == \
            T.PRODUCER_SUCCESS  # the next frame is this answer, no update before it

        # The client's hash being current: no topics resent. A pattern too long: refused.
        again = raw.request(encode_watch_topic_list(
            22, 8, "public/default", "persistent://public/default/watched-a",
            topics_hash(["persistent://public/default/watched-a"])))
        assert list(again.watchTopicListSuccess.topic) == []
        refused = raw.request(encode_watch_topic_list(23, 9, "public/default", "x" * 51))
        assert (refused.type, refused.error.error) == (T.ERROR, ServerError.NotAllowedError)
        assert refused.error.message == \
            "Unable to create topic list watcher: Pattern longer than maximum: 50"
    # The broker unregisters the connection's watchers when it sees the connection close.
    wait_until(lambda: broker.call(lambda: len(broker.service.topic_events)) == 0,
               message="the closed connection's watchers to be unregistered")


def test_subscription_properties_over_rest(broker: Any) -> None:
    sub = "/admin/v2/persistent/public/default/rest-sub-props/subscription/s"
    body = json.dumps({"ledgerId": -1, "entryId": -1, "properties": {"a": "1"}}).encode()
    assert http_json(broker.web_url, "PUT", sub, body)[0] == 204
    assert http_json(broker.web_url, "GET", sub + "/properties") == (200, {"a": "1"})
    assert http_json(broker.web_url, "PUT", sub + "/properties", b'{"b": "2"}')[0] == 204
    assert http_json(broker.web_url, "GET", sub + "/properties") == (200, {"b": "2"})
    status, refused = http_json(broker.web_url, "PUT", sub + "/properties", b'{"b": 2}')
    assert (status, refused["reason"]) == (
        400, "Invalid subscription properties: expected an object of strings")
    status, _ = http_json(broker.web_url, "GET", sub.replace("/s", "/nope") + "/properties")
    assert status == 404


def test_a_lookup_in_a_missing_namespace_fails_as_pulsar_fails_it(broker: Any,
                                                                  raw: RawClient) -> None:
    for topic in ("persistent://public/missing-ns/t", "non-persistent://public/missing-ns/t",
                  "persistent://no-such-tenant/ns/t"):
        namespace = topic.split("://", 1)[1].rsplit("/", 1)[0]
        answer = raw.request(C.encode_lookup(topic, 7)).lookupTopicResponse
        assert answer.response == pb.CommandLookupTopicResponse.Failed
        assert (answer.error, answer.message) == (
            ServerError.TopicNotFound, f"Policies not found for {namespace} namespace")
    answer = raw.request(C.encode_lookup("persistent://public/default/t", 8)).lookupTopicResponse
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    # the broker's heartbeat namespace has no record and is looked up as any other
    heartbeat = broker.call(lambda: broker.service.addresses.heartbeat.topic(TopicVersion.V2))
    answer = raw.request(C.encode_lookup(heartbeat, 9)).lookupTopicResponse
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert raw.request(C.encode_ping()).type == T.PONG


def test_official_client_fails_a_producer_in_a_missing_namespace_at_its_lookup(
        client: Any) -> None:
    import pulsar

    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://public/missing-ns/t", send_timeout_millis=5000)
    client.create_producer("persistent://public/default/after-missing-ns").close()


def test_a_deleted_partitioned_topic_is_told_to_watchers_with_partitions_never_loaded(
        broker: Any) -> None:
    """Its partitions were announced when it was made; deleting it announces them gone, the
    ones no client ever loaded too (the client's list and hash would keep them otherwise)."""
    base = "/admin/v2/persistent/public/default/unloaded-p"
    parts = [f"persistent://public/default/unloaded-p-partition-{i}" for i in range(3)]
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        ok = raw.request(encode_watch_topic_list(1, 5, "public/default",
                                                 "persistent://public/default/unloaded-.*"))
        assert ok.type == T.WATCH_TOPIC_LIST_SUCCESS
        assert http_json(broker.web_url, "PUT", f"{base}/partitions", b"3")[0] == 204
        assert list(raw.recv_command().watchTopicUpdate.new_topics) == parts
        # one partition loaded by a producer, the others never
        assert raw.create_producer(parts[1], 1).type == T.PRODUCER_SUCCESS
        assert raw.request(C.encode_close_producer(1, 2)).type == T.SUCCESS
        assert http_json(broker.web_url, "DELETE", f"{base}/partitions")[0] == 204
        gone: list[str] = []
        digest = ""
        while len(gone) < len(parts):
            update = raw.recv_command().watchTopicUpdate
            assert list(update.new_topics) == []
            gone += update.deleted_topics
            digest = update.topics_hash
        assert sorted(gone) == parts and digest == topics_hash([])


def test_thousands_of_partitions_made_at_once_reach_a_watcher_in_one_update(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One update and one hash of the list for the whole creation: the hash sorts the list,
    and a hash per partition held the event loop for seconds (5 s for 4,000 partitions beside
    1,000 matching ones)."""
    hashed: list[int] = []

    def counting_hash(topics: Any) -> str:
        hashed.append(1)
        return topics_hash(topics)

    monkeypatch.setattr(topic_watchers, "topics_hash", counting_hash)  # the broker is in process
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        ok = raw.request(encode_watch_topic_list(1, 5, "public/default",
                                                 "persistent://public/default/many-.*"))
        assert ok.type == T.WATCH_TOPIC_LIST_SUCCESS
        known: set[str] = set()
        for name, count in (("many-a", 1000), ("many-b", 4000)):
            status, _ = http_json(broker.web_url, "PUT",
                                  f"/admin/v2/persistent/public/default/{name}/partitions",
                                  str(count).encode())
            assert status == 204
            update = raw.recv_command().watchTopicUpdate
            made = {f"persistent://public/default/{name}-partition-{i}" for i in range(count)}
            assert set(update.new_topics) == made and not update.deleted_topics
            known |= made
            assert update.topics_hash == topics_hash(known)
    assert len(hashed) == 2 + 1  # one per creation, one for the WATCH_TOPIC_LIST answer
