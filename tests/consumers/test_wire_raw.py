"""Consumer commands on the wire, with a raw client built on ``protocol/`` (no official client).

Pins the replies the official client depends on but cannot show: ACK_RESPONSE only for acks with
a request id, GET_LAST_MESSAGE_ID on an empty topic, CLOSE_CONSUMER before SUCCESS on seek, a
repeated SUBSCRIBE, CONSUMER_STATS, UNSUBSCRIBE refused while another consumer is attached.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import client_commands as cc
from protocol import pulsar_pb as pb
from protocol.commands import encode_close_consumer
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import encode_entry

from ._helpers import topic_name

T = pb.BaseCommand
U64_MINUS_ONE = (1 << 64) - 1


class RawClient:
    def __init__(self, service_url: str) -> None:
        host, port = service_url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.decoder = FrameDecoder()
        self.queue: list[pb.BaseCommand] = []
        self.send(cc.encode_connect())
        assert self.next().type == T.CONNECTED

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self, timeout: float = 5.0) -> pb.BaseCommand:
        deadline = time.monotonic() + timeout
        while not self.queue:
            frame = self.decoder.next_frame()
            if frame is not NEED_DATA:
                if frame.command.type != T.PING:
                    self.queue.append(frame.command)
                continue
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.decoder.receive_data(data)
        return self.queue.pop(0)

    def nothing_within(self, timeout: float = 0.3) -> bool:
        try:
            self.next(timeout)
        except TimeoutError:
            return True
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(broker: Any) -> Iterator[RawClient]:
    client = RawClient(broker.service_url)
    yield client
    client.close()


def _subscribe(raw: RawClient, topic: str, consumer_id: int, rid: int, sub_type: int = 1,
               **kw: Any) -> pb.BaseCommand:
    raw.send(cc.encode_subscribe(topic, "sub", sub_type, consumer_id, rid, **kw))
    return raw.next()


def _publish(raw: RawClient, topic: str, n: int) -> list[tuple[int, int]]:
    raw.send(cc.encode_producer(topic, 1, 900))
    assert raw.next().type == T.PRODUCER_SUCCESS
    ids = []
    for i in range(n):
        md = pb.MessageMetadata(producer_name="raw", sequence_id=i,
                                publish_time=int(time.time() * 1000))
        raw.send(cc.encode_send(1, i, encode_entry(md, b"x")))
        receipt = raw.next()
        assert receipt.type == T.SEND_RECEIPT
        ids.append((receipt.send_receipt.message_id.ledgerId,
                    receipt.send_receipt.message_id.entryId))
    return ids


def test_ack_response_only_when_the_ack_has_a_request_id(raw: RawClient) -> None:
    topic = topic_name("raw-ack")
    assert _subscribe(raw, topic, 7, 1, initial_position=1).type == T.SUCCESS
    ids = _publish(raw, topic, 2)
    raw.send(cc.encode_flow(7, 10))
    got = [raw.next(), raw.next()]
    assert [c.type for c in got] == [T.MESSAGE, T.MESSAGE]
    raw.send(cc.encode_ack(7, [ids[0]]))
    assert raw.nothing_within()
    raw.send(cc.encode_ack(7, [ids[1]], request_id=55))
    reply = raw.next()
    assert reply.type == T.ACK_RESPONSE
    assert reply.ackResponse.request_id == 55 and not reply.ackResponse.HasField("error")


def test_get_last_message_id_on_an_empty_topic_is_minus_one_minus_one(raw: RawClient) -> None:
    topic = topic_name("raw-last")
    assert _subscribe(raw, topic, 3, 1).type == T.SUCCESS
    raw.send(cc.encode_get_last_message_id(3, 2))
    reply = raw.next().getLastMessageIdResponse
    assert reply.request_id == 2
    # (-1, -1) as the client reads it, as Pulsar answers a topic without an entry
    assert (reply.last_message_id.ledgerId, reply.last_message_id.entryId) == (
        U64_MINUS_ONE, U64_MINUS_ONE)
    ids = _publish(raw, topic, 1)
    raw.send(cc.encode_get_last_message_id(3, 3))
    reply = raw.next().getLastMessageIdResponse
    assert (reply.last_message_id.ledgerId, reply.last_message_id.entryId) == ids[0]
    assert reply.HasField("consumer_mark_delete_position")


def test_seek_closes_the_consumer_before_answering(raw: RawClient) -> None:
    topic = topic_name("raw-seek")
    assert _subscribe(raw, topic, 4, 1, sub_type=0).type == T.SUCCESS
    ids = _publish(raw, topic, 3)
    raw.send(cc.encode_seek(4, 9, message_id=ids[1]))
    first, second = raw.next(), raw.next()
    assert first.type == T.CLOSE_CONSUMER and first.close_consumer.consumer_id == 4
    assert second.type == T.SUCCESS and second.success.request_id == 9
    assert _subscribe(raw, topic, 4, 10, sub_type=0).type == T.SUCCESS
    raw.send(cc.encode_flow(4, 10))
    msg = raw.next().message
    assert (msg.message_id.ledgerId, msg.message_id.entryId) == ids[1]


def test_requests_naming_an_unknown_consumer_get_pulsars_metadata_error(raw: RawClient) -> None:
    # Pulsar's ServerCnx answers SEEK, UNSUBSCRIBE and GET_LAST_MESSAGE_ID for a consumer id
    # the connection does not have with MetadataError "Consumer not found"
    for request_id, frame in enumerate((cc.encode_seek(77, 1, message_id=(1, 1)),
                                        cc.encode_seek(77, 2, publish_time=1),
                                        cc.encode_unsubscribe(77, 3),
                                        cc.encode_get_last_message_id(77, 4)), start=1):
        raw.send(frame)
        error = raw.next().error
        assert (error.request_id, error.error, error.message) == (
            request_id, pb.MetadataError, "Consumer not found")
    assert _subscribe(raw, topic_name("raw-seek-nothing"), 8, 5).type == T.SUCCESS
    raw.send(cc.encode_seek(8, 6))
    error = raw.next().error
    assert (error.request_id, error.error, error.message) == (
        6, pb.MetadataError, "Message id and message publish time were not present")


@pytest.mark.parametrize(("name", "reason"), [
    ("", "Empty subscription name"),
    ("  ", "Empty subscription name"),
    ("pulsar.dedup", "Subscription with reserved subscription name attempted"),
    ("pulsar.repl.elsewhere", "Subscription with reserved subscription name attempted"),
])
def test_empty_and_reserved_subscription_names_are_refused_as_pulsar_refuses_them(
        raw: RawClient, name: str, reason: str) -> None:
    raw.send(cc.encode_subscribe(topic_name("raw-names"), name, 1, 9, 1))
    error = raw.next().error
    assert (error.request_id, error.error, error.message) == (1, pb.ProducerBusy, reason)
    assert _subscribe(raw, topic_name("raw-names"), 9, 2).type == T.SUCCESS


def test_repeated_subscribe_and_unknown_close_both_succeed(raw: RawClient) -> None:
    topic = topic_name("raw-repeat")
    assert _subscribe(raw, topic, 5, 1).type == T.SUCCESS
    assert _subscribe(raw, topic, 5, 2).type == T.SUCCESS
    raw.send(encode_close_consumer(99, 3))
    assert raw.next().success.request_id == 3


def test_consumer_stats_answer(raw: RawClient) -> None:
    topic = topic_name("raw-stats")
    assert _subscribe(raw, topic, 6, 1, consumer_name="stats-me").type == T.SUCCESS
    raw.send(cc.encode_flow(6, 123))
    raw.send(cc.encode_consumer_stats(2, 6))
    stats = raw.next().consumerStatsResponse
    assert stats.request_id == 2
    assert stats.consumerName == "stats-me"
    assert stats.availablePermits == 123
    assert stats.type == "Shared"
    # Pulsar sends the stats' formatted date, not a number of milliseconds.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stats.connectedSince)
    raw.send(cc.encode_consumer_stats(3, 404))
    assert raw.next().consumerStatsResponse.error_code == pb.ConsumerNotFound


def test_unsubscribe_is_refused_while_another_consumer_is_attached(raw: RawClient) -> None:
    topic = topic_name("raw-unsub")
    assert _subscribe(raw, topic, 1, 1).type == T.SUCCESS
    assert _subscribe(raw, topic, 2, 2).type == T.SUCCESS
    raw.send(cc.encode_unsubscribe(1, 3))
    reply = raw.next()
    assert reply.type == T.ERROR and reply.error.request_id == 3
    raw.send(encode_close_consumer(2, 4))
    assert raw.next().type == T.SUCCESS
    raw.send(cc.encode_unsubscribe(1, 5))
    assert raw.next().type == T.SUCCESS


def _active_change(c: pb.BaseCommand) -> tuple[int, bool]:
    assert c.type == T.ACTIVE_CONSUMER_CHANGE
    return c.active_consumer_change.consumer_id, c.active_consumer_change.is_active


def test_failover_tells_consumers_which_one_is_active_after_the_failover_delay(
        raw: RawClient) -> None:
    # activeConsumerFailoverDelayTimeMillis (1 s, Pulsar's default): every change is told after
    # the subscriber's SUCCESS and the delay (the Go client drops a notification that comes
    # before it has registered the consumer, which it does only after SUCCESS)
    topic = topic_name("raw-failover")
    # Timed from before the SUBSCRIBE goes out: the broker's delay starts after it, so load can
    # only make the interval longer (timed from our read of SUCCESS, a late read shortened it).
    asked_at = time.monotonic()
    raw.send(cc.encode_subscribe(topic, "sub", 2, 1, 1, consumer_name="b"))
    assert raw.next().type == T.SUCCESS
    assert _active_change(raw.next()) == (1, True)
    assert time.monotonic() - asked_at >= 0.9
    # "a" sorts before "b": it takes over; both are told once the delay is over
    raw.send(cc.encode_subscribe(topic, "sub", 2, 2, 2, consumer_name="a"))
    assert raw.next().type == T.SUCCESS
    assert {_active_change(raw.next()), _active_change(raw.next())} == {(1, False), (2, True)}
    raw.send(encode_close_consumer(2, 3))
    replies = [raw.next() for _ in range(2)]
    assert {c.type for c in replies} == {T.SUCCESS, T.ACTIVE_CONSUMER_CHANGE}
    change = next(c for c in replies if c.type == T.ACTIVE_CONSUMER_CHANGE)
    assert change.active_consumer_change.consumer_id == 1 and change.active_consumer_change.is_active


def test_failover_without_delay_tells_at_once(broker_factory: Any) -> None:
    handle = broker_factory(config_overrides={"activeConsumerFailoverDelayTimeMillis": 0})
    raw = RawClient(handle.service_url)
    try:
        topic = topic_name("raw-failover-now")
        raw.send(cc.encode_subscribe(topic, "sub", 2, 1, 1, consumer_name="b"))
        assert raw.next().type == T.SUCCESS
        assert _active_change(raw.next()) == (1, True)
        raw.send(cc.encode_subscribe(topic, "sub", 2, 2, 2, consumer_name="a"))
        replies = [raw.next() for _ in range(3)]
        assert _active_change(replies[0]) == (1, False)
        assert replies[1].type == T.SUCCESS
        assert _active_change(replies[2]) == (2, True)
    finally:
        raw.close()


def test_acks_of_ids_that_do_not_exist_are_ignored_and_keep_the_connection(
        raw: RawClient) -> None:
    """A cumulative ack of (2**62, 0) and individual acks of entry ids >= 2**32 (pyroaring's
    uint32) or beyond the last entry acknowledge nothing: the connection stays, the backlog
    stays, and the message later published at an acked id is delivered."""
    topic = topic_name("raw-ack-bounds")
    assert _subscribe(raw, topic, 8, 1, initial_position=1).type == T.SUCCESS
    [(lid, eid)] = _publish(raw, topic, 1)
    raw.send(cc.encode_ack(8, [(1 << 62, 0)], cumulative=True, request_id=60))
    assert raw.next().type == T.ACK_RESPONSE
    raw.send(cc.encode_ack(8, [(lid, 1 << 40), (lid, eid + 1)], request_id=61))
    assert raw.next().type == T.ACK_RESPONSE
    raw.send(cc.encode_producer(topic, 2, 901))
    assert raw.next().type == T.PRODUCER_SUCCESS
    md = pb.MessageMetadata(producer_name="raw2", sequence_id=0,
                            publish_time=int(time.time() * 1000))
    raw.send(cc.encode_send(2, 0, encode_entry(md, b"y")))
    receipt = raw.next()
    assert (receipt.send_receipt.message_id.ledgerId,
            receipt.send_receipt.message_id.entryId) == (lid, eid + 1)
    raw.send(cc.encode_flow(8, 10))
    got = [raw.next(), raw.next()]
    assert [(c.message.message_id.ledgerId, c.message.message_id.entryId) for c in got] == [
        (lid, eid), (lid, eid + 1)]
