"""FrameDecoder: split-invariance, limits, garbage, checksums, constant memory."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sampling import examples

from protocol import commands as c
from protocol import pulsar_pb as pb
from protocol.command_check import SUBFIELD_BY_TYPE
from protocol.errors import (
    ConnectionFatalError,
    ForeignProtocolError,
    FrameTooLargeError,
    MalformedFrameError,
    ProtocolError,
    UnknownCommandTypeError,
)
from protocol.frames import NEED_DATA, Frame, FrameDecoder, UnknownCommand, parse_command
from protocol.framing import varint
from protocol.limits import MAX_FRAME_SIZE
from protocol.metadata import encode_entry

T = pb.BaseCommand
TLS_CLIENT_HELLO = bytes.fromhex(
    "16030100f8010000f40303" + "ab" * 32 + "20" + "cd" * 32 + "000813021303130100ff0100"
)
HTTP_GET = b"GET / HTTP/1.1\r\nHost: localhost:6650\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"


def make_entry(payload: bytes = b"hello", **fields: object) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, **fields)
    return encode_entry(metadata, payload)


def raw_frame(command: bytes, after_command: bytes = b"", *, total: int | None = None, command_size: int | None = None) -> bytes:
    size = len(command) if command_size is None else command_size
    declared = 4 + len(command) + len(after_command) if total is None else total
    return struct.pack(">II", declared, size) + command + after_command


def assert_strings_are_str(message: Message) -> None:
    for field, value in message.ListFields():
        items = value if field.is_repeated else (value,)
        for item in items:
            if field.type == FieldDescriptor.TYPE_STRING:
                assert type(item) is str, field.full_name
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                assert_strings_are_str(item)


def drain(decoder: FrameDecoder) -> list[Frame]:
    """The decoded frames; an undeclared command type (a valid outcome) is checked and left out."""
    frames = []
    for _ in range(100_000):
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return frames
        if isinstance(frame, UnknownCommand):
            assert frame.type_number not in SUBFIELD_BY_TYPE
            continue
        assert frame.command.IsInitialized()
        assert_strings_are_str(frame.command)
        frames.append(frame)
    raise AssertionError("decoder never returned NEED_DATA")


def decode_in_chunks(data: bytes, cuts: list[int]) -> list[Frame]:
    decoder = FrameDecoder()
    frames: list[Frame] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        decoder.receive_data(data[start:cut])
        frames += drain(decoder)
        start = cut
    assert decoder.buffered == 0
    return frames


def as_tuple(frame: Frame) -> tuple[bytes, bytes | None, bool | None, bytes | None]:
    return (frame.command.SerializeToString(), frame.entry, frame.checksum_valid, frame.broker_entry_metadata)


# --------------------------------------------------------------------------- split invariance

ids = st.integers(min_value=0, max_value=2**40)
entries = st.binary(max_size=2000).map(make_entry)
one_frame = st.one_of(
    st.builds(c.encode_send_receipt, ids, ids, ids, ids),
    st.builds(lambda p, s, e: c.encode_send(p, s, e), ids, ids, entries),
    st.builds(lambda p, s, e: c.encode_send(p, s, e, checksum=False), ids, ids, entries),
    st.builds(lambda cid, ledger, e, entry: c.encode_message(cid, ledger, e, entry, redelivery_count=1), ids, ids, ids, entries),
    st.builds(c.encode_flow, ids, st.integers(min_value=0, max_value=2**32 - 1)),
    st.builds(c.encode_error, ids, st.sampled_from(list(range(26))), st.text(max_size=50)),
    st.just(c.encode_ping()),
    st.just(c.encode_pong()),
    st.builds(c.encode_connect, st.text(max_size=30)),
)
streams = st.lists(one_frame, min_size=1, max_size=12)


@settings(max_examples=examples(full=150, sample=50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=streams)
def test_byte_by_byte_input_gives_the_same_frames_as_whole_input(frames: list[bytes]) -> None:
    data = b"".join(frames)
    whole = decode_in_chunks(data, [])
    assert len(whole) == len(frames)
    byte_by_byte = decode_in_chunks(data, list(range(1, len(data))))
    assert [as_tuple(f) for f in byte_by_byte] == [as_tuple(f) for f in whole]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), frames=streams)
def test_random_splits_give_the_same_frames(data: st.DataObject, frames: list[bytes]) -> None:
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=30))
    assert [as_tuple(f) for f in decode_in_chunks(stream, cuts)] == [as_tuple(f) for f in decode_in_chunks(stream, [])]


BIG_FRAMES = [c.encode_send(9, n, make_entry(bytes([n]) * 90_000)) for n in range(3)]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), small=streams, position=st.integers(min_value=0, max_value=12))
def test_random_splits_around_large_frames_give_the_same_frames(
    data: st.DataObject, small: list[bytes], position: int
) -> None:
    frames = [*small[:position], *BIG_FRAMES, *small[position:]]
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=60))
    decoded = decode_in_chunks(stream, cuts)
    assert len(decoded) == len(frames)
    assert [as_tuple(f) for f in decoded] == [as_tuple(f) for f in decode_in_chunks(stream, [])]


@pytest.mark.parametrize("chunk", [4096, 65536, 100_000, 190_000])
def test_large_frames_in_large_reads_survive_buffer_compaction(chunk: int) -> None:
    # 200 KB frames read 100-190 KB at a time leave >64 KiB consumed in front of a pending
    # large frame: the assembly buffer is compacted in place (checked by a line trace once).
    entries = [make_entry(bytes([n]) * 200_000) for n in range(4)]
    stream = b"".join(c.encode_send(9, n, entry) for n, entry in enumerate(entries))
    decoded = decode_in_chunks(stream, list(range(chunk, len(stream), chunk)))
    assert [f.entry for f in decoded] == entries
    assert all(f.checksum_valid for f in decoded)


def test_many_frames_in_one_chunk_come_out_in_order() -> None:
    data = b"".join(c.encode_send_receipt(1, seq, 2, seq) for seq in range(500))
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frames = drain(decoder)
    assert [f.command.send_receipt.sequence_id for f in frames] == list(range(500))
    assert decoder.buffered == 0


def test_reused_caller_bytearray_does_not_corrupt_buffered_data() -> None:
    frame = c.encode_send(1, 2, make_entry(b"x" * 100))
    decoder = FrameDecoder()
    scratch = bytearray(frame[:50])
    decoder.receive_data(memoryview(scratch))
    scratch[:] = b"\xff" * 50  # the transport reuses its buffer
    decoder.receive_data(bytearray(frame[50:]))
    (decoded,) = drain(decoder)
    assert decoded.checksum_valid is True
    assert decoded.command.send.sequence_id == 2


def test_a_frame_split_across_many_chunks_is_assembled_once_complete() -> None:
    entry = make_entry(b"z" * 300_000)
    frame = c.encode_send(1, 2, entry)
    decoder = FrameDecoder()
    for start in range(0, len(frame), 4096):
        assert decoder.next_frame() is NEED_DATA
        decoder.receive_data(frame[start : start + 4096])
    (decoded,) = drain(decoder)
    assert decoded.entry == entry
    assert decoded.checksum_valid is True


# --------------------------------------------------------------------------- payload variants


def test_crc_mismatch_is_reported_on_the_frame_not_raised() -> None:
    good = c.encode_send(1, 1, make_entry(b"good"))
    bad = bytearray(c.encode_send(1, 2, make_entry(b"evil")))
    bad[-1] ^= 0x01  # flip a payload bit after the CRC was computed
    decoder = FrameDecoder()
    decoder.receive_data(bytes(bad) + good)
    first, second = drain(decoder)
    assert first.checksum_valid is False
    assert first.command.send.sequence_id == 2
    assert second.checksum_valid is True


def test_payload_without_magic_has_no_checksum_verdict() -> None:
    entry = make_entry(b"abc")
    (frame,) = decode_in_chunks(c.encode_send(1, 2, entry, checksum=False), [])
    assert frame.checksum_valid is None
    assert frame.entry == entry


def test_broker_entry_metadata_is_split_off_before_the_checksum() -> None:
    entry = make_entry(b"abc")
    bem = pb.BrokerEntryMetadata(broker_timestamp=123, index=7).SerializeToString()
    command = pb.BaseCommand(type=T.MESSAGE)
    command.message.consumer_id = 1
    command.message.message_id.ledgerId = 2
    command.message.message_id.entryId = 3
    body = command.SerializeToString()
    after = b"\x0e\x02" + struct.pack(">I", len(bem)) + bem + b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry
    (frame,) = decode_in_chunks(raw_frame(body, after), [])
    assert frame.broker_entry_metadata == bem
    assert frame.checksum_valid is True
    assert frame.entry == entry
    assert pb.BrokerEntryMetadata.FromString(frame.broker_entry_metadata).index == 7


# --------------------------------------------------------------------------- limits


def fatal_error_of(data: bytes, max_frame_size: int = MAX_FRAME_SIZE) -> ConnectionFatalError:
    decoder = FrameDecoder(max_frame_size)
    decoder.receive_data(data)
    with pytest.raises(ConnectionFatalError) as info:
        drain(decoder)
    error = info.value
    assert decoder.failed
    assert decoder.buffered == 0
    with pytest.raises(type(error)):
        decoder.next_frame()  # a dead decoder keeps failing
    return error


def test_frame_of_exactly_the_default_limit_is_accepted() -> None:
    command = c.encode_send(1, 2, make_entry())[8:]
    command_size = int.from_bytes(c.encode_send(1, 2, make_entry())[4:8], "big")
    body = command[:command_size]
    filler_entry = make_entry(b"f" * (MAX_FRAME_SIZE - 4 - len(body) - len(make_entry(b""))))
    data = raw_frame(body, filler_entry)
    assert int.from_bytes(data[:4], "big") == MAX_FRAME_SIZE
    (frame,) = decode_in_chunks(data, [])
    assert frame.entry == filler_entry


def test_frame_one_byte_over_the_default_limit_is_refused_from_its_header() -> None:
    error = fatal_error_of(struct.pack(">I", MAX_FRAME_SIZE + 1))
    assert type(error) is FrameTooLargeError
    assert error.size == MAX_FRAME_SIZE + 1
    assert error.limit == MAX_FRAME_SIZE


def test_custom_limit_is_enforced() -> None:
    frame = c.encode_send(1, 2, make_entry(b"x" * 200))
    error = fatal_error_of(frame, max_frame_size=len(frame) - 5)
    assert isinstance(error, FrameTooLargeError)
    (decoded,) = decode_in_chunks(frame, [])  # the default limit accepts it
    assert decoded.checksum_valid


def test_all_ones_length_is_refused_as_too_large() -> None:
    error = fatal_error_of(b"\xff\xff\xff\xff")
    assert type(error) is FrameTooLargeError
    assert error.size == 0xFFFFFFFF


def test_tls_client_hello_is_refused_as_foreign_protocol() -> None:
    error = fatal_error_of(TLS_CLIENT_HELLO)
    assert isinstance(error, ForeignProtocolError)
    assert error.detected == "tls"


def test_http_request_is_refused_as_foreign_protocol() -> None:
    error = fatal_error_of(HTTP_GET)
    assert isinstance(error, ForeignProtocolError)
    assert error.detected == "http"


def test_command_size_beyond_total_is_refused_from_the_header() -> None:
    error = fatal_error_of(struct.pack(">II", 100, 97))  # 8 bytes only: no body yet
    assert type(error) is MalformedFrameError
    assert "command size" in str(error)


def test_metadata_size_beyond_the_frame_is_refused() -> None:
    body = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2)).SerializeToString()
    entry = struct.pack(">I", 1000) + b"short"
    error = fatal_error_of(raw_frame(body, b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry))
    assert type(error) is MalformedFrameError
    assert "metadata size" in str(error)


@pytest.mark.parametrize(
    "after_command",
    [b"\x00", b"\x00\x00\x00", b"\x0e\x01\x00\x00", b"\x0e\x02\x00\x00\x00", b"\x0e\x02\x00\x00\x00\x09abc"],
    ids=["one-byte-payload", "short-metadata-size", "truncated-crc", "truncated-bem-header", "bem-beyond-frame"],
)
def test_truncated_payload_headers_are_refused(after_command: bytes) -> None:
    body = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2)).SerializeToString()
    assert type(fatal_error_of(raw_frame(body, after_command))) is MalformedFrameError


@pytest.mark.parametrize(
    "command",
    [
        b"\x08",  # truncated varint
        b"\x08\x06\x32\x05\x08\x01",  # SEND sub-message length beyond the command
        b"\xff\xff\xff",  # invalid tag
        b"",  # empty: no type
        b"\x12\x00",  # a sub-message but no type
        b"\x08\x06",  # SEND without its send field
        b"\x08\x06\x32\x02\x08\x01",  # SEND missing required sequence_id
    ],
    ids=["truncated-varint", "truncated-submessage", "bad-tag", "empty", "no-type", "missing-subcommand", "missing-required"],
)
def test_command_that_is_not_a_valid_base_command_is_refused(command: bytes) -> None:
    error = fatal_error_of(raw_frame(command))
    assert type(error) is MalformedFrameError


def test_undeclared_command_type_is_consumed_and_the_stream_goes_on() -> None:
    # type 99 with a sub-message in field 99 and a payload after the command: a newer
    # protocol's command, read whole, then the next frame as usual.
    unknown = raw_frame(b"\x08\x63\x9a\x06\x02\x08\x07", b"\x00\x00\x00\x00")
    data = unknown + c.encode_flow(1, 10)
    for cuts in ([], list(range(1, len(data)))):
        decoder = FrameDecoder()
        frames: list[object] = []
        start = 0
        for cut in [*cuts, len(data)]:
            decoder.receive_data(data[start:cut])
            while (frame := decoder.next_frame()) is not NEED_DATA:
                frames.append(frame)
            start = cut
        assert frames[0] == UnknownCommand(99)
        assert isinstance(frames[1], Frame) and frames[1].command.flow.messagePermits == 10
        assert len(frames) == 2 and not decoder.failed and decoder.buffered == 0
    assert FrameDecoder().receive_frames(data)[0] == UnknownCommand(99)
    with pytest.raises(UnknownCommandTypeError) as info:
        parse_command(b"\x08\x63")  # alone, nothing can answer it: still malformed for the caller
    assert info.value.type_number == 99 and isinstance(info.value, MalformedFrameError)


@pytest.mark.parametrize(
    "command",
    [
        b"\x08\x02\x12\x03\x0a\x01\xff",  # CONNECT client_version = b"\xff"
        pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                       getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(request_id=1, topics=["a", "b"]),
                       ).SerializeToString()[:-1] + b"\xc3",  # repeated string, truncated multi-byte char
    ],
    ids=["scalar-string", "repeated-string"],
)
def test_string_field_with_invalid_utf8_is_refused(command: bytes) -> None:
    error = fatal_error_of(raw_frame(command))
    assert type(error) is MalformedFrameError
    assert "UTF-8" in str(error)


def test_ping_without_its_empty_submessage_is_accepted() -> None:
    (frame,) = decode_in_chunks(raw_frame(b"\x08\x12"), [])
    assert frame.command.type == T.PING


def test_parse_command_is_usable_on_its_own() -> None:
    data = c.encode_flow(1, 10)
    assert parse_command(data[8:]).flow.messagePermits == 10


# --------------------------------------------------------------------------- constant memory


@pytest.mark.parametrize("prefix", [b"\x7f\xff\xff\xff", TLS_CLIENT_HELLO[:4], HTTP_GET[:4], b"\xff\xff\xff\xff"])
def test_decoder_holds_no_memory_after_a_huge_declared_frame(prefix: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(prefix)
    assert decoder.buffered == 0  # refused on receipt, before next_frame is even called
    for _ in range(100):
        decoder.receive_data(b"\x00" * 65536)
    assert decoder.buffered == 0
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    assert decoder.buffered == 0


def test_decoder_refuses_at_once_when_a_valid_frame_is_followed_by_garbage() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(c.encode_ping() + HTTP_GET)
    first = decoder.next_frame()
    assert first is not NEED_DATA
    assert first.command.type == T.PING
    with pytest.raises(ForeignProtocolError):
        decoder.next_frame()
    assert decoder.buffered == 0


def test_pending_bytes_of_a_legal_frame_are_all_that_is_buffered() -> None:
    frame = c.encode_send(1, 2, make_entry(b"q" * 100_000))
    decoder = FrameDecoder()
    decoder.receive_data(frame[:1000])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == 1000


# --------------------------------------------------------------------------- fuzz


@settings(max_examples=examples(full=1000, sample=250), deadline=None)
@given(data=st.binary(max_size=300), cut=st.integers(min_value=0, max_value=300))
def test_random_bytes_raise_only_protocol_errors(data: bytes, cut: int) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    try:
        decoder.receive_data(data[:cut])
        drain(decoder)
        decoder.receive_data(data[cut:])
        drain(decoder)
    except ProtocolError:
        pass


@settings(max_examples=examples(full=500, sample=150), deadline=None)
@given(frames=streams, flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), min_size=1, max_size=4))
def test_corrupted_valid_streams_raise_only_protocol_errors(frames: list[bytes], flips: list[tuple[int, int]]) -> None:
    stream = bytearray(b"".join(frames))
    for position, mask in flips:
        stream[position % len(stream)] ^= mask
    decoder = FrameDecoder()
    try:
        decoder.receive_data(bytes(stream))
        drain(decoder)
    except ProtocolError:
        pass


# --------------------------------------------------------------------------- SEND fast path

send_fields = st.fixed_dictionaries(
    {},
    optional={
        "producer_id": ids,
        "sequence_id": ids,
        "num_messages": st.integers(min_value=-(2**31), max_value=2**31 - 1),
        "highest_sequence_id": ids,
        "txnid_least_bits": ids,
        "is_chunk": st.booleans(),
        "marker": st.booleans(),
        "message_id": st.builds(
            lambda ledger, entry, partial: pb.MessageIdData(ledgerId=ledger) if partial else pb.MessageIdData(ledgerId=ledger, entryId=entry),
            ids, ids, st.booleans(),
        ),
    },
)


@settings(max_examples=examples(full=400, sample=120), deadline=None)
@given(fields=send_fields, reorder=st.booleans(), extra=st.sampled_from(["none", "partial", "complete"]))
def test_send_is_accepted_exactly_when_protobuf_calls_it_initialized(
    fields: dict[str, object], reorder: bool, extra: str
) -> None:
    cmd = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(**fields))
    if extra == "partial":  # another sub-message, missing its required client_version
        cmd.connect.SetInParent()
    elif extra == "complete":
        cmd.connect.client_version = "x"
    # Serialized by hand so that the extra sub-message comes *after* send (as a client that
    # appended it would), or the type after everything (reorder: never the fast path).
    sub = cmd.send.SerializePartialToString()
    send_field = b"\x32" + varint(len(sub)) + sub
    rest = pb.BaseCommand(connect=cmd.connect).SerializePartialToString() if extra != "none" else b""
    body = send_field + rest + b"\x08\x06" if reorder else b"\x08\x06" + send_field + rest
    entry = make_entry()
    frame_bytes = raw_frame(body, b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry)
    decoder = FrameDecoder()
    decoder.receive_data(frame_bytes)
    if cmd.IsInitialized():
        frame = decoder.next_frame()
        assert frame is not NEED_DATA
        assert frame.command == cmd
        assert frame.checksum_valid is True
    else:
        with pytest.raises(MalformedFrameError):
            decoder.next_frame()
        assert decoder.failed


def test_send_whose_type_is_overridden_later_is_validated_as_the_final_type() -> None:
    send = pb.CommandSend(producer_id=1, sequence_id=2).SerializeToString()
    body = b"\x08\x06\x32" + bytes([len(send)]) + send + b"\x08\x07"  # last type wins: SEND_RECEIPT
    error = fatal_error_of(raw_frame(body))
    assert type(error) is MalformedFrameError
    assert "send_receipt" in str(error)


def test_fast_built_frames_equal_constructor_built_frames() -> None:
    entry = make_entry()
    (decoded,) = decode_in_chunks(c.encode_send(1, 2, entry), [])
    assert decoded == Frame(decoded.command, entry, True, None)
    assert repr(decoded).startswith("Frame(command=")
    with pytest.raises(AttributeError):
        decoded.entry = b""  # type: ignore[misc]
    assert decoded.entry == entry


@pytest.mark.parametrize(
    "body",
    [
        b"\x08\x06\x32\x02\x08\x01\x10\x05",  # sequence_id tag just past the sub-message
        b"\x08\x06\x32\x04\x08\x01\x18\x05",  # num_messages where sequence_id should be
        b"\x08\x06\x32\x04\x10\x01\x10\x05",  # no producer_id
        b"\x08\x06\x32\x0a\x08\x01\x10\x02\x4a\x02\x08\x01",  # message_id without entryId
        b"\x08\x06\x32\x04\x08\x01\x10\x02\x12\x00",  # plus a CONNECT lacking client_version
    ],
    ids=["seq-outside-submessage", "other-field", "no-producer-id", "partial-message-id", "extra-incomplete-submessage"],
)
def test_send_fast_path_never_accepts_an_incomplete_send(body: bytes) -> None:
    entry = make_entry()
    error = fatal_error_of(raw_frame(body, b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry))
    assert type(error) is MalformedFrameError


def test_decoded_frames_set_every_field() -> None:
    import dataclasses

    for data in (c.encode_ping(), c.encode_send(1, 2, make_entry())):
        (frame,) = decode_in_chunks(data, [])
        values = {field.name: getattr(frame, field.name) for field in dataclasses.fields(Frame)}
        assert Frame(**values) == frame
