"""What an entry's counts and sizes may claim (protocol.entry_shape), refused alike by the full
publish check and the protobuf-free scan."""

from __future__ import annotations

import pytest

from protocol import pulsar_pb as pb
from protocol.entry_shape import (
    MAX_EXPANSION,
    MIN_BATCHED_MESSAGE_BYTES,
    check_send_messages,
    entry_shape_error,
)
from protocol.errors import MalformedEntryError, ServerError
from protocol.limits import MAX_MESSAGE_SIZE
from protocol.metadata import check_publish_metadata, encode_batch_payload, encode_entry
from protocol.metadata_scan import scan_publish_metadata

GiB = 1 << 30
CHUNK = {"uuid": "standalone-0-7-41", "num_chunks_from_msg": 3, "total_chunk_msg_size": 250}


def entry(payload: bytes = b"x" * 100, **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name="standalone-0-7", sequence_id=41,
                            publish_time=1_760_000_000_123)
    for name, value in fields.items():
        setattr(md, name, value)
    return encode_entry(md, payload)


REFUSED: dict[str, tuple[bytes, str]] = {
    "zero messages": (entry(num_messages_in_batch=0), "num_messages_in_batch 0 is below 1"),
    "negative messages": (entry(num_messages_in_batch=-5), "num_messages_in_batch -5 is below 1"),
    "2**31-1 messages": (entry(num_messages_in_batch=2**31 - 1), "exceeds what a batch of 100"),
    "more messages than the payload holds": (
        entry(b"x" * 59, num_messages_in_batch=10), "num_messages_in_batch 10 exceeds"),
    "truncated batch payload": (
        entry(encode_batch_payload([(pb.SingleMessageMetadata(payload_size=1), b"a")] * 3),
              num_messages_in_batch=100), "num_messages_in_batch 100 exceeds"),
    "LZ4 claiming 2 GiB": (entry(compression=pb.LZ4, uncompressed_size=2 * GiB),
                           "uncompressed_size 2147483648 exceeds"),
    "ZSTD claiming 4 GiB - 1": (entry(compression=pb.ZSTD, uncompressed_size=2**32 - 1),
                                "uncompressed_size 4294967295 exceeds"),
    "compressed batch of more messages than its uncompressed size holds": (
        entry(compression=pb.LZ4, uncompressed_size=600, num_messages_in_batch=101),
        "num_messages_in_batch 101 exceeds what a batch of 600"),
    "chunk id beyond the chunks": (entry(**CHUNK, chunk_id=3),
                                   "chunk_id 3 is not below num_chunks_from_msg 3"),
    "negative chunk id": (entry(**CHUNK, chunk_id=-1), "chunk_id -1 is not below"),
    "no chunks": (entry(uuid="u", num_chunks_from_msg=0, chunk_id=0, total_chunk_msg_size=100),
                  "num_chunks_from_msg 0 is below 1"),
    "chunk id without num chunks": (entry(uuid="u", chunk_id=0, total_chunk_msg_size=100),
                                    "num_chunks_from_msg 0 is below 1"),
    "chunk total below the chunk": (entry(**{**CHUNK, "total_chunk_msg_size": 99}, chunk_id=0),
                                    "total_chunk_msg_size 99 does not fit 3 chunks"),
    "chunk total beyond its chunks": (
        entry(**{**CHUNK, "total_chunk_msg_size": 3 * MAX_MESSAGE_SIZE + 1}, chunk_id=0),
        "does not fit 3 chunks"),
    "compressed chunk claiming more than its message can hold": (
        entry(**CHUNK, chunk_id=0, compression=pb.LZ4, uncompressed_size=255 * 250 + 1),
        "exceeds what 250 compressed bytes can hold"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_claims_the_entry_cannot_back_are_refused_by_check_and_declined_by_scan(
        case: str) -> None:
    data, reason = REFUSED[case]
    assert scan_publish_metadata(data) is None
    with pytest.raises(MalformedEntryError) as refused:
        check_publish_metadata(data)
    assert reason in str(refused.value)
    assert refused.value.code is ServerError.ChecksumError  # the client fails that message


ACCEPTED: dict[str, tuple[bytes, int, bool]] = {
    "batch filling its payload": (entry(b"x" * 60, num_messages_in_batch=10), 10, False),
    "real batch": (entry(encode_batch_payload(
        [(pb.SingleMessageMetadata(payload_size=0), b"")] * 50), num_messages_in_batch=50),
        50, False),
    "LZ4 at its largest expansion": (
        entry(compression=pb.LZ4, uncompressed_size=255 * 100), 1, False),
    "ZSTD at its largest expansion": (
        entry(compression=pb.ZSTD, uncompressed_size=32768 * 100), 1, False),
    "compressed batch": (entry(compression=pb.ZLIB, uncompressed_size=600,
                               num_messages_in_batch=100), 100, False),
    "first chunk": (entry(**CHUNK, chunk_id=0), 1, True),
    "last chunk": (entry(b"x" * 50, **CHUNK, chunk_id=2), 1, False),
    "chunk without uuid (Pulsar stores it)": (
        entry(num_chunks_from_msg=3, chunk_id=0, total_chunk_msg_size=250), 1, True),
    "compressed chunk of a large message": (
        entry(**CHUNK, chunk_id=1, compression=pb.LZ4, uncompressed_size=255 * 250), 1, True),
    "uncompressed_size of an uncompressed entry": (entry(uncompressed_size=2**32 - 1), 1, False),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_claims_within_the_bounds_are_accepted_alike(case: str) -> None:
    data, messages, partial = ACCEPTED[case]
    _, checked_messages, checked_partial = check_publish_metadata(data)
    assert (checked_messages, checked_partial) == (messages, partial)
    assert scan_publish_metadata(data) == (messages, partial, None)


def test_a_chunk_total_is_bounded_by_the_configured_max_message_size() -> None:
    data = entry(**{**CHUNK, "total_chunk_msg_size": 3 * 1000}, chunk_id=0)
    assert scan_publish_metadata(data, 1000) == (1, True, None)
    check_publish_metadata(data, 1000)
    assert scan_publish_metadata(data, 999) is None
    with pytest.raises(MalformedEntryError, match="each at most 999"):
        check_publish_metadata(data, 999)


def test_an_unknown_compression_value_is_left_to_protobuf() -> None:
    # 0x40 0x09: compression = 9, unknown to protobuf, which keeps the earlier LZ4 (0x40 0x01)
    raw = b"\x0a\x01p\x10\x01\x18\x02\x40\x01\x48\x80\x80\x80\x80\x08\x40\x09"
    data = len(raw).to_bytes(4, "big") + raw + b"x" * 100
    assert scan_publish_metadata(data) is None
    with pytest.raises(MalformedEntryError, match="uncompressed_size 2147483648 exceeds"):
        check_publish_metadata(data)


def test_bounds_follow_the_codecs_and_the_smallest_batched_message() -> None:
    smallest = (0).to_bytes(4, "big") + pb.SingleMessageMetadata(payload_size=0).SerializeToString()
    assert len(smallest) == MIN_BATCHED_MESSAGE_BYTES
    assert MAX_EXPANSION[pb.NONE] == 1 and len(MAX_EXPANSION) == len(pb.CompressionType.keys())
    assert entry_shape_error(10, None, 0, 0, None, None, 0, MAX_MESSAGE_SIZE) is None


@pytest.mark.parametrize(("num_messages", "messages", "ok"), [
    (1, 1, True), (1, 100, True), (100, 100, True), (0, 1, False), (-1, 1, False),
    (101, 100, False), (2, 1, False)])
def test_a_send_counts_between_one_and_the_entry_messages(
        num_messages: int, messages: int, ok: bool) -> None:
    if ok:
        check_send_messages(num_messages, messages)
    else:
        with pytest.raises(MalformedEntryError, match=f"num_messages {num_messages} of the SEND"):
            check_send_messages(num_messages, messages)
