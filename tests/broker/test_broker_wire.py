"""Wire-level behaviour of the broker, driven by a raw client built on protocol/ encoders."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

import pytest
from broker_rawclient import RawClient, make_batch_entry, make_entry

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand


@pytest.fixture
def raw(broker: Any) -> Any:
    with RawClient(broker.service_url) as c:
        c.handshake()
        yield c


def test_connected_carries_server_version_and_min_protocol_version(broker: Any) -> None:
    with RawClient(broker.service_url) as c:
        connected = c.handshake(protocol_version=25)
    assert connected.protocol_version == 20
    assert connected.server_version.startswith("Horae-")


def test_accepted_connections_disable_nagle(broker: Any, raw: RawClient) -> None:
    # A lone SEND_RECEIPT must not sit in the kernel waiting for the client's delayed ACK.
    def nodelay() -> list[int]:
        return [c._transport.get_extra_info("socket").getsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY) for c in broker.server.connections]

    flags = broker.call(nodelay)
    assert flags and all(flags)


def test_ping_is_answered_with_pong(raw: RawClient) -> None:
    raw.send(C.encode_ping())
    assert raw.recv_command(skip_pings=False).type == T.PONG


def test_command_before_connect_closes_the_connection(broker: Any) -> None:
    with RawClient(broker.service_url) as c:
        c.send(C.encode_ping())
        assert c.is_closed_by_peer()


def test_second_connect_closes_the_connection(raw: RawClient) -> None:
    raw.send(C.encode_connect())
    assert raw.is_closed_by_peer()


def test_broker_side_command_from_client_closes_the_connection(raw: RawClient) -> None:
    raw.send(C.encode_send_receipt(1, 1, 1, 1))
    assert raw.is_closed_by_peer()


def test_unsupported_request_gets_error_and_connection_stays(raw: RawClient) -> None:
    cmd = T(type=T.SUCCESS)  # a broker-to-client command that carries a request id
    cmd.success.request_id = 42
    answer = raw.request(C.encode_command(cmd))
    assert answer.type == T.ERROR
    assert answer.error.request_id == 42
    assert answer.error.error == ServerError.NotAllowedError
    raw.send(C.encode_ping())
    assert raw.recv_command(skip_pings=False).type == T.PONG


def test_partitioned_metadata_and_lookup(broker: Any, raw: RawClient) -> None:
    answer = raw.request(C.encode_partitioned_metadata("persistent://public/default/pm", 1))
    assert answer.type == T.PARTITIONED_METADATA_RESPONSE
    r = answer.partitionMetadataResponse
    assert (r.request_id, r.response, r.partitions) == (1, r.Success, 0)

    broker.call(broker.service.create_partitioned_topic, "persistent://public/default/pm3", 3)
    answer = raw.request(C.encode_partitioned_metadata("pm3", 2))
    assert answer.partitionMetadataResponse.partitions == 3

    answer = raw.request(C.encode_lookup("persistent://public/default/pm", 3))
    lr = answer.lookupTopicResponse
    assert answer.type == T.LOOKUP_RESPONSE
    assert lr.response == pb.CommandLookupTopicResponse.Connect
    assert lr.brokerServiceUrl == broker.service_url  # the very string the client used
    assert lr.authoritative


def test_lookup_of_an_invalid_name_fails_cleanly(raw: RawClient) -> None:
    answer = raw.request(C.encode_lookup("persistent://public/x", 5))
    lr = answer.lookupTopicResponse
    assert lr.response == pb.CommandLookupTopicResponse.Failed
    assert lr.error == ServerError.InvalidTopicName


def test_get_schema_answers_no_schema_like_pulsar(raw: RawClient) -> None:
    answer = raw.request(C.encode_get_schema(9, "persistent://public/default/s"))
    assert answer.type == T.GET_SCHEMA_RESPONSE
    r = answer.getSchemaResponse
    assert r.request_id == 9
    assert r.error_code == ServerError.TopicNotFound
    assert r.error_message == "Topic not found or no-schema"


def test_get_topics_of_namespace_lists_topics_and_partitions(broker: Any, raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/listed", 1).type == T.PRODUCER_SUCCESS
    broker.call(broker.service.create_partitioned_topic, "persistent://public/default/parted", 2)
    answer = raw.request(C.encode_get_topics_of_namespace(11, "public/default"))
    assert answer.type == T.GET_TOPICS_OF_NAMESPACE_RESPONSE
    topics = set(answer.getTopicsOfNamespaceResponse.topics)
    assert "persistent://public/default/listed" in topics
    assert {"persistent://public/default/parted-partition-0",
            "persistent://public/default/parted-partition-1"} <= topics


def test_get_topics_of_a_missing_namespace_answers_an_empty_list(raw: RawClient) -> None:
    # as Pulsar's broker (the Go client's TestNamespaceTopicsNamespaceDoesNotExit): no ERROR
    answer = raw.request(C.encode_get_topics_of_namespace(12, "public/no-such-namespace"))
    assert answer.type == T.GET_TOPICS_OF_NAMESPACE_RESPONSE
    assert answer.getTopicsOfNamespaceResponse.request_id == 12
    assert list(answer.getTopicsOfNamespaceResponse.topics) == []


def _producer_with_initial_subscription(topic: str, sub: str, producer_id: int,
                                        request_id: int) -> bytes:
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic = topic
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    cmd.producer.initial_subscription_name = sub
    return C.encode_command(cmd)


def test_producer_initial_subscription_keeps_what_is_sent_before_anyone_subscribes(
        raw: RawClient, client: Any) -> None:
    # what the Go and Java clients' dead-letter producers ask for (DLQPolicy.InitialSubscriptionName)
    topic = "persistent://public/default/with-initial-sub"
    answer = raw.request(_producer_with_initial_subscription(topic, "init-sub", 1, 30))
    assert answer.type == T.PRODUCER_SUCCESS
    raw.send(C.encode_send(1, 0, make_entry(b"early")))
    assert raw.recv_command().type == T.SEND_RECEIPT
    # subscribing at the default initial position (latest) still gets it: the subscription
    # existed, at the earliest position, before the message was sent
    consumer = client.subscribe(topic, "init-sub")
    assert consumer.receive(timeout_millis=10_000).data() == b"early"


@pytest.mark.parametrize(("dedup", "with_highest"), [(False, True), (True, True), (True, False)])
def test_a_send_below_the_highest_id_is_stored_after_the_sends_before_it(
        broker_factory: Any, dedup: bool, with_highest: bool) -> None:
    # Key-based batching (Go, Java, C++ clients): one flush sends a batch per key, and a later
    # key's batch can carry a lower highest id than the batch before it, e.g. ids 0,3,6,9 then
    # 1,4,7. Sent in one socket read, the second takes the per-entry path; the ledger must
    # still hold them in send order (each key's order depends on it), and with deduplication
    # on the second is no re-send of the first, whether or not the client sets
    # highest_sequence_id (the Go and C++ clients do not: both then span ids 0..3 by count).
    handle = broker_factory(config_overrides={"brokerDeduplicationEnabled": dedup})
    with RawClient(handle.service_url) as raw:
        raw.handshake()
        topic = "persistent://public/default/key-based-batches"
        assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
        first = make_batch_entry([b"k1-%d" % i for i in range(4)], sequence_id=0)
        second = make_batch_entry([b"k2-%d" % i for i in range(3)], sequence_id=1)
        highest = {"highest_sequence_id": 9}, {"highest_sequence_id": 7}
        if not with_highest:
            highest = {}, {}
        raw.send(C.encode_send(1, 0, first, num_messages=4, **highest[0])
                 + C.encode_send(1, 1, second, num_messages=3, **highest[1]))
        answers = [raw.recv_command() for _ in range(2)]
    assert [a.type for a in answers] == [T.SEND_RECEIPT, T.SEND_RECEIPT]
    receipts = [a.send_receipt for a in answers]
    assert [r.sequence_id for r in receipts] == [0, 1]
    ids = [(r.message_id.ledgerId, r.message_id.entryId) for r in receipts]
    assert ids[0] < ids[1]


def test_send_receipts_echo_sequence_ids_in_order(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/receipts", 1).type == T.PRODUCER_SUCCESS
    for seq in range(5):
        raw.send(C.encode_send(1, seq, make_entry(b"m%d" % seq, sequence_id=seq)))
    # a batch of 3: the receipt echoes the first and the highest sequence id
    raw.send(C.encode_send(1, 5, make_batch_entry([b"b5", b"b6", b"b7"], sequence_id=5),
                           num_messages=3, highest_sequence_id=7))
    receipts = [raw.recv_command().send_receipt for _ in range(6)]
    assert [r.sequence_id for r in receipts] == [0, 1, 2, 3, 4, 5]
    assert receipts[-1].highest_sequence_id == 7
    ids = [(r.message_id.ledgerId, r.message_id.entryId) for r in receipts]
    assert ids == sorted(ids) and len(set(ids)) == 6


def test_crc_mismatch_is_send_error_checksum_and_connection_stays(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/crc", 1).type == T.PRODUCER_SUCCESS
    good = C.encode_send(1, 0, make_entry(b"payload", sequence_id=0))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # flip a payload byte: the CRC no longer matches
    raw.send(bytes(bad))
    answer = raw.recv_command()
    assert answer.type == T.SEND_ERROR
    assert answer.send_error.error == ServerError.ChecksumError
    assert answer.send_error.sequence_id == 0
    raw.send(C.encode_send(1, 1, make_entry(b"payload", sequence_id=1)))
    answer = raw.recv_command()
    assert answer.type == T.SEND_RECEIPT and answer.send_receipt.sequence_id == 1


def test_malformed_metadata_is_send_error_and_connection_stays(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/badmd", 1).type == T.PRODUCER_SUCCESS
    entry = struct.pack(">I", 3) + b"\xff\xff\xff" + b"payload"
    raw.send(C.encode_send(1, 0, entry))
    answer = raw.recv_command()
    assert answer.type == T.SEND_ERROR
    assert answer.send_error.error == ServerError.ChecksumError
    raw.send(C.encode_send(1, 1, make_entry(b"ok", sequence_id=1)))
    assert raw.recv_command().type == T.SEND_RECEIPT


def test_errors_keep_fifo_order_with_receipts(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/fifo", 1).type == T.PRODUCER_SUCCESS
    frames = []
    for seq in range(6):
        frame = bytearray(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq)))
        if seq in (2, 4):
            frame[-1] ^= 1
        frames.append(bytes(frame))
    raw.send(b"".join(frames))
    answers = [raw.recv_command() for _ in range(6)]
    seqs = [a.send_receipt.sequence_id if a.type == T.SEND_RECEIPT else a.send_error.sequence_id
            for a in answers]
    assert seqs == [0, 1, 2, 3, 4, 5]
    assert [a.type for a in answers].count(T.SEND_ERROR) == 2


def test_exclusive_producer_conflicts_busy_shared_and_fence_exclusive(broker: Any) -> None:
    topic = "persistent://public/default/excl"
    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        assert a.create_producer(topic, 1, access_mode=pb.Exclusive).type == T.PRODUCER_SUCCESS
        shared = b.create_producer(topic, 1)
        assert shared.type == T.ERROR and shared.error.error == ServerError.ProducerBusy
        assert "exclusive producer" in shared.error.message
        excl = b.create_producer(topic, 2, access_mode=pb.Exclusive)
        assert excl.type == T.ERROR and excl.error.error == ServerError.ProducerFenced


def test_duplicate_producer_name_is_producer_busy(broker: Any) -> None:
    topic = "persistent://public/default/dupname"
    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        ok = a.create_producer(topic, 1, name="p1")
        assert ok.type == T.PRODUCER_SUCCESS and ok.producer_success.producer_name == "p1"
        dup = b.create_producer(topic, 1, name="p1")
        assert dup.type == T.ERROR and dup.error.error == ServerError.ProducerBusy
        assert dup.error.message == "Producer with name 'p1' is already connected to topic"


def test_generated_producer_names_are_unique(raw: RawClient) -> None:
    names = {raw.create_producer("persistent://public/default/gen", pid).producer_success.producer_name
             for pid in range(1, 4)}
    assert len(names) == 3 and all(n.startswith("standalone-") for n in names)


def test_close_producer_answers_success(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/cp", 1).type == T.PRODUCER_SUCCESS
    answer = raw.request(C.encode_close_producer(1, 77))
    assert answer.type == T.SUCCESS and answer.success.request_id == 77


def test_send_for_unknown_producer_closes_the_connection(raw: RawClient) -> None:
    raw.send(C.encode_send(99, 0, make_entry(b"x")))
    assert raw.is_closed_by_peer()


def test_get_last_message_id(raw: RawClient) -> None:
    topic = "persistent://public/default/lastid"
    assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
    receipts = []
    for seq in range(3):
        receipts.append(raw.request(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq))))
    last = receipts[-1].send_receipt.message_id
    ok = raw.request(C.encode_subscribe(topic, "s", 1, 5, 100, initial_position=1))
    assert ok.type == T.SUCCESS
    answer = raw.request(C.encode_get_last_message_id(5, 101))
    assert answer.type == T.GET_LAST_MESSAGE_ID_RESPONSE
    mid = answer.getLastMessageIdResponse.last_message_id
    assert (mid.ledgerId, mid.entryId) == (last.ledgerId, last.entryId)


def test_keepalive_pings_idle_connections_and_closes_silent_ones(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"keepAliveIntervalSeconds": 1})
    with RawClient(b.service_url) as c:
        c.handshake()
        assert c.recv_command(timeout=3, skip_pings=False).type == T.PING
        assert c.is_closed_by_peer(timeout=4)  # never answered: closed after 2 intervals


def test_keepalive_answered_pings_keep_the_connection(broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"keepAliveIntervalSeconds": 1})
    with RawClient(b.service_url) as c:
        c.handshake()
        for _ in range(3):  # each PONG arrives alone, as a peer's keep-alive answer does
            assert c.recv_command(timeout=5, skip_pings=False).type == T.PING
            c.send(C.encode_pong())
        answer = c.request(C.encode_ping())  # still open, still answering
        assert answer.type == T.PONG


GARBAGE = {
    "tls_client_hello": bytes.fromhex("160301020001000200") + b"\x03\x03" + b"\x00" * 64,
    "http_get": b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n",
    "huge_length": b"\xff\xff\xff\xf0" + b"\x00" * 64,
    "bad_command": struct.pack(">II", 9, 5) + b"\xff" * 5,
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_connection_is_closed_while_others_keep_working(
        broker: Any, client: Any, kind: str) -> None:
    topic = f"persistent://public/default/garbage-{kind}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert consumer.receive(5000).data() == b"before"
    with RawClient(broker.service_url) as bad:
        if kind == "bad_command":
            bad.handshake()
        bad.send(GARBAGE[kind])
        assert bad.is_closed_by_peer()
    producer.send(b"after")
    msg = consumer.receive(5000)
    assert msg.data() == b"after"
    consumer.acknowledge(msg)


def test_garbage_in_parallel_with_traffic(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/garbage-parallel"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    closed = []

    def hammer() -> None:
        for payload in GARBAGE.values():
            with RawClient(broker.service_url) as bad:
                bad.send(payload)
                closed.append(bad.is_closed_by_peer())

    t = threading.Thread(target=hammer)
    t.start()
    for i in range(50):
        producer.send(b"%d" % i)
    t.join(10)
    assert closed == [True] * len(GARBAGE)
    got = [consumer.receive(5000).data() for _ in range(50)]
    assert got == [b"%d" % i for i in range(50)]


def test_failed_append_fails_it_and_everything_behind_it_then_the_topic_reloads(
        broker: Any, raw: RawClient) -> None:
    topic = "persistent://public/default/persist-fail"
    assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
    first = raw.request(C.encode_send(1, 0, make_entry(b"ok", sequence_id=0))).send_receipt

    def break_ledger() -> None:
        ledger = broker.service.topics[topic].ledger

        def failing_append(data: bytes) -> Any:
            fut = broker.loop.create_future()
            fut.set_exception(OSError("disk on fire"))
            return fut

        def failing_append_run(datas: list[bytes], sink: Any) -> None:
            broker.loop.call_soon(sink.entries_failed, len(datas), OSError("disk on fire"))

        ledger.append = failing_append
        ledger.append_run = failing_append_run  # the publish hot path (one run per read)

    broker.call(break_ledger)
    raw.send(b"".join(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq))
                      for seq in (1, 2, 3)))
    errors = [raw.recv_command() for _ in range(3)]
    assert [e.type for e in errors] == [T.SEND_ERROR] * 3
    assert [e.send_error.sequence_id for e in errors] == [1, 2, 3]
    assert {e.send_error.error for e in errors} == {ServerError.PersistenceError}
    # the topic is fenced and reloaded: the producer is told to reconnect
    assert raw.recv_command().type == T.CLOSE_PRODUCER
    assert raw.create_producer(topic, 2).type == T.PRODUCER_SUCCESS
    again_cmd = raw.request(C.encode_send(2, 4, make_entry(b"again", sequence_id=4)))
    assert again_cmd.type == T.SEND_RECEIPT
    again = again_cmd.send_receipt
    assert again.message_id.ledgerId > first.message_id.ledgerId


def test_reconnecting_producer_with_a_higher_epoch_replaces_the_stale_one(broker: Any) -> None:
    topic = "persistent://public/default/epoch"
    with RawClient(broker.service_url) as old, RawClient(broker.service_url) as new:
        old.handshake()
        new.handshake()
        assert old.create_producer(topic, 1, name="p").type == T.PRODUCER_SUCCESS
        same_epoch = new.request(C.encode_producer(topic, 1, 50, "p", epoch=0))
        assert same_epoch.type == T.ERROR and same_epoch.error.error == ServerError.ProducerBusy
        successor = new.request(C.encode_producer(topic, 2, 51, "p", epoch=1))
        assert successor.type == T.PRODUCER_SUCCESS
        receipt = new.request(C.encode_send(2, 0, make_entry(b"x", producer_name="p")))
        assert receipt.type == T.SEND_RECEIPT


def test_wait_for_exclusive_is_queued_then_promoted(broker: Any) -> None:
    topic = "persistent://public/default/wait-excl"
    with RawClient(broker.service_url) as a, RawClient(broker.service_url) as b:
        a.handshake()
        b.handshake()
        assert a.create_producer(topic, 1, access_mode=pb.Exclusive).type == T.PRODUCER_SUCCESS
        queued = b.request(C.encode_producer(topic, 7, 70, None, pb.WaitForExclusive))
        assert queued.type == T.PRODUCER_SUCCESS and not queued.producer_success.producer_ready
        assert a.request(C.encode_close_producer(1, 2)).type == T.SUCCESS
        ready = b.recv_command()
        assert ready.type == T.PRODUCER_SUCCESS
        assert ready.producer_success.request_id == 70 and ready.producer_success.producer_ready
        assert b.request(C.encode_send(7, 0, make_entry(b"x"))).type == T.SEND_RECEIPT
