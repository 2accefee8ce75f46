"""Broker entry metadata: the stored form's prefix, read through by every entry reader, and kept
in or dropped from MESSAGE frames."""

from __future__ import annotations

import pytest
from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.commands import encode_message
from protocol.entry_metadata import (
    BrokerEntryMetadata,
    entry_start,
    has_prefix,
    parse_fields,
    parse_prefix,
    prefix,
    split_prefix,
    strip,
)
from protocol.errors import MalformedEntryError
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.metadata import (
    encode_batch_payload,
    encode_entry,
    entry_timestamp,
    iter_batch,
    parse_entry,
    parse_metadata,
    peek_dispatch,
    split_entry,
)


def _entry(payload: bytes = b"hello", **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1_000)
    for key, value in fields.items():
        setattr(md, key, value)
    return encode_entry(md, payload)


def _batch(messages: list[bytes]) -> bytes:
    payload = encode_batch_payload(
        (pb.SingleMessageMetadata(payload_size=len(m)), m) for m in messages)
    return _entry(payload, num_messages_in_batch=len(messages))


def _decode(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA and isinstance(frame, Frame)
    assert decoder.next_frame() is NEED_DATA
    return frame


def test_prefix_is_pulsars_layout_and_parses_back() -> None:
    entry = _entry()
    stored = prefix(entry, 1_700_000_000_123, 41)
    md = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=41)
    body = md.SerializeToString()
    assert stored == b"\x0e\x02" + len(body).to_bytes(4, "big") + body + entry
    assert has_prefix(stored) and not has_prefix(entry)
    assert parse_prefix(stored) == BrokerEntryMetadata(1_700_000_000_123, 41)
    assert parse_prefix(entry) is None
    assert strip(stored) == entry and strip(entry) is entry
    assert split_prefix(stored) == (stored[:6 + len(body)], entry)
    assert entry_start(stored) == 6 + len(body) and entry_start(entry) == 0


@pytest.mark.parametrize(("timestamp", "index"), [(5, None), (None, 0), (None, None), (1, 2**40)])
def test_either_field_may_be_absent(timestamp: int | None, index: int | None) -> None:
    stored = prefix(_entry(), timestamp, index)
    assert parse_prefix(stored) == BrokerEntryMetadata(timestamp, index)
    assert parse_fields(stored[6:entry_start(stored)]) == BrokerEntryMetadata(timestamp, index)


def test_entry_readers_read_through_the_prefix() -> None:
    for entry in (_entry(deliver_at_time=9_000, partition_key="k"), _batch([b"a", b"bb", b"c"])):
        stored = prefix(entry, 2_000, 3)
        assert parse_metadata(stored) == parse_metadata(entry)
        assert parse_entry(stored) == parse_entry(entry)
        assert peek_dispatch(stored) == peek_dispatch(entry)
        md, payload = split_entry(stored)
        assert (md, bytes(payload)) == (lambda m, p: (m, bytes(p)))(*split_entry(entry))
    batch = prefix(_batch([b"a", b"bb"]), None, 1)
    assert [data for _, data in iter_batch(split_entry(batch)[1], 2)] == [b"a", b"bb"]


def test_entry_timestamp_is_the_brokers_when_stored_else_the_publish_time() -> None:
    entry = _entry()
    assert entry_timestamp(entry) == 1_000
    assert entry_timestamp(prefix(entry, 5_000, 0)) == 5_000
    assert entry_timestamp(prefix(entry, None, 0)) == 1_000


@pytest.mark.parametrize("stored", [
    b"\x0e\x02\x00\x00",                                      # truncated prefix header
    b"\x0e\x02\x00\x00\x00\x09\x08\x01",                      # prefix longer than the bytes
    b"\x0e\x02\x00\x00\x00\x02\x08\x01" + b"\x00\x00\x00\x50",  # entry after it too short
])
def test_a_damaged_prefix_is_a_malformed_entry(stored: bytes) -> None:
    with pytest.raises(MalformedEntryError):
        parse_metadata(stored)
    with pytest.raises(MalformedEntryError):
        split_entry(stored)


def test_a_prefix_that_does_not_parse_is_a_malformed_entry() -> None:
    stored = b"\x0e\x02\x00\x00\x00\x02\xff\xff" + _entry()
    with pytest.raises(MalformedEntryError):
        parse_prefix(stored)
    assert parse_metadata(stored) == parse_metadata(_entry())  # the entry itself is intact


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("ack_set", [None, [3]])
def test_message_keeps_the_prefix_before_the_checksum_only_when_asked(
        checksum: bool, ack_set: list[int] | None) -> None:
    entry = _batch([b"x", b"y"])
    stored = prefix(entry, 77, 1)
    kept = _decode(encode_message(3, 10, 4, stored, ack_set=ack_set, checksum=checksum,
                                  broker_metadata=True))
    assert kept.entry == entry
    assert kept.checksum_valid is (True if checksum else None)
    assert kept.broker_entry_metadata is not None
    assert parse_fields(kept.broker_entry_metadata) == BrokerEntryMetadata(77, 1)
    assert kept.command.message.message_id.entryId == 4
    dropped = encode_message(3, 10, 4, stored, ack_set=ack_set, checksum=checksum)
    assert dropped == encode_message(3, 10, 4, entry, ack_set=ack_set, checksum=checksum)
    assert _decode(dropped).broker_entry_metadata is None


def test_message_crc_covers_the_entry_alone() -> None:
    entry = _entry()
    data = encode_message(1, 2, 3, prefix(entry, 1, 2), broker_metadata=True)
    assert data.endswith(b"\x0e\x01" + crc32c(entry).to_bytes(4, "big") + entry)


def test_message_refuses_a_prefix_behind_a_prefix() -> None:
    with pytest.raises(MalformedEntryError):
        encode_message(1, 2, 3, prefix(prefix(_entry(), 1, 2), 3, 4))
