"""The protobuf-free publish path: hand-parsed SEND equals protobuf's reading of the same bytes
(and declines whatever it cannot prove), receive_frames equals next_frame, and the bulk receipt
encoder equals the per-receipt and protobuf-built encodings byte for byte."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling import examples

from protocol import commands as c
from protocol import hot_commands
from protocol import pulsar_pb as pb
from protocol.errors import ConnectionFatalError, MalformedFrameError
from protocol.frames import NEED_DATA, Frame, FrameDecoder, UnknownCommand
from protocol.framing import encode_payload_command, varint
from protocol.metadata import encode_entry
from protocol.send_path import (
    SendFrame,
    declined_send,
    encode_run_receipts,
    encode_send_receipt_of,
    encode_send_receipts,
    parse_send_frame,
    varint_value,
)

T = pb.BaseCommand
u64 = st.one_of(
    st.integers(min_value=0, max_value=20_000),
    st.sampled_from([127, 128, 16383, 16384, 2**28, 2**56 - 1, 2**56, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(min_value=0, max_value=2**64 - 1),
)
i32 = st.one_of(st.integers(min_value=-2, max_value=300), st.sampled_from([2**28 - 1, 2**28, 2**31 - 1]))


def make_entry(payload: bytes = b"hello", sequence_id: int = 1) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    return encode_entry(md, payload)


def generic(frame: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    decoded = decoder.next_frame()
    assert decoded is not NEED_DATA
    return decoded


def as_send_values(frame: Frame) -> SendFrame:
    """What the generic path says, in SendFrame's shape."""
    send = frame.command.send
    assert frame.entry is not None
    assert frame.checksum_valid is not None
    (metadata_size,) = struct.unpack_from(">I", frame.entry, 0)
    return SendFrame(send.producer_id, send.sequence_id, send.num_messages,
                     send.highest_sequence_id, frame.entry, frame.checksum_valid, metadata_size)


def _fast_layout(fields: dict[str, object]) -> bool:
    """True when the module docstring promises the fast path for these CommandSend fields."""
    small = all(int(fields[k]) < 2**63 for k in ("producer_id", "sequence_id", "highest_sequence_id")  # type: ignore[call-overload]
                if k in fields)
    num = fields.get("num_messages", 1)
    return (small and 0 <= int(num) < 2**28  # type: ignore[call-overload]
            and not fields.get("txnid_least_bits") and not fields.get("txnid_most_bits")
            and not fields.get("is_chunk") and not fields.get("marker")
            and "message_id" not in fields)


send_fields = st.fixed_dictionaries(
    {"producer_id": u64, "sequence_id": u64},
    optional={
        "num_messages": i32,
        "txnid_least_bits": st.sampled_from([0, 1, 2**40]),
        "txnid_most_bits": st.sampled_from([0, 5]),
        "highest_sequence_id": u64,
        "is_chunk": st.booleans(),
        "marker": st.booleans(),
        "message_id": st.builds(pb.MessageIdData, ledgerId=u64, entryId=u64),
    },
)


@settings(max_examples=examples(full=500, sample=150), deadline=None)
@given(fields=send_fields, payload=st.binary(max_size=300), corrupt=st.booleans())
def test_hand_parsed_send_equals_protobuf_and_declines_only_unusual_layouts(
    fields: dict[str, object], payload: bytes, corrupt: bool
) -> None:
    entry = make_entry(payload)
    frame = encode_payload_command(pb.BaseCommand(type=T.SEND, send=pb.CommandSend(**fields)), entry)
    if corrupt:
        frame = frame[:-1] + bytes([frame[-1] ^ 0xFF])
    fast = parse_send_frame(frame)
    if _fast_layout(fields):
        assert fast is not None
    if fast is not None:
        assert fast == as_send_values(generic(frame))
        assert fast.checksum_valid is not corrupt
        if not corrupt:
            assert fast.entry[4 + fast.metadata_size :] == payload


@settings(max_examples=examples(full=1000, sample=250), deadline=None)
@given(body=st.binary(max_size=40))
def test_hand_parser_accepts_nothing_that_protobuf_reads_differently_or_refuses(body: bytes) -> None:
    command = b"\x08\x06\x32" + bytes([len(body) & 0x7F]) + body
    entry = make_entry()
    frame = struct.pack(">II", 4 + len(command) + 10 + len(entry), len(command)) + command
    frame += b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry
    fast = parse_send_frame(frame)
    if fast is None:
        return
    assert fast == as_send_values(generic(frame))


@pytest.mark.parametrize(
    "command",
    [
        b"\x08\x06\x32\x04\x10\x02\x08\x01",  # fields out of order
        b"\x08\x06\x32\x06\x08\x01\x10\x02\x38\x01",  # is_chunk = true
        b"\x08\x06\x32\x06\x08\x01\x10\x02\x20\x01",  # inside a transaction
        b"\x08\x06\x32\x04\x08\x01\x10\x02\x08\x07",  # something after the send sub-message
        b"\x08\x06\x32\x02\x08\x01",  # no sequence_id: the generic path refuses it
    ],
    ids=["out-of-order", "chunk", "txn", "trailing-field", "incomplete"],
)
def test_unusual_sends_are_left_to_the_generic_decoder(command: bytes) -> None:
    entry = make_entry()
    frame = struct.pack(">II", 4 + len(command) + 10 + len(entry), len(command)) + command
    frame += b"\x0e\x01" + struct.pack(">I", crc32c(entry)) + entry
    assert parse_send_frame(frame) is None


def test_send_without_checksum_or_with_oversized_metadata_is_left_to_the_generic_decoder() -> None:
    entry = make_entry()
    assert parse_send_frame(c.encode_send(1, 2, entry, checksum=False)) is None
    bad_entry = struct.pack(">I", 10_000) + entry[4:]
    assert parse_send_frame(c.encode_send(1, 2, bad_entry)) is None


@given(value=st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_value_inverts_varint(value: int) -> None:
    assert varint_value(varint(value)) == value


# --------------------------------------------------------------------------- receive_frames

ids = st.integers(min_value=0, max_value=2**40)
entries = st.binary(max_size=1500).map(make_entry)
one_frame = st.one_of(
    st.builds(lambda p, s, e: c.encode_send(p, s, e), ids, ids, entries),
    st.builds(lambda p, s, e: c.encode_send(p, s, e, num_messages=3, highest_sequence_id=s + 2), ids, ids, entries),
    st.builds(lambda p, s, e: c.encode_send(p, s, e, checksum=False), ids, ids, entries),
    st.builds(c.encode_send_receipt, ids, ids, ids, ids),
    st.builds(c.encode_flow, ids, st.integers(min_value=0, max_value=2**32 - 1)),
    st.just(c.encode_ping()),
)


def normalised(frame: Frame | SendFrame) -> object:
    if isinstance(frame, SendFrame):
        return ("send", tuple(frame))
    if frame.command.type == T.SEND:   # receive_frames hands every SEND out as a SendFrame
        return ("send", tuple(declined_send(frame.command.send, frame.entry,
                                            frame.checksum_valid)))
    return ("frame", frame.command.SerializeToString(), frame.entry, frame.checksum_valid)


def next_frame_reference(data: bytes) -> list[Frame]:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    out: list[Frame] = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        out.append(frame)
    return out


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(one_frame, min_size=1, max_size=10), data=st.data())
def test_receive_frames_in_any_split_equals_next_frame(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder = FrameDecoder()
    plain = FrameDecoder()
    got: list[Frame | SendFrame] = []
    got_plain: list[Frame | SendFrame] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += decoder.receive_frames(stream[start:cut])
        got_plain += plain.receive_frames(stream[start:cut], send_frames=False)
        start = cut
    reference = next_frame_reference(stream)
    assert [normalised(f) for f in got] == [normalised(f) for f in reference]
    assert got_plain == reference
    assert decoder.buffered == 0
    assert decoder.error is None


def test_receive_frames_returns_the_frames_before_a_fault_and_records_the_error() -> None:
    good = c.encode_send(1, 2, make_entry())
    garbage = struct.pack(">II", 6, 2) + b"\xff\xff\xff\xff"  # a command that does not parse
    decoder = FrameDecoder()
    frames = decoder.receive_frames(good + c.encode_ping() + garbage + good)
    assert [type(f) for f in frames] == [SendFrame, Frame]
    assert type(decoder.error) is MalformedFrameError
    assert decoder.receive_frames(good) == []
    assert decoder.buffered == 0
    with pytest.raises(MalformedFrameError):
        decoder.next_frame()


def test_receive_frames_reports_a_crc_mismatch_on_the_send_frame() -> None:
    frame = c.encode_send(1, 2, make_entry(b"payload"))
    (decoded,) = FrameDecoder().receive_frames(frame[:-1] + b"X")
    assert isinstance(decoded, SendFrame)
    assert decoded.checksum_valid is False


# --------------------------------------------------------------------------- bulk receipts

receipt = st.tuples(u64, st.one_of(st.just(12), u64), st.integers(0, 2**20), u64)


@settings(max_examples=300, deadline=None)
@given(producer_id=u64, receipts=st.lists(receipt, max_size=20))
def test_bulk_receipts_equal_per_receipt_and_protobuf_encodings(
    producer_id: int, receipts: list[tuple[int, int, int, int]]
) -> None:
    bulk = encode_send_receipts(producer_id, receipts)
    assert bulk == b"".join(c.encode_send_receipt(producer_id, *r) for r in receipts)
    assert bulk == b"".join(hot_commands.reference_send_receipt(producer_id, *r) for r in receipts)


def test_bulk_receipts_decode_in_order() -> None:
    receipts = [(1000 + i, 7, i, 1000 + i) for i in range(50)]
    frames = FrameDecoder().receive_frames(encode_send_receipts(3, receipts))
    decoded = [(f.command.send_receipt.sequence_id, f.command.send_receipt.message_id.ledgerId,
                f.command.send_receipt.message_id.entryId, f.command.send_receipt.highest_sequence_id)
               for f in frames if isinstance(f, Frame)]
    assert decoded == receipts


@settings(max_examples=300, deadline=None)
@given(producer_id=u64, ledger_id=u64, first_entry_id=st.integers(0, 2**62),
       ids=st.lists(st.tuples(u64, st.one_of(st.just(0), u64)), max_size=20))
def test_run_receipts_equal_bulk_receipts_of_consecutive_entries(
    producer_id: int, ledger_id: int, first_entry_id: int, ids: list[tuple[int, int]]
) -> None:
    seqs = [seq for seq, _ in ids]
    highests = [high for _, high in ids]
    receipts = [(seq, ledger_id, first_entry_id + i, high) for i, (seq, high) in enumerate(ids)]
    assert encode_run_receipts(producer_id, seqs, highests, ledger_id, first_entry_id) == \
        encode_send_receipts(producer_id, receipts)


@settings(max_examples=300, deadline=None)
@given(producer_id=u64, sequence_id=u64, highest=st.one_of(st.just(0), u64), ledger_id=u64,
       entry_id=st.integers(0, 2**63))
def test_one_receipt_equals_a_run_of_one_and_protobuf(
    producer_id: int, sequence_id: int, highest: int, ledger_id: int, entry_id: int
) -> None:
    one = encode_send_receipt_of(producer_id, sequence_id, highest, ledger_id, entry_id)
    assert one == encode_run_receipts(producer_id, [sequence_id], [highest], ledger_id, entry_id)
    assert one == c.encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)


def test_a_read_of_one_whole_send_decodes_as_the_generic_path() -> None:
    frame = c.encode_send(3, 70_000, make_entry(b"x" * 1024))
    decoder = FrameDecoder()
    for _ in range(2):  # the chunk alone, then again with nothing pending
        (got,) = decoder.receive_frames(frame)
        assert normalised(got) == normalised(next_frame_reference(frame)[0])
        assert decoder.buffered == 0
    # a frame cut after it still assembles: the shortcut left no state behind
    assert decoder.receive_frames(frame[:10]) == []
    (rest,) = decoder.receive_frames(frame[10:])
    assert normalised(rest) == normalised(next_frame_reference(frame)[0])
    too_big = FrameDecoder(max_frame_size=len(frame) - 5)
    assert too_big.receive_frames(frame) == []
    assert too_big.error is not None


def test_run_receipts_cross_the_varint_widths() -> None:
    # entry and sequence ids around 2**7, 2**14, 2**21 and 2**28: each varint width in turn
    for start in (120, 16_370, 2**21 - 5, 2**28 - 5):
        seqs = list(range(start, start + 12))
        receipts = [(seq, 9, start + i, 0) for i, seq in enumerate(seqs)]
        assert encode_run_receipts(4, seqs, [0] * 12, 9, start) == encode_send_receipts(4, receipts)


def _protobuf_receipts(producer_id: int, seqs: list[int], highests: list[int], ledger_id: int,
                       first_entry_id: int) -> bytes:
    return b"".join(hot_commands.reference_send_receipt(producer_id, seq, ledger_id,
                                                        first_entry_id + i, high)
                    for i, (seq, high) in enumerate(zip(seqs, highests, strict=True)))


@settings(max_examples=examples(full=500, sample=200), deadline=None)
@given(producer_id=u64, ledger_id=u64, seq_block=st.integers(1, 2**14 - 1),
       entry_block=st.integers(1, 2**14 - 1), high=st.one_of(st.just(0), st.integers(0, 2**14 - 1)),
       data=st.data())
def test_run_receipts_of_one_shape_equal_protobuf(
    producer_id: int, ledger_id: int, seq_block: int, entry_block: int, high: int,
    data: st.DataObject,
) -> None:
    # every sequence id and entry id of the span in one block of 2**14 above 2**14 (the shape a
    # long-lived producer's receipts take), one highest sequence id: the slotted encoding
    count = data.draw(st.integers(4, 60))
    first_entry_id = entry_block << 14 | data.draw(st.integers(0, 2**14 - count))
    seqs = data.draw(st.lists(st.integers(seq_block << 14, seq_block << 14 | 0x3FFF),
                              min_size=count, max_size=count))
    highests = [high] * count
    assert encode_run_receipts(producer_id, seqs, highests, ledger_id, first_entry_id) == \
        _protobuf_receipts(producer_id, seqs, highests, ledger_id, first_entry_id)


@settings(max_examples=examples(full=500, sample=200), deadline=None)
@given(producer_id=u64, ledger_id=u64,
       first_entry_id=st.one_of(st.integers(0, 130), st.integers(120, 2**14 + 10),
                                st.integers(2**14 - 70, 2**14 + 70)),
       seqs=st.lists(st.one_of(st.integers(0, 130), st.integers(120, 300),
                               st.integers(2**14 - 40, 2**14 + 3), st.integers(0, 2**15)),
                     min_size=4, max_size=60),
       high=st.one_of(st.just(0), st.integers(0, 2**14 + 3)))
def test_run_receipts_of_small_ids_equal_protobuf(
    producer_id: int, ledger_id: int, first_entry_id: int, seqs: list[int], high: int,
) -> None:
    # ids below 2**14 (a new producer, a young ledger): one varint width per span takes the
    # slotted encoding, any mix the per-receipt one; the bytes are protobuf's either way
    highests = [high] * len(seqs)
    assert encode_run_receipts(producer_id, seqs, highests, ledger_id, first_entry_id) == \
        _protobuf_receipts(producer_id, seqs, highests, ledger_id, first_entry_id)


@settings(max_examples=examples(full=500, sample=200), deadline=None)
@given(producer_id=u64, ledger_id=u64, first_entry_id=st.one_of(
           st.integers(2**14 - 70, 2**14 + 70), st.integers(2**28 - 70, 2**28 + 70),
           st.integers(0, 2**64 - 70)),
       seqs=st.lists(st.one_of(st.integers(2**14 - 3, 2**14 + 3), st.integers(2**21 - 3, 2**21 + 3),
                               st.integers(2**28 - 3, 2**28 + 3), u64), min_size=4, max_size=60),
       high=st.one_of(st.just(0), u64), other_high=u64)
def test_run_receipts_near_one_shape_equal_protobuf(
    producer_id: int, ledger_id: int, first_entry_id: int, seqs: list[int], high: int,
    other_high: int,
) -> None:
    # ids across the block and width boundaries, large varints, one highest sequence id that
    # differs: whichever encoding is taken, the bytes are protobuf's
    highests = [high] * len(seqs)
    assert encode_run_receipts(producer_id, seqs, highests, ledger_id, first_entry_id) == \
        _protobuf_receipts(producer_id, seqs, highests, ledger_id, first_entry_id)
    highests[-1] = other_high
    assert encode_run_receipts(producer_id, seqs, highests, ledger_id, first_entry_id) == \
        _protobuf_receipts(producer_id, seqs, highests, ledger_id, first_entry_id)


def test_run_receipts_of_a_long_producer_decode_in_order() -> None:
    seqs = list(range(100_000, 100_500))
    frames = FrameDecoder().receive_frames(encode_run_receipts(7, seqs, [0] * 500, 31, 70_000))
    decoded = [(f.command.send_receipt.producer_id, f.command.send_receipt.sequence_id,
                f.command.send_receipt.message_id.ledgerId,
                f.command.send_receipt.message_id.entryId) for f in frames if isinstance(f, Frame)]
    assert decoded == [(7, seq, 31, 70_000 + i) for i, seq in enumerate(seqs)]


def next_frame_reference_until_fault(data: bytes) -> tuple[list[Frame], type | None]:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    out: list[Frame] = []
    try:
        while (frame := decoder.next_frame()) is not NEED_DATA:
            out.append(frame)
    except ConnectionFatalError as exc:
        return out, type(exc)
    return out, None


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(one_frame, min_size=1, max_size=8), data=st.data())
def test_receive_frames_in_any_split_of_a_faulty_stream_equals_next_frame(
        frames: list[bytes], data: st.DataObject) -> None:
    # a fault anywhere (a header, a frame a chunk completes, a later frame): the same frames
    # come out before it, and the same error is recorded
    stream = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(1, 3))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    stream = bytes(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder = FrameDecoder()
    got: list[Frame | SendFrame | UnknownCommand] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += decoder.receive_frames(stream[start:cut])
        start = cut
    reference, error = next_frame_reference_until_fault(stream)
    assert [normalised(f) for f in got if not isinstance(f, UnknownCommand)] == [
        normalised(f) for f in reference if not isinstance(f, UnknownCommand)]
    assert (type(decoder.error) if decoder.error is not None else None) is error


def test_a_chunk_completing_a_pending_frame_is_adopted_without_a_copy() -> None:
    sends = [c.encode_send(1, seq, make_entry(b"x" * 300, sequence_id=seq)) for seq in range(6)]
    stream = b"".join(sends)
    decoder = FrameDecoder()
    first = decoder.receive_frames(stream[:500])   # one SEND and the head of the next
    chunk = stream[500:]
    rest = decoder.receive_frames(chunk)
    assert [f.sequence_id for f in first + rest] == list(range(6))   # type: ignore[union-attr]
    assert decoder.buffered == 0
    # a chunk ending inside a frame stays the decoder's buffer: adopted, not joined
    decoder.receive_frames(stream[:500])
    chunk = stream[500:-10]
    assert [f.sequence_id for f in decoder.receive_frames(chunk)] == [1, 2, 3, 4]  # type: ignore[union-attr]
    assert decoder._buf is chunk   # the pending bytes of the last SEND are the chunk's tail
    assert [f.sequence_id for f in decoder.receive_frames(stream[-10:])] == [5]  # type: ignore[union-attr]
