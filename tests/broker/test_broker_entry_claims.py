"""Entries whose counts and sizes their payload cannot back are refused at publish, over the
wire: SEND_ERROR ChecksumError (the one code the C++ client fails a single message for), the
connection stays, nothing is stored or counted."""

from __future__ import annotations

from typing import Any

import pytest
from broker_rawclient import RawClient, make_batch_entry, make_entry

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
GiB = 1 << 30
TOPIC = "persistent://public/default/claims"
CHUNK = {"uuid": "raw-5", "num_chunks_from_msg": 3, "total_chunk_msg_size": 300}


def _send(seq: int, entry: bytes, num_messages: int | None = None) -> bytes:
    return C.encode_send(1, seq, entry, num_messages=num_messages)


BAD_SENDS: dict[str, Any] = {
    "zero messages in the batch": lambda seq: _send(
        seq, make_entry(b"x" * 60, sequence_id=seq, num_messages_in_batch=0)),
    "negative messages in the batch": lambda seq: _send(
        seq, make_entry(b"x" * 60, sequence_id=seq, num_messages_in_batch=-7)),
    "2**31-1 messages in the batch": lambda seq: _send(
        seq, make_entry(b"x" * 60, sequence_id=seq, num_messages_in_batch=2**31 - 1)),
    "a truncated batch": lambda seq: _send(
        seq, make_batch_entry([b"a", b"b"], sequence_id=seq)[:-12], 2),
    "a batch claiming more messages than it holds": lambda seq: _send(
        seq, make_entry(b"x" * 30, sequence_id=seq, num_messages_in_batch=50), 50),
    "LZ4 claiming 2 GiB uncompressed": lambda seq: _send(
        seq, make_entry(b"x" * 40, sequence_id=seq, compression=pb.LZ4,
                        uncompressed_size=2 * GiB)),
    "chunk 3 of 3": lambda seq: _send(seq, make_entry(b"x" * 100, sequence_id=seq, **CHUNK,
                                                      chunk_id=3)),
    "a chunk larger than its message": lambda seq: _send(
        seq, make_entry(b"x" * 100, sequence_id=seq, **{**CHUNK, "total_chunk_msg_size": 99},
                        chunk_id=0)),
    "SEND num_messages 0": lambda seq: _send(seq, make_entry(b"x", sequence_id=seq), 0),
    "SEND num_messages -1 (generic decoder)": lambda seq: _send(
        seq, make_entry(b"x", sequence_id=seq), -1),
    "SEND num_messages beyond the batch": lambda seq: _send(
        seq, make_batch_entry([b"a", b"b"], sequence_id=seq), 1000),
}


@pytest.fixture
def raw(broker: Any) -> Any:
    with RawClient(broker.service_url) as client:
        client.handshake()
        assert client.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
        yield client


@pytest.mark.parametrize("case", sorted(BAD_SENDS))
def test_an_entry_claiming_what_it_cannot_hold_is_send_error_and_the_connection_stays(
        broker: Any, raw: RawClient, case: str) -> None:
    raw.send(BAD_SENDS[case](5))
    answer = raw.recv_command()
    assert answer.type == T.SEND_ERROR, answer
    assert answer.send_error.error == ServerError.ChecksumError
    assert answer.send_error.sequence_id == 5
    raw.send(_send(6, make_batch_entry([b"a", b"b", b"c"], sequence_id=6), 3))
    answer = raw.recv_command()
    assert answer.type == T.SEND_RECEIPT and answer.send_receipt.sequence_id == 6
    # only the good batch was stored and counted
    counters = broker.call(lambda: (lambda t: (t.meters.entries_added_counter, t.meters.msg_in_counter))(
        broker.service.topics[TOPIC]))
    assert counters == (1, 3)


def test_a_chunk_without_uuid_is_stored_and_delivered_as_pulsar_does(
        broker: Any, raw: RawClient) -> None:
    """The C++ client's own suite sends a lone first chunk without uuid and expects its consumer
    to hold it (then expire it): the uuid is the consumers' business, Pulsar stores the entry."""
    assert raw.request(C.encode_subscribe(TOPIC, "s", pb.Shared, 9, 90)).type == T.SUCCESS
    raw.send(C.encode_flow(9, 10))
    chunk = make_entry(b"test-data", sequence_id=5, num_chunks_from_msg=2, chunk_id=0,
                       total_chunk_msg_size=100)
    raw.send(_send(5, chunk))
    answers = {c.type: c for c in (raw.recv_command(), raw.recv_command())}
    assert answers[T.SEND_RECEIPT].send_receipt.sequence_id == 5
    assert answers[T.MESSAGE].message.consumer_id == 9
