"""Producer access modes as Pulsar: errors, fencing and the topic epoch (raw wire and official client)."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from broker_rawclient import RawClient, make_entry

from proto import pulsar_api_pb2 as pb
from protocol import commands as C
from protocol.errors import ServerError

T = pb.BaseCommand


def _pair(broker: Any) -> tuple[RawClient, RawClient]:
    a, b = RawClient(broker.service_url), RawClient(broker.service_url)
    a.handshake()
    b.handshake()
    return a, b


def test_second_exclusive_producer_is_fenced_with_pulsars_text(broker: Any) -> None:
    topic = "persistent://public/default/am-excl"
    a, b = _pair(broker)
    with a, b:
        first = a.create_producer(topic, 1, name="p1", access_mode=pb.Exclusive)
        assert first.type == T.PRODUCER_SUCCESS
        assert first.producer_success.topic_epoch == 0
        second = b.create_producer(topic, 1, name="p2", access_mode=pb.Exclusive)
    assert second.type == T.ERROR
    assert second.error.error == ServerError.ProducerFenced
    assert second.error.message == "Topic has an existing exclusive producer: p1"


def test_exclusive_producer_is_fenced_by_shared_producers(broker: Any) -> None:
    topic = "persistent://public/default/am-shared-first"
    a, b = _pair(broker)
    with a, b:
        assert a.create_producer(topic, 1, name="s").type == T.PRODUCER_SUCCESS
        excl = b.create_producer(topic, 1, name="e", access_mode=pb.Exclusive)
    assert excl.type == T.ERROR and excl.error.error == ServerError.ProducerFenced
    assert excl.error.message == "Topic has existing shared producers"


def test_exclusive_with_fencing_closes_the_holder_and_bumps_the_epoch(broker: Any) -> None:
    topic = "persistent://public/default/am-fencing"
    a, b = _pair(broker)
    with a, b:
        first = a.create_producer(topic, 1, name="p1", access_mode=pb.Exclusive)
        assert first.producer_success.topic_epoch == 0
        taker = b.create_producer(topic, 1, name="p2", access_mode=pb.ExclusiveWithFencing)
        assert taker.type == T.PRODUCER_SUCCESS and taker.producer_success.topic_epoch == 1
        closed = a.recv_command()
        assert closed.type == T.CLOSE_PRODUCER and closed.close_producer.producer_id == 1
        # The fenced producer comes back with the epoch it had: refused, fenced for good.
        back = a.request(C.encode_producer(topic, 1, 90, "p1", pb.Exclusive, epoch=1,
                                           topic_epoch=0))
        assert back.type == T.ERROR and back.error.error == ServerError.ProducerFenced
        assert b.request(C.encode_send(1, 0, make_entry(b"x", producer_name="p2"))).type \
            == T.SEND_RECEIPT


def test_stale_topic_epoch_is_fenced_after_the_holder_left(broker: Any) -> None:
    topic = "persistent://public/default/am-epoch"
    a, b = _pair(broker)
    with a, b:
        assert a.create_producer(topic, 1, name="p1", access_mode=pb.Exclusive) \
            .producer_success.topic_epoch == 0
        assert a.request(C.encode_close_producer(1, 50)).type == T.SUCCESS
        assert b.create_producer(topic, 1, name="p2", access_mode=pb.Exclusive) \
            .producer_success.topic_epoch == 1
        assert b.request(C.encode_close_producer(1, 51)).type == T.SUCCESS
        stale = a.request(C.encode_producer(topic, 2, 52, "p1", pb.Exclusive, topic_epoch=0))
    assert stale.type == T.ERROR and stale.error.error == ServerError.ProducerFenced
    assert stale.error.message == ("Topic epoch has already moved. Current epoch: 1, "
                                   "Producer epoch: 0")


def test_exclusive_with_fencing_fails_waiting_producers(broker: Any) -> None:
    topic = "persistent://public/default/am-fence-waiters"
    a, b = _pair(broker)
    with a, b, RawClient(broker.service_url) as c:
        c.handshake()
        assert a.create_producer(topic, 1, access_mode=pb.Exclusive).type == T.PRODUCER_SUCCESS
        queued = b.request(C.encode_producer(topic, 1, 60, None, pb.WaitForExclusive))
        assert not queued.producer_success.producer_ready
        assert c.create_producer(topic, 1, access_mode=pb.ExclusiveWithFencing).type \
            == T.PRODUCER_SUCCESS
        failed = b.recv_command()
    assert failed.type == T.ERROR and failed.error.request_id == 60
    assert failed.error.error == ServerError.ProducerFenced and failed.error.message == "Fenced out"


def test_official_client_exclusive_producer_is_fenced_by_exclusive_with_fencing(
        client: Any) -> None:
    topic = "persistent://public/default/am-client-fencing"
    first = client.create_producer(topic, producer_name="p-1",
                                   access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="p-x",
                               access_mode=pulsar.ProducerAccessMode.Exclusive)
    second = client.create_producer(topic, producer_name="p-2",
                                    access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    deadline = time.monotonic() + 10
    raised: Exception | None = None
    while raised is None and time.monotonic() < deadline:
        try:
            first.send(b"after the fence")
        except (pulsar.ProducerFenced, pulsar.AlreadyClosed) as exc:
            raised = exc
    assert isinstance(raised, (pulsar.ProducerFenced, pulsar.AlreadyClosed))
    second.send(b"the new holder writes")
