"""Entries, EntryInfo, deliver_at rewriting, batches and Pulsar's Key_Shared hash."""

from __future__ import annotations

import base64
import struct

import mmh3
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import commands as c
from protocol import pulsar_pb as pb
from protocol.errors import MalformedEntryError, RequestError, ServerError
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import (
    KEY_SHARED_RANGE_SIZE,
    NONE_KEY,
    EntryInfo,
    check_publish_metadata,
    encode_entry,
    entry_checksum,
    iter_batch,
    murmur3_32_hash,
    parse_entry,
    parse_metadata,
    peek_dispatch,
    rewrite_deliver_at,
    split_entry,
    sticky_key_hash,
)


def metadata(**fields: object) -> pb.MessageMetadata:
    fields.setdefault("producer_name", "standalone-0-1")
    fields.setdefault("sequence_id", 5)
    fields.setdefault("publish_time", 1_700_000_000_000)
    return pb.MessageMetadata(**fields)


def batch_payload(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    parts = []
    for single, data in messages:
        raw = single.SerializeToString()
        parts += [struct.pack(">I", len(raw)), raw, data]
    return b"".join(parts)


def test_entry_layout_is_size_metadata_payload() -> None:
    md = metadata()
    entry = encode_entry(md, b"payload")
    raw = md.SerializeToString()
    assert entry == struct.pack(">I", len(raw)) + raw + b"payload"
    raw_md, payload = split_entry(entry)
    assert raw_md == raw
    assert bytes(payload) == b"payload"


def test_plain_entry_info_has_no_delay_batch_or_keys() -> None:
    info = parse_entry(encode_entry(metadata(event_time=9, highest_sequence_id=6), b"x"))
    assert info == EntryInfo(
        publish_time=1_700_000_000_000,
        deliver_at_time=None,
        num_messages_in_batch=None,
        partition_key=None,
        ordering_key=None,
        sequence_id=5,
        producer_name="standalone-0-1",
        event_time=9,
        highest_sequence_id=6,
    )
    assert info.messages == 1
    assert info.sticky_key == NONE_KEY


def test_entry_info_reads_delay_batch_and_keys() -> None:
    entry = encode_entry(
        metadata(deliver_at_time=1_700_000_005_000, num_messages_in_batch=3, partition_key="k", ordering_key=b"o"),
        b"x",
    )
    info = parse_entry(entry)
    assert info.deliver_at_time == 1_700_000_005_000
    assert info.num_messages_in_batch == 3
    assert info.messages == 3
    assert info.partition_key == "k"
    assert info.ordering_key == b"o"
    assert info.sticky_key == b"o"


def test_batch_of_one_is_still_a_batch() -> None:
    info = parse_entry(encode_entry(metadata(num_messages_in_batch=1), b"x"))
    assert info.num_messages_in_batch == 1


def test_sticky_key_falls_back_to_partition_key_bytes() -> None:
    assert parse_entry(encode_entry(metadata(partition_key="clé"), b"")).sticky_key == "clé".encode()


def test_sticky_key_decodes_a_base64_partition_key() -> None:
    encoded = base64.b64encode(b"\x00\x01binary").decode()
    info = parse_entry(encode_entry(metadata(partition_key=encoded, partition_key_b64_encoded=True), b""))
    assert info.sticky_key == b"\x00\x01binary"


def test_entry_info_is_frozen() -> None:
    info = parse_entry(encode_entry(metadata(), b""))
    with pytest.raises(AttributeError):
        info.publish_time = 1  # type: ignore[misc]
    assert info.publish_time == 1_700_000_000_000


@pytest.mark.parametrize(
    "entry",
    [b"", b"\x00\x00", struct.pack(">I", 10) + b"short", struct.pack(">I", 3) + b"\xff\xff\xff"],
    ids=["empty", "short-size", "size-beyond-entry", "garbage-metadata"],
)
def test_malformed_entry_raises_a_request_scoped_error(entry: bytes) -> None:
    with pytest.raises(MalformedEntryError) as info:
        parse_entry(entry)
    assert isinstance(info.value, RequestError)
    assert info.value.code is ServerError.ChecksumError


def test_metadata_missing_required_fields_is_malformed() -> None:
    partial = pb.MessageMetadata(producer_name="p").SerializePartialToString()
    with pytest.raises(MalformedEntryError) as info:
        parse_entry(struct.pack(">I", len(partial)) + partial)
    assert "sequence_id" in str(info.value)


def _entry_of(md: pb.MessageMetadata) -> bytes:
    raw = md.SerializePartialToString()
    return struct.pack(">I", len(raw)) + raw + b"payload"


@pytest.mark.parametrize(
    "md",
    [
        pb.MessageMetadata(producer_name="p", publish_time=1),
        pb.MessageMetadata(sequence_id=1, publish_time=1),
        metadata(properties=[pb.KeyValue(key="a")]),
        metadata(encryption_keys=[pb.EncryptionKeys(value=b"v")]),
    ],
    ids=["no-sequence-id", "no-producer-name", "property-without-value", "encryption-key-without-key"],
)
def test_publish_check_refuses_what_parse_metadata_refuses(md: pb.MessageMetadata) -> None:
    entry = _entry_of(md)
    with pytest.raises(MalformedEntryError) as full:
        parse_metadata(entry)
    with pytest.raises(MalformedEntryError) as fast:
        check_publish_metadata(entry)
    assert str(fast.value) == str(full.value)


@pytest.mark.parametrize(
    "entry",
    [b"", b"\x00\x00", struct.pack(">I", 10) + b"short", struct.pack(">I", 3) + b"\xff\xff\xff"],
    ids=["empty", "short-size", "size-beyond-entry", "garbage-metadata"],
)
def test_publish_check_refuses_malformed_entries(entry: bytes) -> None:
    with pytest.raises(MalformedEntryError) as info:
        check_publish_metadata(entry)
    assert info.value.code is ServerError.ChecksumError


@pytest.mark.parametrize(
    ("fields", "messages", "partial"),
    [
        ({}, 1, False),
        ({"num_messages_in_batch": 1}, 1, False),
        ({"num_messages_in_batch": 7}, 7, False),
        ({"uuid": "p-1", "num_chunks_from_msg": 3, "total_chunk_msg_size": 150, "chunk_id": 0},
         1, True),
        ({"uuid": "p-1", "num_chunks_from_msg": 3, "total_chunk_msg_size": 150, "chunk_id": 2},
         1, False),
        ({"properties": [pb.KeyValue(key="a", value="b")]}, 1, False),
    ],
    ids=["plain", "batch-of-one", "batch", "first-chunk", "last-chunk", "with-properties"],
)
def test_publish_check_counts_messages_and_chunks(fields: dict[str, object], messages: int,
                                                  partial: bool) -> None:
    md, got_messages, got_partial = check_publish_metadata(
        encode_entry(metadata(**fields), b"x" * 64))
    assert (got_messages, got_partial) == (messages, partial)
    assert md == metadata(**fields)


def test_rewrite_deliver_at_uses_the_given_metadata() -> None:
    entry = encode_entry(metadata(partition_key="k"), b"body")
    md, _, _ = check_publish_metadata(entry)
    rewritten = rewrite_deliver_at(entry, 99, md)
    assert rewritten == rewrite_deliver_at(entry, 99)
    assert parse_entry(rewritten).deliver_at_time == 99


@pytest.mark.parametrize(
    "fields",
    [{}, {"num_messages_in_batch": 9}, {"deliver_at_time": 1_700_000_001_000},
     {"num_messages_in_batch": 3, "deliver_at_time": 5, "partition_key": "k"}],
    ids=["plain", "batch", "delayed", "delayed-batch-with-key"],
)
def test_dispatch_peek_agrees_with_entry_info(fields: dict[str, object]) -> None:
    entry = encode_entry(metadata(**fields), b"body")
    info = parse_entry(entry)
    assert peek_dispatch(entry) == (info.messages, info.deliver_at_time)


def test_dispatch_peek_refuses_unparsable_metadata() -> None:
    with pytest.raises(MalformedEntryError):
        peek_dispatch(struct.pack(">I", 3) + b"\xff\xff\xff")


def test_metadata_with_invalid_utf8_key_is_malformed() -> None:
    raw = metadata(partition_key="k").SerializeToString().replace(b"\x32\x01k", b"\x32\x01\xff")
    with pytest.raises(MalformedEntryError) as info:
        parse_entry(struct.pack(">I", len(raw)) + raw)
    assert "UTF-8" in str(info.value)


def test_rewrite_deliver_at_changes_only_the_delivery_time() -> None:
    original = encode_entry(metadata(partition_key="k", deliver_at_time=10, properties=[pb.KeyValue(key="a", value="b")]), b"body")
    rewritten = rewrite_deliver_at(original, 1_700_000_060_000)
    before, after = parse_metadata(original), parse_metadata(rewritten)
    assert after.deliver_at_time == 1_700_000_060_000
    after.deliver_at_time = before.deliver_at_time
    assert after == before
    assert bytes(split_entry(rewritten)[1]) == b"body"
    assert entry_checksum(rewritten) != entry_checksum(original)


def test_rewrite_deliver_at_adds_the_field_when_absent() -> None:
    rewritten = rewrite_deliver_at(encode_entry(metadata(), b"body"), 42)
    assert parse_entry(rewritten).deliver_at_time == 42


def test_rewrite_deliver_at_keeps_unknown_fields() -> None:
    md_bytes = metadata().SerializeToString() + b"\xf8\x01\x07"  # field 31 (varint), unknown to us
    entry = struct.pack(">I", len(md_bytes)) + md_bytes + b"p"
    rewritten = rewrite_deliver_at(entry, 99)
    assert b"\xf8\x01\x07" in split_entry(rewritten)[0]


def test_message_for_a_rewritten_entry_carries_the_new_checksum() -> None:
    rewritten = rewrite_deliver_at(encode_entry(metadata(), b"body"), 42)
    decoder = FrameDecoder()
    decoder.receive_data(c.encode_message(1, 2, 3, rewritten))
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert frame.checksum_valid is True
    assert frame.entry == rewritten


def test_entry_checksum_is_crc32c_castagnoli() -> None:
    assert entry_checksum(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert entry_checksum(b"abc") == crc32c(b"abc")


def test_iter_batch_yields_every_message_of_a_batch_payload() -> None:
    messages = [
        (pb.SingleMessageMetadata(payload_size=3, partition_key="a", sequence_id=1), b"one"),
        (pb.SingleMessageMetadata(payload_size=0, ordering_key=b"o"), b""),
        (pb.SingleMessageMetadata(payload_size=5, properties=[pb.KeyValue(key="k", value="v")]), b"three"),
    ]
    decoded = list(iter_batch(batch_payload(messages), 3))
    assert [(single, data) for single, data in decoded] == messages


def test_iter_batch_over_an_entry_payload_view() -> None:
    payload = batch_payload([(pb.SingleMessageMetadata(payload_size=2), b"hi")] * 2)
    entry = encode_entry(metadata(num_messages_in_batch=2), payload)
    info = parse_entry(entry)
    assert info.num_messages_in_batch is not None
    assert [data for _, data in iter_batch(split_entry(entry)[1], info.num_messages_in_batch)] == [b"hi", b"hi"]


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        (b"", 1),
        (struct.pack(">I", 50) + b"x", 1),
        (struct.pack(">I", 2) + pb.SingleMessageMetadata(payload_size=9).SerializeToString()[:2], 1),
        (batch_payload([(pb.SingleMessageMetadata(payload_size=9), b"short")]), 1),
        (batch_payload([(pb.SingleMessageMetadata(payload_size=1), b"x")]), 2),
        (struct.pack(">I", 2) + b"\x10\x01", 1),  # no payload_size
    ],
    ids=["empty", "size-beyond", "metadata-garbage", "data-beyond", "fewer-than-count", "no-payload-size"],
)
def test_malformed_batch_raises(payload: bytes, count: int) -> None:
    with pytest.raises(MalformedEntryError):
        list(iter_batch(payload, count))


# --------------------------------------------------------------------------- Key_Shared hash


def java_murmur3_32(data: bytes) -> int:
    """An independent transcription of Pulsar's Murmur3_32Hash.makeHash (seed 0, & MAX_VALUE)."""

    def mix_k1(k1: int) -> int:
        k1 = (k1 * 0xCC9E2D51) & 0xFFFFFFFF
        k1 = ((k1 << 15) | (k1 >> 17)) & 0xFFFFFFFF
        return (k1 * 0x1B873593) & 0xFFFFFFFF

    h1 = 0
    full = len(data) - len(data) % 4
    for i in range(0, full, 4):
        h1 ^= mix_k1(int.from_bytes(data[i : i + 4], "little"))
        h1 = ((h1 << 13) | (h1 >> 19)) & 0xFFFFFFFF
        h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    k1 = 0
    for i, byte in enumerate(data[full:]):
        k1 ^= byte << (i * 8)
    h1 ^= mix_k1(k1)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 & 0x7FFFFFFF


def test_murmur3_known_vectors() -> None:
    assert murmur3_32_hash(b"") == 0
    assert murmur3_32_hash(b"hello") == 0x248BFA47 & 0x7FFFFFFF
    assert murmur3_32_hash(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723 & 0x7FFFFFFF


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64))
def test_sticky_key_hash_matches_pulsars_formula(key: bytes) -> None:
    assert murmur3_32_hash(key) == java_murmur3_32(key)
    assert murmur3_32_hash(key) == mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF
    slot = sticky_key_hash(key)
    assert slot == java_murmur3_32(key) % 65536
    assert 0 <= slot < KEY_SHARED_RANGE_SIZE


def test_key_shared_range_size_is_pulsars_default() -> None:
    assert KEY_SHARED_RANGE_SIZE == 2 << 15


def test_parse_entry_sets_every_field_of_entry_info() -> None:
    import dataclasses

    info = parse_entry(encode_entry(metadata(partition_key="k"), b""))
    values = {field.name: getattr(info, field.name) for field in dataclasses.fields(EntryInfo)}
    assert EntryInfo(**values) == info
