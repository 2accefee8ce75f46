"""The publish hot path without protobuf objects: SEND parsed by hand, receipts encoded in bulk.

Theory of operation
-------------------
Every published entry costs one SEND in and one SEND_RECEIPT out. Building a ``pb.BaseCommand``
per SEND (parse, validate, attribute reads) and one ``bytes`` per receipt is most of the codec's
share of a publish; this module removes both, sans-IO like the rest of ``protocol/``.

:func:`parse_send` reads one complete SEND frame straight out of the decoder's buffer into a
:class:`SendFrame` (a NamedTuple: ids, entry, checksum verdict and metadata offset). It accepts
only the layout clients actually send, as one anchored regex over the command bytes::

    08 06 32 L                       BaseCommand{type = SEND, send = L bytes}, nothing else
      08 v  10 v                     producer_id, sequence_id        (required, in this order)
      [18 v] [20 00] [28 00] [30 v]  num_messages, txnid 0, txnid 0, highest_sequence_id
      [38 00] [40 00]                is_chunk = false, marker = false
    0e 01 crc32c [u32 metadataSize] ...   checksum magic, then the entry

with 64-bit varints of at most 9 bytes (< 2**63) and ``num_messages`` of at most 4 bytes
(0 <= n < 2**28). Anything else -- fields out of order or repeated, a chunk, a marker, a
transaction, ``message_id``, no checksum magic, a metadata size beyond the entry -- returns
None, and the caller decodes the frame the generic way (:class:`protocol.frames.FrameDecoder`),
which validates it or raises. So the fast path never changes a verdict: whatever it accepts,
protobuf parses to the same values with every required field present (pinned by tests).

:func:`encode_send_receipts` encodes many SEND_RECEIPTs of one producer (one group commit) into
one ``bytes``, byte for byte what :func:`protocol.commands.encode_send_receipt` gives for each,
concatenated.
"""

from __future__ import annotations

import contextlib
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.errors import ProtocolError
from protocol.framing import (
    HEADER,
    LOW_14_BITS,
    ONE_BYTE,
    SMALL_VARINT,
    SMALL_VARINT_LIMIT,
    varint,
)
from protocol.limits import MAGIC_CRC32C
from protocol.metadata import stamp_txnid


class SendFrame(NamedTuple):
    """A SEND decoded without protobuf. ``entry`` is ``[metadataSize][MessageMetadata][payload]``
    (what the CRC covers); the metadata is ``entry[4 : 4 + metadata_size]`` and the payload
    starts at ``4 + metadata_size``."""

    producer_id: int
    sequence_id: int
    num_messages: int
    """CommandSend.num_messages (1 when absent, as protobuf's default)."""
    highest_sequence_id: int
    """CommandSend.highest_sequence_id (0 when absent)."""
    entry: bytes
    checksum_valid: bool
    metadata_size: int


_V63: Final = rb"((?:[\x80-\xff]{0,8})[\x00-\x7f])"  # a varint of 1..9 bytes
_V28: Final = rb"((?:[\x80-\xff]{0,3})[\x00-\x7f])"  # a varint of 1..4 bytes
_SEND_COMMAND: Final = re.compile(
    rb"\x08\x06\x32[\x00-\x7f]"
    rb"\x08" + _V63 + rb"\x10" + _V63
    + rb"(?:\x18" + _V28 + rb")?(?:\x20\x00)?(?:\x28\x00)?(?:\x30" + _V63 + rb")?"
    rb"(?:\x38\x00)?(?:\x40\x00)?\Z",
    re.DOTALL,
)
_send_command_match: Final = _SEND_COMMAND.match
# magic 0x0e01, crc32c, then the entry's metadataSize: what follows a SEND's command
_trailer_from: Final = struct.Struct(">HII").unpack_from
_new_send_frame: Final = tuple.__new__
_HAND_MIN: Final = 8
_HAND_MAX: Final = 13
# The hand layout's command bytes one by one, then the trailer (magic, crc32c, metadataSize).
_hand_unpack: Final = tuple(struct.Struct(f">{size}BHII").unpack_from
                            for size in range(_HAND_MAX + 1))


def varint_value(data: bytes) -> int:
    """The value of one complete base-128 varint (little-endian 7-bit groups)."""
    size = len(data)
    if size == 1:
        return data[0]
    if size == 2:
        return (data[0] & 0x7F) | data[1] << 7
    if size == 3:
        return (data[0] & 0x7F) | (data[1] & 0x7F) << 7 | data[2] << 14
    if size == 4:
        return (data[0] & 0x7F) | (data[1] & 0x7F) << 7 | (data[2] & 0x7F) << 14 | data[3] << 21
    value = 0
    shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
    return value


def parse_send(
    buf: bytes | bytearray, pos: int, command_end: int, frame_end: int
) -> SendFrame | None:
    """The SEND whose command is ``buf[pos:command_end]`` and whose frame ends at ``frame_end``
    (the frame's 8-byte header already checked and consumed), or None when the frame is not of
    the usual layout (see the module docstring) and must be decoded the generic way."""
    if buf[pos + 3] + 4 != command_end - pos or frame_end - command_end < 10:
        return None  # the send sub-message does not fill the command, or no room for a CRC
    # The usual command read by hand: 08 06 32 L 08 <producer, 1 byte> 10 <sequence, 1..4
    # bytes> [18 <num_messages, 1 byte>] (8 to 13 bytes), its bytes and the trailer after it
    # unpacked in one call; anything else goes through the regex.
    size = command_end - pos
    sequence = -1
    if _HAND_MIN <= size <= _HAND_MAX:
        c = _hand_unpack[size](buf, pos)
        if c[0] == 0x08 and c[1] == 0x06 and c[2] == 0x32 and c[4] == 0x08 and c[5] < 0x80 \
                and c[6] == 0x10:
            first = c[7]
            if first < 0x80:
                sequence, at = first, 8
            elif size > 8:
                second = c[8]
                if second < 0x80:
                    sequence, at = (first & 0x7F) | second << 7, 9
                elif size > 9:
                    third = c[9]
                    if third < 0x80:
                        sequence, at = (first & 0x7F) | (second & 0x7F) << 7 | third << 14, 10
                    elif size > 10 and c[10] < 0x80:
                        sequence = ((first & 0x7F) | (second & 0x7F) << 7
                                    | (third & 0x7F) << 14 | c[10] << 21)
                        at = 11
            if sequence >= 0:
                if at == size:
                    num_messages = 1
                elif at + 2 == size and c[at] == 0x18 and c[at + 1] < 0x80:
                    num_messages = c[at + 1]
                else:
                    sequence = -1
        if sequence >= 0:
            producer_id = c[5]
            highest = 0
            magic, expected, metadata_size = c[size], c[size + 1], c[size + 2]
    if sequence < 0:
        match = _send_command_match(buf, pos, command_end)
        if match is None:
            return None
        producer, seq_bytes, num_bytes, high_bytes = match.groups()
        producer_id = producer[0] if len(producer) == 1 else varint_value(producer)
        sequence = varint_value(seq_bytes)
        num_messages = 1 if num_bytes is None else varint_value(num_bytes)
        highest = 0 if high_bytes is None else varint_value(high_bytes)
        magic, expected, metadata_size = _trailer_from(buf, command_end)
    if magic != MAGIC_CRC32C or metadata_size > frame_end - command_end - 10:
        return None  # no checksum, or a metadata size the generic path refuses
    entry = buf[command_end + 6 : frame_end]
    if type(entry) is not bytes:
        entry = bytes(entry)
    return _new_send_frame(
        SendFrame,
        (producer_id, sequence, num_messages, highest, entry, crc32c(entry) == expected,
         metadata_size),
    )


def parse_send_frame(frame: bytes) -> SendFrame | None:
    """:func:`parse_send` on one whole frame (header included), for tests and tools."""
    if len(frame) < 8:
        return None
    total, command_size = HEADER.unpack_from(frame, 0)
    if total + 4 != len(frame) or command_size > total - 4:
        return None
    return parse_send(frame, 8, 8 + command_size, len(frame))


# [totalSize][commandSize] 08 07 3a <n> for a SEND_RECEIPT whose sub-message has n bytes.
_RECEIPT_PREFIX: Final = tuple(
    HEADER.pack(n + 8, n + 4) + b"\x08\x07\x3a" + bytes((n,)) for n in range(128)
)
_SMALL: Final = SMALL_VARINT
_SMALL_LIMIT: Final = SMALL_VARINT_LIMIT
_TWO_28: Final = 1 << 28


def encode_send_receipts(
    producer_id: int, receipts: Iterable[tuple[int, int, int, int]]
) -> bytes:
    """SEND_RECEIPTs of one producer, concatenated into one ``bytes`` for one write.

    ``receipts`` holds ``(sequence_id, ledger_id, entry_id, highest_sequence_id)`` in the order
    they must reach the client. Equals ``b"".join(encode_send_receipt(producer_id, *r) ...)``.
    """
    head = b"\x08" + varint(producer_id) + b"\x10"
    parts: list[bytes] = []
    extend = parts.extend
    last_ledger = -1
    ledger_part = b""
    for sequence_id, ledger_id, entry_id, highest in receipts:
        if ledger_id != last_ledger:
            ledger = varint(ledger_id)
            ledger_part = b"\x08" + ledger + b"\x10"
            last_ledger = ledger_id
        seq = _SMALL[sequence_id] if 0 <= sequence_id < _SMALL_LIMIT else varint(sequence_id)
        entry = _SMALL[entry_id] if 0 <= entry_id < _SMALL_LIMIT else varint(entry_id)
        high = _SMALL[highest] if 0 <= highest < _SMALL_LIMIT else varint(highest)
        message_id_size = len(ledger_part) + len(entry)
        # head + seq + 1a L + message id + 20 + highest
        size = len(head) + len(seq) + 2 + message_id_size + 1 + len(high)
        extend((_RECEIPT_PREFIX[size], head, seq, b"\x1a", ONE_BYTE[message_id_size],
                ledger_part, entry, b"\x20", high))
    return b"".join(parts)


def encode_send_receipt_of(
    producer_id: int, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int,
) -> bytes:
    """One SEND_RECEIPT: :func:`encode_run_receipts` of a span of one entry (a lone send's
    answer), without the span's per-call set-up."""
    small, limit = _SMALL, _SMALL_LIMIT  # below 2**14 the table, no call
    pid = small[producer_id] if 0 <= producer_id < limit else varint(producer_id)
    seq = small[sequence_id] if 0 <= sequence_id < limit else varint(sequence_id)
    ledger = small[ledger_id] if 0 <= ledger_id < limit else varint(ledger_id)
    entry = small[entry_id] if 0 <= entry_id < limit else varint(entry_id)
    high = (small[highest_sequence_id] if 0 <= highest_sequence_id < limit
            else varint(highest_sequence_id))
    message_id_size = len(ledger) + len(entry) + 2  # 08 ledger 10 entry
    # 08 pid 10 seq 1a L <message id> 20 highest
    size = len(pid) + len(seq) + message_id_size + len(high) + 5
    return b"".join((_RECEIPT_PREFIX[size], b"\x08", pid, b"\x10", seq, b"\x1a",
                     ONE_BYTE[message_id_size], b"\x08", ledger, b"\x10", entry, b"\x20", high))


def encode_run_receipts(
    producer_id: int, sequence_ids: Sequence[int], highest_sequence_ids: Sequence[int],
    ledger_id: int, first_entry_id: int,
) -> bytes:
    """SEND_RECEIPTs of consecutive entries ``first_entry_id..`` of one ledger (a publish
    run's span): equals :func:`encode_send_receipts` of ``zip(sequence_ids, repeat(ledger_id),
    count(first_entry_id), highest_sequence_ids)``, without a tuple per receipt and with the
    varints of up to 28 bits built inline (sequence and entry ids soon pass 14 bits)."""
    head = b"\x08" + varint(producer_id) + b"\x10"
    ledger_part = b"\x08" + varint(ledger_id) + b"\x10"
    # 1a L + ledger part, by the size of the entry id's varint: only the sizes this span's
    # consecutive entry ids take (usually one)
    last_size = len(varint(first_entry_id + len(sequence_ids) - 1)) if sequence_ids else 1
    message_id_heads = [b""] * (last_size + 1)
    for n in range(len(varint(first_entry_id)), last_size + 1):
        message_id_heads[n] = b"\x1a" + ONE_BYTE[len(ledger_part) + n] + ledger_part
    fixed = len(head) + 3 + len(ledger_part)  # head, 1a L, the ledger part, 20
    if len(sequence_ids) >= _UNIFORM_MIN:
        uniform = _uniform_run_receipts(head, ledger_part, fixed, sequence_ids,
                                        highest_sequence_ids, first_entry_id)
        if uniform is not None:
            return uniform
    prefix = _RECEIPT_PREFIX
    small, limit, low = _SMALL, _SMALL_LIMIT, LOW_14_BITS
    parts: list[bytes] = []
    extend = parts.extend
    entry_id = first_entry_id
    for sequence_id, highest in zip(sequence_ids, highest_sequence_ids, strict=True):
        if 0 <= sequence_id < limit:
            seq = small[sequence_id]
        elif limit <= sequence_id < _TWO_28:
            seq = low[sequence_id & 0x3FFF] + small[sequence_id >> 14]
        else:
            seq = varint(sequence_id)
        if entry_id < limit:
            entry = small[entry_id]
        elif entry_id < _TWO_28:
            entry = low[entry_id & 0x3FFF] + small[entry_id >> 14]
        else:
            entry = varint(entry_id)
        high = small[highest] if 0 <= highest < limit else varint(highest)
        extend((prefix[fixed + len(seq) + len(entry) + len(high)], head, seq,
                message_id_heads[len(entry)], entry, b"\x20", high))
        entry_id += 1
    return b"".join(parts)


_UNIFORM_MIN: Final = 4


def _id_slots(lowest: int, highest: int) -> tuple[int, bytes] | None:
    """How ids in ``[lowest, highest]`` encode when their varints all have one width: (the
    size of the part that varies by id, the fixed part after it), or None.

    Below 2**14 an id's whole varint is ``SMALL_VARINT[id]`` (1 byte below 128, 2 from 128):
    the ids must all lie on one side of 128; the fixed part is empty. From 2**14 to 2**28 it
    is ``LOW_14_BITS[id & 0x3FFF]`` then ``SMALL_VARINT[id >> 14]``: they must share the bits
    above the 14th, whose varint is the fixed part."""
    if lowest < 0:
        return None
    if highest < _SMALL_LIMIT:
        if lowest >= 128:
            return 2, b""
        if highest < 128:
            return 1, b""
        return None
    if lowest >= _SMALL_LIMIT and highest < _TWO_28 and lowest >> 14 == highest >> 14:
        return 2, _SMALL[lowest >> 14]
    return None


_small_of: Final = _SMALL.__getitem__
_low_of: Final = LOW_14_BITS.__getitem__
_low_bits: Final = (0x3FFF).__and__


def _uniform_run_receipts(
    head: bytes, ledger_part: bytes, fixed: int, sequence_ids: Sequence[int],
    highest_sequence_ids: Sequence[int], first_entry_id: int,
) -> bytes | None:
    """:func:`encode_run_receipts` of a span whose receipts all have the same shape, or None.

    The shape is the usual one of a producer: the sequence ids' varints of one width, the
    entry ids' too (see :func:`_id_slots`: below 128, from 128 to 2**14, or from 2**14 to 2**28
    with the same bits above the 14th), and one ``highest_sequence_id`` below ``2**14`` for all
    (0 when the client sends none). Such receipts differ only in the varying parts of those two
    varints, so the frames are four slots each, two of them the same bytes for every receipt:
    the list is made by repetition and the two varying slots filled by slice assignment (the
    entry ids are consecutive: one slice of a table), with no per-receipt Python bytecode.
    """
    count = len(sequence_ids)
    last_entry = first_entry_id + count - 1
    entry_slots = _id_slots(first_entry_id, last_entry)
    if entry_slots is None:
        return None
    seq_slots = _id_slots(min(sequence_ids), max(sequence_ids))
    if seq_slots is None:
        return None
    high = highest_sequence_ids[0]
    if not (0 <= high < _SMALL_LIMIT and highest_sequence_ids.count(high) == count):
        return None
    seq_size, seq_top = seq_slots
    entry_size, entry_top = entry_slots
    high_bytes = _SMALL[high]
    seq_size += len(seq_top)
    entry_size += len(entry_top)
    size = fixed + seq_size + entry_size + len(high_bytes)
    # A receipt: prefix head [seq part] seq top 1a L ledger-part [entry part] entry top 20
    # highest; the tail of one and the head of the next are one slot.
    start = _RECEIPT_PREFIX[size] + head
    end = entry_top + b"\x20" + high_bytes
    parts: list[bytes] = [
        b"", seq_top + b"\x1a" + ONE_BYTE[len(ledger_part) + entry_size] + ledger_part, b"",
        end + start,
    ] * count
    parts[0::4] = (map(_low_of, map(_low_bits, sequence_ids)) if seq_top
                   else map(_small_of, sequence_ids))
    if entry_top:
        low_entry = first_entry_id & 0x3FFF
        parts[2::4] = LOW_14_BITS[low_entry : low_entry + count]
    else:
        parts[2::4] = _SMALL[first_entry_id : last_entry + 1]
    parts[-1] = end
    return start + b"".join(parts)


__all__ = ["SendFrame", "declined_send", "encode_run_receipts", "encode_send_receipt_of",
           "encode_send_receipts", "parse_send", "parse_send_frame", "varint_value"]


def declined_send(send: pb.CommandSend, entry: bytes | None,
                  checksum_valid: bool | None) -> SendFrame:
    """The :class:`SendFrame` of a SEND the hand parser declined (an unusual layout), from the
    generic decode: the fields a producer reads; no payload is an empty entry that fails its
    checksum. A transactional SEND has its transaction stamped into the stored metadata (a
    client may name it in the command only); a malformed entry is left for the producer's
    checks to refuse."""
    if entry is None:
        return SendFrame(send.producer_id, send.sequence_id, send.num_messages,
                         send.highest_sequence_id, b"", False, 0)
    valid = checksum_valid is not False
    most, least = send.txnid_most_bits, send.txnid_least_bits
    if (most or least) and valid:
        with contextlib.suppress(ProtocolError):
            entry = stamp_txnid(entry, most, least)
    metadata_size = int.from_bytes(entry[:4], "big") if len(entry) >= 4 else 0
    return SendFrame(send.producer_id, send.sequence_id, send.num_messages,
                     send.highest_sequence_id, entry, valid, metadata_size)
