"""The hot loops' C twins against their pure-Python references (protocol/send_accel.py).

Both implementations get the same random, mutated and truncated bytes; their results must be
identical: the SendFrames taken and the position reached, the plain-message verdict, and, through
the whole FrameDecoder, the frames decoded and the connection-fatal error raised (type and text).
A run of MESSAGE frames to one consumer is the same bytes from either, with every large entry
a buffer of its own (the buffers the reference's make once coalesced); the dispatcher's peek at
an entry's batch size and deliver time gives the same answer or the same error; the publish
check's metadata scan gives the same result, and walks the usual delayed, keyed and batched
layouts itself.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling import examples

from protocol import commands as c
from protocol import entry_metadata, send_accel
from protocol import frames as frames_module
from protocol import pulsar_pb as pb
from protocol.entry_shape import MIN_BATCHED_MESSAGE_BYTES
from protocol.frames import Frame, FrameDecoder, UnknownCommand
from protocol.framing import BY_REFERENCE_BYTES, coalesce, encode_payload_command
from protocol.hot_commands import encode_message_run_py, reference_message
from protocol.metadata import encode_entry
from protocol.metadata import peek_dispatch as peek_dispatch_py
from protocol.metadata_scan import SINGLE
from protocol.metadata_scan import scan_publish_metadata as scan_publish_metadata_py
from protocol.send_accel import decode_sends_py, plain_metadata_py
from protocol.send_path import SendFrame, declined_send

accel = pytest.importorskip("protocol._send_accel",
                            reason="built without a C compiler: the reference runs alone")

T = pb.BaseCommand


def decode_sends_c(buf: bytes | bytearray, pos: int, max_frame_size: int,
                   out: list[SendFrame]) -> int:
    result: int = accel.decode_sends(SendFrame, crc32c, buf, pos, max_frame_size, out)
    return result


def plain_metadata_c(entry: bytes) -> bool:
    result: bool = accel.plain_metadata(entry)
    return result


def encode_message_run_c(consumer_id: int, partition: int | None,
                         positions: list[tuple[int, int]], entries: list[bytes]) -> list[bytes]:
    result: list[bytes] = accel.encode_message_run(crc32c, BY_REFERENCE_BYTES, consumer_id,
                                                   partition, positions, entries)
    return result


u64 = st.one_of(
    st.integers(min_value=0, max_value=20_000),
    st.sampled_from([127, 128, 16383, 16384, 2**21, 2**28, 2**56 - 1, 2**56, 2**63 - 1, 2**63,
                     2**64 - 1]),
    st.integers(min_value=0, max_value=2**64 - 1),
)
i32 = st.one_of(st.integers(min_value=-2, max_value=300),
                st.sampled_from([2**28 - 1, 2**28, 2**31 - 1]))
send_fields = st.fixed_dictionaries(
    {"producer_id": u64, "sequence_id": u64},
    optional={
        "num_messages": st.one_of(i32, st.sampled_from([2**21 - 1, 2**21, 2**28 - 1, 2**28])),
        "txnid_least_bits": st.sampled_from([0, 1, 2**40]),
        "txnid_most_bits": st.sampled_from([0, 5]),
        "highest_sequence_id": u64,
        "is_chunk": st.booleans(),
        "marker": st.booleans(),
    },
)
metadata_fields = st.fixed_dictionaries(
    {"producer_name": st.text(max_size=200), "sequence_id": u64, "publish_time": u64},
    optional={
        "num_messages_in_batch": i32,
        "deliver_at_time": st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "event_time": u64,
        "partition_key": st.text(max_size=5),
        "highest_sequence_id": u64,
        "compression": st.sampled_from([0, 1, 2, 3, 4]),
        "uncompressed_size": st.integers(min_value=0, max_value=2**32 - 1),
        "marker_type": i32,
        "null_value": st.booleans(),
        "chunk_id": i32,
        "num_chunks_from_msg": i32,
        "txnid_least_bits": u64,
    },
)
# Near the plain layout: the fields the scan reads past, and at most one it does not.
near_plain_fields = st.fixed_dictionaries(
    {"producer_name": st.text(max_size=200), "sequence_id": u64, "publish_time": u64},
    optional={"event_time": u64, "highest_sequence_id": u64, "marker_type": i32,
              "null_value": st.booleans(), "txnid_least_bits": u64, "txnid_most_bits": u64,
              "partition_key_b64_encoded": st.booleans(), "null_partition_key": st.booleans()},
)
one_other_field = st.one_of(
    st.just({}),
    st.builds(dict, num_messages_in_batch=st.integers(0, 3)),
    st.builds(dict, deliver_at_time=st.integers(0, 3)),
    st.builds(dict, compression=st.integers(0, 1)),
    st.builds(dict, uncompressed_size=st.integers(0, 3)),
    st.builds(dict, chunk_id=st.integers(0, 1)),
    st.builds(dict, num_chunks_from_msg=st.integers(0, 1)),
    st.builds(dict, total_chunk_msg_size=st.integers(0, 1)),
    st.builds(dict, partition_key=st.text(max_size=2)),
    st.builds(dict, schema_version=st.binary(max_size=2)),
)
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


@st.composite
def entries(draw: st.DrawFn) -> bytes:
    md = pb.MessageMetadata(**draw(metadata_fields))
    if draw(st.booleans()):
        md.properties.add(key=draw(st.text(max_size=4)), value=draw(st.text(max_size=4)))
    return encode_entry(md, draw(st.binary(max_size=64)))


@st.composite
def send_frames(draw: st.DrawFn) -> bytes:
    """A SEND frame, usual or not, whole, with its checksum corrupted, or mutated anywhere."""
    entry = draw(entries())
    frame = encode_payload_command(T(type=T.SEND, send=pb.CommandSend(**draw(send_fields))),
                                   entry, checksum=draw(st.integers(0, 9)) > 0)
    how = draw(st.integers(0, 3))
    if how == 1:
        frame = frame[:-1] + bytes([frame[-1] ^ 0x55])
    elif how == 2:
        frame = mutate(frame, draw(st.lists(MUTATION, min_size=1, max_size=3)))
    return frame


other_frames = st.one_of(
    st.builds(c.encode_flow, st.integers(0, 2**40), st.integers(0, 2**32 - 1)),
    st.just(c.encode_ping()),
    st.binary(max_size=24),
)
streams = st.lists(st.one_of(send_frames(), send_frames(), send_frames(), other_frames),
                   min_size=1, max_size=8).map(b"".join)
max_sizes = st.one_of(st.just(5 * 1024 * 1024 + 10 * 1024), st.integers(0, 400))


@settings(max_examples=examples(full=3000, sample=600), deadline=None)
@given(stream=streams, max_size=max_sizes, data=st.data())
def test_decode_sends_takes_the_same_frames_as_the_reference(
        stream: bytes, max_size: int, data: st.DataObject) -> None:
    pos = data.draw(st.integers(0, len(stream) + 2))
    for buf in (stream, bytearray(stream)):
        got: list[SendFrame] = []
        want: list[SendFrame] = []
        end = decode_sends_c(buf, pos, max_size, got)
        assert end == decode_sends_py(buf, pos, max_size, want)
        assert got == want
        assert [type(f) for f in got] == [SendFrame] * len(want)
        assert [type(f.entry) for f in got] == [bytes] * len(want)


@settings(max_examples=examples(full=1000, sample=300), deadline=None)
@given(frames=st.lists(send_frames(), min_size=1, max_size=6))
def test_decode_sends_takes_every_usual_send_in_a_row(frames: list[bytes]) -> None:
    usual = [f for f in frames if f and decode_sends_py(f, 0, 1 << 30, []) == len(f)]
    stream = b"".join(usual)
    got: list[SendFrame] = []
    assert decode_sends_c(stream, 0, 1 << 30, got) == len(stream)
    assert len(got) == len(usual)


@settings(max_examples=examples(full=4000, sample=800), deadline=None)
@given(entry=entries(), mutations=st.lists(MUTATION, max_size=4),
       declared_delta=st.sampled_from([0, 0, 0, 1, -1, 7, -300]))
def test_plain_metadata_agrees_with_the_scan(
        entry: bytes, mutations: list[tuple[str, int, int]], declared_delta: int) -> None:
    (size,) = struct.unpack_from(">I", entry)
    body = mutate(entry[4:], mutations)
    entry = struct.pack(">I", max(0, min(2**32 - 1, size + declared_delta))) + body
    assert plain_metadata_c(entry) is plain_metadata_py(entry)


@settings(max_examples=examples(full=2000, sample=500), deadline=None)
@given(fields=near_plain_fields, other=one_other_field, payload=st.binary(max_size=8))
def test_plain_metadata_agrees_with_the_scan_near_the_plain_layout(
        fields: dict[str, object], other: dict[str, object], payload: bytes) -> None:
    entry = encode_entry(pb.MessageMetadata(**fields, **other), payload)
    assert plain_metadata_c(entry) is plain_metadata_py(entry)
    assert plain_metadata_py(entry) is (not other)


@settings(max_examples=examples(full=2000, sample=500), deadline=None)
@given(body=st.binary(max_size=40))
def test_plain_metadata_of_random_bytes_agrees_with_the_scan(body: bytes) -> None:
    for entry in (body, struct.pack(">I", len(body)) + body,
                  struct.pack(">I", len(body) + 7) + b"\x0a\x01p\x10\x01\x18\x02" + body):
        assert plain_metadata_c(entry) is plain_metadata_py(entry)


def test_plain_metadata_reads_the_plain_layouts() -> None:
    plain = encode_entry(pb.MessageMetadata(producer_name="p" * 300, sequence_id=2**40,
                                            publish_time=1, event_time=5), b"x")
    delayed = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                                              deliver_at_time=9), b"x")
    assert plain_metadata_c(plain) and plain_metadata_py(plain)
    assert not plain_metadata_c(delayed) and not plain_metadata_py(delayed)
    assert not plain_metadata_c(plain[:-2]) and not plain_metadata_py(plain[:-2])


def test_decode_sends_refuses_a_negative_position_and_a_foreign_list() -> None:
    with pytest.raises(ValueError) as negative:
        decode_sends_c(b"", -1, 100, [])
    assert "negative" in str(negative.value)
    with pytest.raises(TypeError) as not_a_list:
        accel.decode_sends(SendFrame, crc32c, b"", 0, 100, ())
    assert "list" in str(not_a_list.value)


# --------------------------------------------------------------------------- the whole decoder


@pytest.fixture
def reference_decoder(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(frames_module, "_decode_sends", decode_sends_py)
    yield


def normalised(frame: Frame | SendFrame | UnknownCommand) -> object:
    if isinstance(frame, SendFrame):
        return ("send", tuple(frame))
    if isinstance(frame, UnknownCommand):
        return ("unknown", frame.type_number)
    if frame.command.type == T.SEND:
        return ("send", tuple(declined_send(frame.command.send, frame.entry,
                                            frame.checksum_valid)))
    return ("frame", frame.command.SerializeToString(), frame.entry, frame.checksum_valid)


def decode_in_reads(stream: bytes, cuts: list[int]) -> tuple[list[object], object]:
    decoder = FrameDecoder()
    got: list[object] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += [normalised(f) for f in decoder.receive_frames(stream[start:cut])]
        start = cut
    error = decoder.error
    return got, None if error is None else (type(error), str(error))


@settings(max_examples=examples(full=1500, sample=300), deadline=None)
@given(stream=streams, data=st.data())
def test_the_decoder_gives_the_same_frames_and_errors_with_either(
        stream: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    assert frames_module._decode_sends is send_accel.decode_sends
    accelerated = decode_in_reads(stream, cuts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frames_module, "_decode_sends", decode_sends_py)
        reference = decode_in_reads(stream, cuts)
    assert accelerated == reference


def test_the_accelerator_is_what_runs_when_built() -> None:
    assert send_accel.ACCELERATED
    assert send_accel.plain_metadata is accel.plain_metadata


def test_usual_sends_decode_with_the_reference_too(reference_decoder: None) -> None:
    entry = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1),
                         b"payload")
    stream = c.encode_send(1, 3, entry) + c.encode_ping() + c.encode_send(1, 4, entry)
    frames = FrameDecoder().receive_frames(stream)
    assert [type(f) for f in frames] == [SendFrame, Frame, SendFrame]
    assert [f.sequence_id for f in frames if isinstance(f, SendFrame)] == [3, 4]


# ------------------------------------------------------------------ a run of MESSAGE frames

i64 = st.one_of(u64, st.sampled_from([-1, -2, -(2**31), -(2**63)]))
LARGE_SIZES = [BY_REFERENCE_BYTES - 1, BY_REFERENCE_BYTES, 3 * BY_REFERENCE_BYTES]


@st.composite
def run_entries(draw: st.DrawFn) -> bytes:
    """A stored entry: plain or batch metadata (the encoder never reads it: any bytes),
    small or, now and then, large enough to go by reference."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=draw(u64), publish_time=1)
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(1, 1000))
    size = draw(st.one_of(st.integers(0, 300), st.sampled_from(LARGE_SIZES)))
    return encode_entry(md, bytes([size % 251]) * size)


def check_run(consumer_id: int, partition: int | None, positions: list[tuple[int, int]],
              entries: list[bytes]) -> None:
    reference = encode_message_run_py(consumer_id, partition, positions, entries)
    got = encode_message_run_c(consumer_id, partition, positions, entries)
    assert b"".join(got) == b"".join(reference)
    # the reference's buffers as a vectored write takes them: the same, large entries apart
    assert got == coalesce(reference)
    for entry in entries:
        if len(entry) >= BY_REFERENCE_BYTES:
            assert any(part is entry for part in got)


@settings(max_examples=examples(full=3000, sample=500), deadline=None)
@given(consumer_id=i64, partition=st.none() | i64,
       frames=st.lists(st.tuples(st.sampled_from([5, 6, 2**40]), i64, run_entries()),
                       max_size=12))
def test_a_run_of_messages_is_the_same_bytes_from_either(
        consumer_id: int, partition: int | None, frames: list[tuple[int, int, bytes]]) -> None:
    check_run(consumer_id, partition, [(lid, eid) for lid, eid, _ in frames],
              [entry for _, _, entry in frames])


def test_a_run_of_messages_at_the_edges_is_the_same_bytes_from_either() -> None:
    """Ids at every varint length, negative ones (10-byte varints), a ledger changing in
    mid-run, entries empty, small and around the by-reference size, first, last and in a row."""
    edges = [0, 1, 127, 128, 16_383, 16_384, 2**21, 2**28, 2**35, 2**56, 2**63 - 1, 2**63,
             2**64 - 1, -1]
    sizes = [0, 1, 100, *LARGE_SIZES]
    for consumer_id in (0, 300, 2**64 - 1, -1):
        for partition in (None, 0, 3, -1):
            positions = [(lid, eid) for lid in (7, 2**40) for eid in edges]
            entries = [bytes([i]) * sizes[i % len(sizes)] for i in range(len(positions))]
            check_run(consumer_id, partition, positions, entries)
            big = bytes(3 * BY_REFERENCE_BYTES)
            check_run(consumer_id, partition, [(7, 1), (7, 2)], [big, big])
            check_run(consumer_id, partition, [(7, 1)], [b"x"])
    check_run(0, None, [], [])
    assert encode_message_run_c(0, None, [], []) == []


def test_each_frame_of_a_run_is_the_protobuf_built_one() -> None:
    entries = [ENTRY_SMALL, bytes(BY_REFERENCE_BYTES), ENTRY_SMALL]
    positions = [(9, 0), (9, 1), (10, 0)]
    got = b"".join(encode_message_run_c(4, None, positions, entries))
    assert got == b"".join(reference_message(4, lid, eid, entry)
                           for (lid, eid), entry in zip(positions, entries, strict=True))


ENTRY_SMALL = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1),
                           b"small")


def test_a_run_refuses_what_the_reference_refuses() -> None:
    for positions, entries, error in (
            ([(1, 2)], [], ValueError),                 # zip(strict=True)
            ([(1, 2)], ["text"], TypeError),
            ([(1, "2")], [b"x"], TypeError),
            ([(1, 2, 3)], [b"x"], (TypeError, ValueError))):
        with pytest.raises(error):
            encode_message_run_c(1, None, positions, entries)
        with pytest.raises(error):
            encode_message_run_py(1, None, positions, entries)


def test_a_run_refuses_ids_no_wire_field_holds() -> None:
    """An id outside [-2**63, 2**64) fits no int64/uint64 field: refused (the reference
    would encode a varint longer than ten bytes, which no client decodes)."""
    for positions in ([(1, 2**64)], [(1, -(2**63) - 1)], [(2**64, 1)]):
        with pytest.raises(OverflowError):
            encode_message_run_c(1, None, positions, [b"x"])
    with pytest.raises(OverflowError):
        encode_message_run_c(2**64, None, [(1, 1)], [b"x"])
    with pytest.raises(OverflowError):
        encode_message_run_c(1, -(2**63) - 1, [(1, 1)], [b"x"])


def test_the_message_run_twin_is_what_runs_when_built() -> None:
    assert c.encode_message_run is send_accel.encode_message_run
    assert isinstance(send_accel.encode_message_run, functools.partial)
    assert send_accel.encode_message_run.func is accel.encode_message_run


# ------------------------------------------------------------------ the dispatcher's peek


def peek_either(entry: bytes) -> tuple[object, object]:
    """What the accelerated peek and the reference give (a result, or the error's type and
    text)."""
    out: list[object] = []
    for peek in (send_accel.peek_dispatch, peek_dispatch_py):
        try:
            out.append(peek(entry))
        except Exception as exc:
            out.append((type(exc), str(exc)))
    return out[0], out[1]


def no_fallback(entry: bytes) -> tuple[int, int | None]:
    raise AssertionError("the walk handed a flat metadata to the reference")


@settings(max_examples=examples(full=4000, sample=800), deadline=None)
@given(entry=entries(), mutations=st.lists(MUTATION, max_size=4),
       prefixed=st.booleans())
def test_peek_dispatch_agrees_with_the_reference(
        entry: bytes, mutations: list[tuple[str, int, int]], prefixed: bool) -> None:
    if prefixed:
        entry = entry_metadata.prefix(entry, 1_700_000_000_000, 9)
    for data in (entry, mutate(entry, mutations)):
        accelerated, reference = peek_either(data)
        assert accelerated == reference


@settings(max_examples=examples(full=2000, sample=500), deadline=None)
@given(body=st.binary(max_size=40))
def test_peek_dispatch_of_random_metadata_bytes_agrees_with_the_reference(body: bytes) -> None:
    accelerated, reference = peek_either(struct.pack(">I", len(body)) + body + b"payload")
    assert accelerated == reference


@settings(max_examples=examples(full=2000, sample=400), deadline=None)
@given(fields=near_plain_fields, other=one_other_field, payload=st.binary(max_size=8),
       messages=st.one_of(st.none(), i32, st.sampled_from([2**32 + 5, -(2**31)])),
       deliver_at=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_peek_dispatch_walks_a_flat_metadata_itself(
        fields: dict[str, object], other: dict[str, object], payload: bytes,
        messages: int | None, deliver_at: int | None) -> None:
    """Every metadata without a sub-message is answered by the walk, never the reference,
    with what upb reads (a batch size truncated to int32 as upb does)."""
    md = pb.MessageMetadata(**fields, **other)
    if messages is not None:
        md.num_messages_in_batch = messages - (1 << 32) * ((messages + 2**31) >> 32)
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    entry = encode_entry(md, payload)
    assert accel.peek_dispatch(no_fallback, entry) == peek_dispatch_py(entry)


def test_peek_dispatch_hands_what_it_does_not_walk_to_the_reference() -> None:
    base = b"\x0a\x01p\x10\x01\x18\x02"
    framed = [struct.pack(">I", len(md)) + md + b"x" for md in (
        base + b"\x22\x04\x0a\x01k\x12\x00",   # a property: a sub-message
        base + b"\x00\x01",                    # field number 0: corrupt for upb
        base + b"\x53\x54",                    # a group
        base + b"\x58" + b"\xff" * 10 + b"\x01",   # an 11-byte varint
        base + b"\x5a\x01x",                   # num_messages_in_batch length-delimited
        base + b"\x98\x01",                    # deliver_at_time cut short
    )]
    framed.append(entry_metadata.prefix(framed[0], 5, 6))
    framed += [b"", b"\x00\x00", struct.pack(">I", 99) + base]
    handed: list[bytes] = []

    def reference(data: bytes) -> tuple[int, int | None]:
        handed.append(data)
        return (7, 8)

    for entry in framed:
        handed.clear()
        assert accel.peek_dispatch(reference, entry) == (7, 8)
        assert handed == [entry]
        accelerated, expected = peek_either(entry)
        assert accelerated == expected


def test_peek_dispatch_reads_the_last_value_of_a_field_as_upb_does() -> None:
    base = b"\x0a\x01p\x10\x01\x18\x02"
    for md, expected in (
            (base, (1, None)),
            (base + b"\x58\x03\x98\x01\x05\x98\x01\x07\x58\x04", (4, 7)),
            (base + b"\x58" + b"\xff" * 9 + b"\x01", (-1, None)),    # int32 of a 64-bit -1
            (base + b"\x98\x01" + b"\xff" * 9 + b"\x01", (1, -1)),
            (b"\x98\x01\x00", (1, 0)),            # no required field: upb does not mind
            # unknown fields of every wire type the walk skips: 10 (varint, 32-bit), 21, 31
            (base + b"\x50\x07\xa9\x01" + b"\0" * 8 + b"\x55\0\0\0\0\xfa\x01\x02ab",
             (1, None))):
        entry = struct.pack(">I", len(md)) + md + b"payload"
        assert peek_dispatch_py(entry) == expected
        assert accel.peek_dispatch(no_fallback, entry) == expected


def test_the_peek_twin_is_what_runs_when_built() -> None:
    assert isinstance(send_accel.peek_dispatch, functools.partial)
    assert send_accel.peek_dispatch.func is accel.peek_dispatch
    assert send_accel.peek_dispatch.args == (peek_dispatch_py,)


# ------------------------------------------------------------------ the publish check's scan


def scan_either(entry: bytes, max_size: int = 5 * 1024 * 1024) -> tuple[object, object]:
    """What the accelerated scan and the reference give for one entry."""
    return send_accel.scan_publish_metadata(entry, max_size), scan_publish_metadata_py(
        entry, max_size)


def scan_no_fallback(entry: bytes, max_size: int) -> object:
    raise AssertionError("the walk handed a layout it takes to the reference")


def scan_c(entry: bytes) -> object:
    return accel.scan_metadata(scan_no_fallback, SINGLE, MIN_BATCHED_MESSAGE_BYTES, entry,
                               5 * 1024 * 1024)


@settings(max_examples=examples(full=4000, sample=800), deadline=None)
@given(entry=entries(), mutations=st.lists(MUTATION, max_size=4),
       declared_delta=st.sampled_from([0, 0, 0, 1, -1, 7, -300]))
def test_scan_agrees_with_the_reference(
        entry: bytes, mutations: list[tuple[str, int, int]], declared_delta: int) -> None:
    (size,) = struct.unpack_from(">I", entry)
    for data in (entry, struct.pack(">I", max(0, min(2**32 - 1, size + declared_delta)))
                 + mutate(entry[4:], mutations)):
        accelerated, reference = scan_either(data)
        assert accelerated == reference
        assert type(accelerated) is type(reference)
        assert (accelerated is SINGLE) is (reference is SINGLE)


@settings(max_examples=examples(full=2000, sample=500), deadline=None)
@given(body=st.binary(max_size=40))
def test_scan_of_random_bytes_agrees_with_the_reference(body: bytes) -> None:
    for entry in (body, struct.pack(">I", len(body)) + body,
                  struct.pack(">I", len(body) + 7) + b"\x0a\x01p\x10\x01\x18\x02" + body):
        accelerated, reference = scan_either(entry)
        assert accelerated == reference
        assert (accelerated is SINGLE) is (reference is SINGLE)


@settings(max_examples=examples(full=2000, sample=400), deadline=None)
@given(fields=near_plain_fields, payload=st.binary(max_size=40),
       messages=st.one_of(st.none(), i32, st.sampled_from([2**31 - 1, -(2**31)])),
       deliver_at=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
       key=st.one_of(st.none(), st.text(max_size=300)),
       ordering_key=st.one_of(st.none(), st.binary(max_size=3)),
       uncompressed=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
       schema_version=st.one_of(st.none(), st.binary(max_size=3)))
def test_scan_walks_the_delayed_keyed_and_batched_layouts_itself(
        fields: dict[str, object], payload: bytes, messages: int | None,
        deliver_at: int | None, key: str | None, ordering_key: bytes | None,
        uncompressed: int | None, schema_version: bytes | None) -> None:
    """Without a compression, a chunk field or properties, the walk answers every metadata
    the clients write (a delayed or keyed message, an uncompressed batch), never the
    reference, with the reference's result."""
    md = pb.MessageMetadata(**fields)
    if messages is not None:
        md.num_messages_in_batch = messages
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    if key is not None:
        md.partition_key = key
    if ordering_key is not None:
        md.ordering_key = ordering_key
    if uncompressed is not None:
        md.uncompressed_size = uncompressed
    if schema_version is not None:
        md.schema_version = schema_version
    entry = encode_entry(md, payload)
    assert scan_c(entry) == scan_publish_metadata_py(entry)


def test_scan_hands_what_it_does_not_walk_to_the_reference() -> None:
    base = b"\x0a\x01p\x10\x01\x18\x02"
    for extra in (b"\x22\x04\x0a\x01k\x12\x00",      # a property
                  b"\x40\x01",                       # a compression
                  b"\xd8\x01\x02", b"\xe8\x01\x00", b"\xe0\x01\x05",   # the chunk fields
                  b"\x68\x01",                       # a field the scan declines (13, varint)
                  b"\x98\x01\x80"):                  # a truncated varint
        md = base + extra
        entry = struct.pack(">I", len(md)) + md + b"x" * 10
        with pytest.raises(AssertionError, match="handed a layout"):
            scan_c(entry)
        accelerated, reference = scan_either(entry)
        assert accelerated == reference


def test_the_scan_twin_is_what_runs_when_built() -> None:
    assert isinstance(send_accel.scan_publish_metadata, functools.partial)
    assert send_accel.scan_publish_metadata.func is accel.scan_metadata
    plain = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1),
                         b"x")
    assert send_accel.scan_publish_metadata(plain, 100) is SINGLE


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@pytest.mark.parametrize("messages", [2, 2**32 + 2, 2**64 - 3, 2**31, 0])
def test_scan_reads_a_batch_size_as_an_int32_as_the_reference_does(messages: int) -> None:
    md = b"\x0a\x01p\x10\x01\x18\x02\x58" + varint(messages)
    entry = struct.pack(">I", len(md)) + md + b"x" * 20
    assert scan_c(entry) == scan_publish_metadata_py(entry)
    assert (scan_c(entry) is None) is (messages & 0xFFFFFFFF not in (2,))


# ---------------------------------------------------------------- an ACK's ids as positions

_BIG_ID = st.one_of(st.integers(min_value=0, max_value=5000),
                    st.integers(min_value=0, max_value=(1 << 64) - 1))


@st.composite
def ack_commands(draw: st.DrawFn) -> pb.CommandAck:
    cmd = pb.CommandAck(consumer_id=draw(st.integers(0, 1 << 20)),
                        ack_type=draw(st.sampled_from([pb.CommandAck.Individual,
                                                       pb.CommandAck.Cumulative])))
    if draw(st.booleans()):
        cmd.request_id = draw(st.integers(0, (1 << 64) - 1))
    if draw(st.booleans()):
        cmd.txnid_least_bits = draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(0, 3))):
        cmd.properties.add(key=draw(st.text(max_size=4)), value=draw(st.integers(0, 99)))
    for _ in range(draw(st.integers(0, 12))):
        m = cmd.message_id.add(ledgerId=draw(_BIG_ID), entryId=draw(_BIG_ID))
        if draw(st.booleans()):
            m.partition = draw(st.integers(-1, 8))
        if draw(st.booleans()):
            m.batch_index = draw(st.integers(-1, 100))
            m.batch_size = draw(st.integers(0, 100))
        if draw(st.integers(0, 4)) == 0:
            m.ack_set.extend(draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1),
                                           min_size=1, max_size=2)))
        if draw(st.integers(0, 4)) == 0:
            m.first_chunk_message_id.ledgerId = draw(_BIG_ID)
            m.first_chunk_message_id.entryId = draw(_BIG_ID)
    return cmd


def _positions_read_one_by_one(cmd: pb.CommandAck) -> list[tuple[int, int]] | None:
    """The reference: what the consumer side reads id by id from the parsed command, when
    every id names a whole entry."""
    ids = cmd.message_id
    if any(m.ack_set or m.ledgerId >= 1 << 63 or m.entryId >= 1 << 63 for m in ids):
        return None
    return [(m.ledgerId, m.entryId) for m in ids]


class _Pos(tuple):  # type: ignore[type-arg]
    """A tuple type standing for storage's Position (protocol does not import storage)."""


@settings(max_examples=examples(full=3000, sample=600), deadline=None)
@given(cmd=ack_commands(), mutations=st.lists(MUTATION, max_size=3))
def test_ack_positions_reads_what_the_parsed_command_holds(
        cmd: pb.CommandAck, mutations: list[tuple[str, int, int]]) -> None:
    assert send_accel.ack_positions is not None
    raw = cmd.SerializeToString()
    data = mutate(raw, mutations)
    got = send_accel.ack_positions(_Pos, data)   # never raises, whatever the bytes
    try:
        parsed = pb.CommandAck.FromString(data)
    except Exception:   # not a command the decoder would hand over
        return
    expected = _positions_read_one_by_one(parsed)
    if got is not None:
        assert got == expected and all(type(p) is _Pos for p in got)
    if data == raw and expected is not None:
        assert got == expected      # the usual ACK is always read in C


def test_ack_positions_declines_a_batch_index_ack_and_ids_past_two_to_the_63() -> None:
    assert send_accel.ack_positions is not None
    cmd = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
    cmd.message_id.add(ledgerId=3, entryId=7)
    assert send_accel.ack_positions(_Pos, cmd.SerializeToString()) == [(3, 7)]
    cmd.message_id.add(ledgerId=3, entryId=8, ack_set=[5])
    assert send_accel.ack_positions(_Pos, cmd.SerializeToString()) is None
    cmd.message_id[1].ClearField("ack_set")
    cmd.message_id[1].entryId = (1 << 64) - 1     # -1 on the wire: wire_position's
    assert send_accel.ack_positions(_Pos, cmd.SerializeToString()) is None
    with pytest.raises(TypeError):
        send_accel.ack_positions(int, b"")
    assert send_accel.ack_positions(_Pos, b"") == []
