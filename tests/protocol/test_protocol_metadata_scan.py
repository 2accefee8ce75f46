"""The protobuf-free publish check (protocol.metadata_scan) against check_publish_metadata."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling import examples

from protocol import pulsar_pb as pb
from protocol.errors import MalformedEntryError
from protocol.metadata import check_publish_metadata, encode_entry
from protocol.metadata_scan import int32_value, int64_value
from protocol.metadata_scan import scan_publish_metadata as scan_raw

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
UINT32 = st.integers(min_value=0, max_value=2**32 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
SMALL_OR_ANY_INT32 = st.one_of(st.integers(min_value=-2, max_value=5), INT32)
SMALL_OR_ANY_SIZE = st.one_of(st.integers(min_value=-2, max_value=3_000), INT32)
SMALL_OR_ANY_UINT32 = st.one_of(st.integers(min_value=0, max_value=30_000), UINT32)
PAYLOAD = st.binary(max_size=120)
TEXT = st.text(max_size=200)
BLOB = st.binary(max_size=200)

OPTIONAL_FIELDS: dict[str, st.SearchStrategy[object]] = {
    "replicated_from": TEXT,
    "partition_key": TEXT,
    "compression": st.sampled_from([0, 1, 2, 3, 4]),
    "uncompressed_size": SMALL_OR_ANY_UINT32,
    "num_messages_in_batch": SMALL_OR_ANY_INT32,
    "event_time": UINT64,
    "encryption_algo": TEXT,
    "encryption_param": BLOB,
    "schema_version": BLOB,
    "partition_key_b64_encoded": st.booleans(),
    "ordering_key": BLOB,
    "deliver_at_time": INT64,
    "marker_type": INT32,
    "txnid_least_bits": UINT64,
    "txnid_most_bits": UINT64,
    "highest_sequence_id": UINT64,
    "null_value": st.booleans(),
    "uuid": TEXT,
    "num_chunks_from_msg": SMALL_OR_ANY_INT32,
    "total_chunk_msg_size": SMALL_OR_ANY_SIZE,
    "chunk_id": SMALL_OR_ANY_INT32,
    "null_partition_key": st.booleans(),
}


def scan_publish_metadata(entry: bytes, *limit: int) -> tuple[int, bool, int | None] | None:
    """The scan's verdict with its ``deliver_at_time`` bytes read as the int64 upb reads."""
    scanned = scan_raw(entry, *limit)
    if scanned is None:
        return None
    messages, partial, delayed = scanned
    return messages, partial, None if delayed is None else int64_value(delayed)


def publish_verdict(entry: bytes) -> tuple[int, bool, int | None]:
    """What the fast path must return: check_publish_metadata's verdict and the deliver time
    upb reads (may raise)."""
    md, messages, partial = check_publish_metadata(entry)
    return messages, partial, md.deliver_at_time if md.HasField("deliver_at_time") else None


@st.composite
def metadata_messages(draw: st.DrawFn, *, complete: bool = True) -> pb.MessageMetadata:
    md = pb.MessageMetadata()
    required = {"producer_name": TEXT, "sequence_id": UINT64, "publish_time": UINT64}
    for name, strategy in required.items():
        if complete or draw(st.booleans()):
            setattr(md, name, draw(strategy))
    for name, strategy in OPTIONAL_FIELDS.items():
        if draw(st.booleans()):
            setattr(md, name, draw(strategy))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        prop = md.properties.add()
        if complete or draw(st.booleans()):
            prop.key = draw(TEXT)
        if complete or draw(st.booleans()):
            prop.value = draw(TEXT)
    md.replicate_to.extend(draw(st.lists(TEXT, max_size=3)))
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        keys = md.encryption_keys.add()
        keys.key = draw(TEXT)
        keys.value = draw(BLOB)
    return md


def entry_of(raw_metadata: bytes, payload: bytes = b"payload") -> bytes:
    return struct.pack(">I", len(raw_metadata)) + raw_metadata + payload


@settings(max_examples=examples(full=3000, sample=500), deadline=None)
@given(md=metadata_messages(), payload=PAYLOAD)
def test_scan_accepts_every_serialized_metadata_the_check_accepts_without_encryption_keys(
        md: pb.MessageMetadata, payload: bytes) -> None:
    entry = encode_entry(md, payload)
    scanned = scan_publish_metadata(entry)
    try:
        verdict = publish_verdict(entry)
    except MalformedEntryError:  # counts or sizes the payload cannot back: refused
        assert scanned is None
        return
    if md.encryption_keys:
        assert scanned is None or scanned == verdict
    else:
        assert scanned == verdict


@settings(max_examples=examples(full=1500, sample=300), deadline=None)
@given(md=metadata_messages(complete=False))
def test_scan_never_accepts_metadata_missing_a_required_field(md: pb.MessageMetadata) -> None:
    entry = entry_of(md.SerializePartialToString())
    scanned = scan_publish_metadata(entry)
    if scanned is None:
        return
    assert md.IsInitialized()
    assert scanned == publish_verdict(entry)


MUTATION = st.tuples(
    st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=255),
)


def mutate(raw: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(raw)
    for kind, where, value in mutations:
        at = where % (len(data) + 1)
        if kind == "insert":
            data.insert(at, value)
        elif not data:
            continue
        elif kind == "truncate":
            del data[at:]
        elif kind == "delete":
            del data[at % len(data)]
        elif kind == "flip":
            data[at % len(data)] ^= 1 << (value % 8)
        else:
            data[at % len(data)] = value
    return bytes(data)


@settings(max_examples=examples(full=4000, sample=600), deadline=None)
@given(md=metadata_messages(), mutations=st.lists(MUTATION, min_size=1, max_size=4),
       declared_size_delta=st.sampled_from([0, 0, 0, 1, -1, 5]))
def test_scan_never_accepts_what_check_publish_metadata_refuses(
        md: pb.MessageMetadata, mutations: list[tuple[str, int, int]],
        declared_size_delta: int) -> None:
    raw = mutate(md.SerializeToString(), mutations)
    size = max(0, len(raw) + declared_size_delta)
    entry = struct.pack(">I", size) + raw + b"xy"
    scanned = scan_publish_metadata(entry)
    if scanned is None:
        return
    assert scanned == publish_verdict(entry)  # raises MalformedEntryError if the scan was wrong


@settings(max_examples=examples(full=2000, sample=400), deadline=None)
@given(body=st.binary(max_size=60))
def test_scan_of_random_bytes_agrees_or_declines(body: bytes) -> None:
    for raw in (body, b"\x0a\x01p\x10\x01\x18\x02" + body):
        entry = entry_of(raw)
        scanned = scan_publish_metadata(entry)
        if scanned is not None:
            assert scanned == publish_verdict(entry)


def official_client_layouts() -> dict[str, pb.MessageMetadata]:
    """MessageMetadata as pulsar-client-cpp 3.x (the Python client's core) fills it: the
    required fields from ProducerImpl::setMessageMetadata, then what the message builder or the
    batch container adds; protobuf serializes them in field-number order."""

    def base(**fields: object) -> pb.MessageMetadata:
        md = pb.MessageMetadata(producer_name="standalone-0-7", sequence_id=41,
                                publish_time=1_760_000_000_123)
        for name, value in fields.items():
            if name == "properties":
                md.properties.extend(value)  # type: ignore[arg-type]
            elif name == "replicate_to":
                md.replicate_to.extend(value)  # type: ignore[arg-type]
            else:
                setattr(md, name, value)
        return md

    props = [pb.KeyValue(key="k1", value="v1"), pb.KeyValue(key="trace", value="x" * 300)]
    return {
        "plain": base(),
        "plain_with_schema_version": base(schema_version=b"\x00" * 7 + b"\x01"),
        "keyed": base(partition_key="user-42"),
        "ordering_key": base(partition_key="user-42", ordering_key=b"order-1"),
        "event_time": base(event_time=1_760_000_000_000),
        "properties": base(properties=props),
        "delayed": base(deliver_at_time=1_760_000_060_123),
        "delayed_keyed_with_properties": base(properties=props[:1], partition_key="k",
                                              deliver_at_time=1_760_000_060_123),
        "compressed": base(compression=pb.LZ4, uncompressed_size=1024),
        "batch": base(num_messages_in_batch=100),
        "keyed_batch": base(partition_key="user-42", num_messages_in_batch=3),
        "compressed_batch": base(compression=pb.ZSTD, uncompressed_size=65536,
                                 num_messages_in_batch=1000),
        "replicated_batch": base(replicate_to=["r1", "r2"], num_messages_in_batch=2),
        "first_chunk": base(uuid="standalone-0-7-41", num_chunks_from_msg=3,
                            total_chunk_msg_size=12_000_000, chunk_id=0),
        "last_chunk": base(uuid="standalone-0-7-41", num_chunks_from_msg=3,
                           total_chunk_msg_size=12_000_000, chunk_id=2),
        "null_value": base(null_value=True, partition_key="tombstone"),
    }


@pytest.mark.parametrize("name", sorted(official_client_layouts()))
def test_scan_accepts_the_official_client_layouts(name: str) -> None:
    entry = encode_entry(official_client_layouts()[name], b"x" * 1024)
    scanned = scan_publish_metadata(entry)
    assert scanned is not None
    assert scanned == publish_verdict(entry)


def test_scan_reads_batch_size_chunk_and_delay() -> None:
    layouts = official_client_layouts()
    payload = b"x" * 1024
    assert scan_publish_metadata(encode_entry(layouts["plain"], b"")) == (1, False, None)
    assert scan_publish_metadata(encode_entry(layouts["compressed_batch"], payload)) == (
        1000, False, None)
    assert scan_publish_metadata(encode_entry(layouts["first_chunk"], payload)) == (
        1, True, None)
    assert scan_publish_metadata(encode_entry(layouts["last_chunk"], payload)) == (
        1, False, None)
    assert scan_publish_metadata(encode_entry(layouts["delayed"], b"")) == (
        1, False, 1_760_000_060_123)


def test_scan_keeps_the_last_value_of_a_repeated_scalar_as_protobuf_does() -> None:
    # num_messages_in_batch twice, on both sides of a partition_key: protobuf keeps the last
    raw = b"\x0a\x01p\x10\x01\x18\x02\x58\x05\x32\x01k\x58\x07"
    assert scan_publish_metadata(entry_of(raw, b"x" * 42)) == (7, False, None)
    assert publish_verdict(entry_of(raw, b"x" * 42)) == (7, False, None)
    # 7 messages need 42 bytes at least: one byte less and both refuse
    assert scan_publish_metadata(entry_of(raw, b"x" * 41)) is None
    with pytest.raises(MalformedEntryError):
        publish_verdict(entry_of(raw, b"x" * 41))


def test_scan_reads_negative_int32_as_protobuf_does() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2,
                            total_chunk_msg_size=-3)  # not a chunk: not read
    entry = encode_entry(md, b"")
    assert scan_publish_metadata(entry) == (1, False, None)
    assert publish_verdict(entry) == (1, False, None)
    refused = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2,
                                 num_messages_in_batch=-3, num_chunks_from_msg=-1, chunk_id=-5)
    assert scan_publish_metadata(encode_entry(refused, b"x" * 100)) is None
    with pytest.raises(MalformedEntryError, match="num_chunks_from_msg -1 is below 1"):
        publish_verdict(encode_entry(refused, b"x" * 100))


@pytest.mark.parametrize("at", [0, 1, 1_760_000_060_123, 2**56, 2**63 - 1, -1, -(2**63)])
def test_scan_reads_deliver_at_time_as_int64_as_protobuf_does(at: int) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, deliver_at_time=at)
    entry = encode_entry(md, b"x")
    assert scan_publish_metadata(entry) == (1, False, at) == publish_verdict(entry)


def test_six_byte_varints_decode_as_protobuf_reads_them() -> None:
    """The two-lanes-at-a-time decode of a 6-byte varint (every time in epoch ms from 2**35 to
    2**42) against upb: the bounds, every 7-bit group all ones and all zeros, random values,
    and non-canonical bytes (a final group of 0 is not a 6-byte varint protoc writes, but it is
    decoded alike)."""
    import random

    from protocol.metadata_scan import varint6_value

    rnd = random.Random(41)
    values = [2**35, 2**42 - 1, 1_760_000_060_123] + [rnd.randrange(2**35, 2**42)
                                                      for _ in range(3000)]
    values += [sum(0x7F << (7 * g) for g in range(6) if mask >> g & 1) | 2**35
               for mask in range(64)]
    for at in values:
        md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2,
                                deliver_at_time=at)
        raw = md.SerializeToString()
        varint = raw[raw.index(b"\x98\x01") + 2:]
        assert len(varint) == 6
        assert varint6_value(varint) == at == int64_value(varint)
    for _ in range(2000):   # any 6 bytes of a complete varint: five with the high bit, one without
        varint = bytes([rnd.randrange(0x80, 0x100) for _ in range(5)] + [rnd.randrange(0x80)])
        expected = sum((b & 0x7F) << (7 * i) for i, b in enumerate(varint))
        assert varint6_value(varint) == expected == int64_value(varint)


@pytest.mark.parametrize("raw", [
    b"",  # nothing: every required field missing
    b"\x0a\x01p\x10\x01",  # publish_time missing
    b"\x0a\x01p\x18\x02",  # sequence_id missing
    b"\x0a\x01p\x10\x01\x18\x02\x22\x03\x0a\x01k",  # a property without its value
    b"\x0a\x01p\x10\x01\x18\x02\x32\x05ab",  # partition_key longer than the metadata
    b"\x0a\x01p\x10\x01\x18\x02\x58",  # a truncated varint
])
def test_scan_declines_metadata_check_publish_metadata_refuses(raw: bytes) -> None:
    assert scan_publish_metadata(entry_of(raw)) is None
    with pytest.raises(MalformedEntryError) as caught:
        check_publish_metadata(entry_of(raw))
    assert "metadata" in str(caught.value)


@pytest.mark.parametrize("entry", [b"", b"\x00\x00", b"\x00\x00\x00\x09\x0a\x01p", b"\x00\x00\x00"])
def test_scan_declines_an_entry_whose_metadata_size_is_wrong(entry: bytes) -> None:
    assert scan_publish_metadata(entry) is None


@given(value=INT32)
def test_int32_value_reads_protobuf_int32_varints(value: int) -> None:
    raw = pb.MessageMetadata(num_messages_in_batch=value).SerializePartialToString()
    assert raw[0] == 0x58
    assert int32_value(raw[1:]) == value
