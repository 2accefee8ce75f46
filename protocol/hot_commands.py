"""The two per-message hot-path encoders, SEND_RECEIPT and MESSAGE, assembled by hand.

Theory of operation
-------------------
One SEND_RECEIPT goes out per published entry and one MESSAGE per delivery, so these two skip
``pb.BaseCommand`` and build the protobuf bytes from precomputed varints (:mod:`protocol.framing`)
and prefixes: SEND_RECEIPT is about 3x faster than building a pb object. Each has a pb-built
twin (:func:`reference_send_receipt`, :func:`reference_message`) that tests pin the fast output
to, byte for byte, and that documents what the bytes mean. :func:`encode_message_run_py` encodes
the MESSAGE frames of one flush to one consumer in one call, from a template: the consumer id and
partition are fixed for the run, each frame patches in its message id, size and CRC; it is the
reference of a C twin (:func:`protocol.send_accel.encode_message_run`, which callers use).
MESSAGE's CRC32C covers the entry exactly as sent (see :mod:`protocol.commands` for the frame
layout). Pure functions; callers import them from :mod:`protocol.commands`, which re-exports
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.entry_metadata import split_prefix
from protocol.errors import MalformedEntryError
from protocol.framing import CHECKSUM_HEADER as _CHECKSUM_HEADER
from protocol.framing import HEADER as _HEADER
from protocol.framing import ONE_BYTE as _ONE_BYTE
from protocol.framing import SMALL_VARINT as _SMALL
from protocol.framing import SMALL_VARINT_LIMIT as _SMALL_LIMIT
from protocol.framing import encode_command, encode_payload_command
from protocol.framing import set_message_id as _message_id
from protocol.framing import varint as _varint
from protocol.limits import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

__all__ = ["encode_message", "encode_message_head", "encode_message_run_py",
           "encode_send_receipt", "reference_message", "reference_send_receipt"]

_T = pb.BaseCommand
_PREFIX_FIRST_BYTE: Final = MAGIC_BROKER_ENTRY_METADATA >> 8


def encode_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int = 0
) -> bytes:
    """SEND_RECEIPT{producer_id, sequence_id, message_id{ledger, entry}, highest_sequence_id}.

    Hand-assembled (hot path, one per published entry); equals :func:`reference_send_receipt`.
    highest_sequence_id is always present, as the Java broker does.
    """
    # Every id below 16384 is one tuple index; larger ones take one call (see framing.varint).
    ledger = _SMALL[ledger_id] if 0 <= ledger_id < _SMALL_LIMIT else _varint(ledger_id)
    entry = _SMALL[entry_id] if 0 <= entry_id < _SMALL_LIMIT else _varint(entry_id)
    inner = b"".join(
        (
            b"\x08",
            _SMALL[producer_id] if 0 <= producer_id < _SMALL_LIMIT else _varint(producer_id),
            b"\x10",
            _SMALL[sequence_id] if 0 <= sequence_id < _SMALL_LIMIT else _varint(sequence_id),
            b"\x1a",
            _ONE_BYTE[len(ledger) + len(entry) + 2],  # MessageIdData: at most 22 bytes
            b"\x08",
            ledger,
            b"\x10",
            entry,
            b"\x20",
            _SMALL[highest_sequence_id]
            if 0 <= highest_sequence_id < _SMALL_LIMIT
            else _varint(highest_sequence_id),
        )
    )
    # inner is at most 57 bytes: header + BaseCommand{type=7, send_receipt(7)=LEN} prefix is
    # one precomputed lookup by its length.
    return _RECEIPT_PREFIX[len(inner)] + inner


# [totalSize][commandSize] 08 07 3a <len> for a SEND_RECEIPT whose sub-message has n bytes.
_RECEIPT_PREFIX: Final = tuple(
    _HEADER.pack(n + 8, n + 4) + b"\x08\x07\x3a" + bytes((n,)) for n in range(128)
)


def reference_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int = 0
) -> bytes:
    """pb-built twin of :func:`encode_send_receipt`, for tests and as documentation."""
    cmd = pb.BaseCommand(type=_T.SEND_RECEIPT)
    r = cmd.send_receipt
    r.producer_id = producer_id
    r.sequence_id = sequence_id
    _message_id(r.message_id, ledger_id, entry_id)
    r.highest_sequence_id = highest_sequence_id
    return encode_command(cmd)


def encode_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    entry: bytes,
    *,
    redelivery_count: int = 0,
    ack_set: Sequence[int] | None = None,
    partition: int | None = None,
    entry_crc: int | None = None,
    checksum: bool = True,
    broker_metadata: bool = False,
) -> bytes:
    """MESSAGE{consumer_id, message_id, [redelivery_count], [ack_set]} + 0x0e01 + CRC32C + entry.

    Hand-assembled (hot path, one per delivery); equals :func:`reference_message`.
    ``entry_crc`` is ``crc32c(entry)`` when the caller already knows it (e.g. from publish);
    it must describe these exact bytes. ``redelivery_count`` is sent only when non-zero.
    ``checksum=False`` omits magic and CRC (the client treats the CRC as optional).
    *entry* may be a stored form with broker entry metadata (:mod:`protocol.entry_metadata`):
    its prefix goes out before the checksum when ``broker_metadata`` is set, else it is
    dropped; the CRC covers the entry alone either way.
    """
    if entry and entry[0] == _PREFIX_FIRST_BYTE:  # an entry's first byte is 0 (its size < 16 MiB)
        prefix, entry = split_prefix(entry)
        if entry and entry[0] == _PREFIX_FIRST_BYTE:
            raise MalformedEntryError("broker entry metadata follows broker entry metadata")
        frame = encode_message(consumer_id, ledger_id, entry_id, entry,
                               redelivery_count=redelivery_count, ack_set=ack_set,
                               partition=partition, entry_crc=entry_crc, checksum=checksum)
        if not broker_metadata:
            return frame
        # the prefix goes right after the command, before the checksum, as Pulsar sends it
        total, command_size = _HEADER.unpack_from(frame, 0)
        end = 8 + command_size
        return b"".join((_HEADER.pack(total + len(prefix), command_size), frame[8:end], prefix,
                         frame[end:]))
    return encode_message_head(
        consumer_id, ledger_id, entry_id, entry, redelivery_count=redelivery_count,
        ack_set=ack_set, partition=partition, entry_crc=entry_crc, checksum=checksum,
    ) + entry


def encode_message_head(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    entry: bytes,
    *,
    redelivery_count: int = 0,
    ack_set: Sequence[int] | None = None,
    partition: int | None = None,
    entry_crc: int | None = None,
    checksum: bool = True,
) -> bytes:
    """The bytes of :func:`encode_message`'s frame that come before ``entry``: the frame is
    ``head + entry``. A caller that writes the two as separate buffers (a vectored write)
    sends a large entry without copying it into the frame. For a plain entry only: one stored
    with broker entry metadata goes through :func:`encode_message`."""
    ledger = _SMALL[ledger_id] if 0 <= ledger_id < _SMALL_LIMIT else _varint(ledger_id)
    entry_no = _SMALL[entry_id] if 0 <= entry_id < _SMALL_LIMIT else _varint(entry_id)
    consumer = _SMALL[consumer_id] if 0 <= consumer_id < _SMALL_LIMIT else _varint(consumer_id)
    if partition is None and not redelivery_count and not ack_set:
        # The common delivery: BaseCommand{type=9, message{consumer_id, message_id{l, e}}}.
        inner = b"".join(
            (
                b"\x08",
                consumer,
                b"\x12",
                _ONE_BYTE[len(ledger) + len(entry_no) + 2],
                b"\x08",
                ledger,
                b"\x10",
                entry_no,
            )
        )
        body_prefix = _MESSAGE_PREFIX[len(inner)]  # inner is at most 35 bytes here
    else:
        mid = b"\x08" + ledger + b"\x10" + entry_no
        if partition is not None:
            mid += b"\x18" + _varint(partition)
        parts = [b"\x08", consumer, b"\x12", _ONE_BYTE[len(mid)], mid]
        if redelivery_count:
            parts += (b"\x18", _varint(redelivery_count))
        if ack_set:
            for word in ack_set:  # proto2 repeated int64, not packed
                parts += (b"\x20", _varint(word))
        inner = b"".join(parts)
        body_prefix = b"\x08\x09\x4a" + _varint(len(inner))
    command_size = len(body_prefix) + len(inner)
    if not checksum:
        return b"".join(
            (_HEADER.pack(command_size + 4 + len(entry), command_size), body_prefix, inner)
        )
    if entry_crc is None:
        entry_crc = crc32c(entry)
    return b"".join(
        (
            _HEADER.pack(command_size + 10 + len(entry), command_size),
            body_prefix,
            inner,
            _CHECKSUM_HEADER.pack(MAGIC_CRC32C, entry_crc),
        )
    )


# BaseCommand prefix 08 09 4a <len> of a MESSAGE whose sub-message has n < 128 bytes.
_MESSAGE_PREFIX: Final = tuple(b"\x08\x09\x4a" + bytes((n,)) for n in range(128))


def encode_message_run_py(
    consumer_id: int,
    partition: int | None,
    positions: Sequence[tuple[int, int]],
    entries: Sequence[bytes],
) -> list[bytes]:
    """The MESSAGE frames of ``entries`` (at ``positions``: (ledger id, entry id) pairs) to one
    consumer, as the buffers of one write: each frame's head (what :func:`encode_message_head`
    makes) followed by its entry, so ``b"".join`` of the result is the frames back to back and
    a large entry can stay a buffer of its own (a vectored write). The reference of
    :func:`protocol.send_accel.encode_message_run` (C), which returns the same bytes in fewer
    buffers.

    For the common delivery only: plain entries (no broker entry metadata), no redelivery
    count, no ack set; the frames equal :func:`encode_message`'s (and so
    :func:`reference_message`'s) byte for byte. The consumer id and partition are encoded once
    per run, the ledger id once per ledger; per frame only the entry id, the sizes and the
    CRC32C change (every length below is one byte: a MessageIdData is at most 33 bytes, the
    message at most 46).
    """
    consumer = b"\x08" + _varint(consumer_id) + b"\x12"
    suffix = b"" if partition is None else b"\x18" + _varint(partition)
    # by MessageIdData length: BaseCommand prefix + consumer id + message id tag and length
    lead: dict[int, bytes] = {}
    lead_base = len(consumer) + 1
    pack_header = _HEADER.pack
    pack_checksum = _CHECKSUM_HEADER.pack
    small, small_limit = _SMALL, _SMALL_LIMIT
    parts: list[bytes] = []
    extend = parts.extend
    last_ledger: int | None = None
    ledger = b""
    fixed = 0
    for (ledger_id, entry_id), entry in zip(positions, entries, strict=True):
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger = b"\x08" + _varint(ledger_id) + b"\x10"
            fixed = len(ledger) + len(suffix)
        entry_no = small[entry_id] if 0 <= entry_id < small_limit else _varint(entry_id)
        mid = fixed + len(entry_no)
        head = lead.get(mid)
        if head is None:
            head = lead[mid] = _MESSAGE_PREFIX[lead_base + mid] + consumer + _ONE_BYTE[mid]
        command_size = lead_base + mid + 4
        extend((pack_header(command_size + 10 + len(entry), command_size), head, ledger,
                entry_no, suffix, pack_checksum(MAGIC_CRC32C, crc32c(entry)), entry))
    return parts


def reference_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    entry: bytes,
    *,
    redelivery_count: int = 0,
    ack_set: Sequence[int] | None = None,
    partition: int | None = None,
) -> bytes:
    """pb-built twin of :func:`encode_message`, for tests and as documentation."""
    cmd = pb.BaseCommand(type=_T.MESSAGE)
    m = cmd.message
    m.consumer_id = consumer_id
    _message_id(m.message_id, ledger_id, entry_id, partition=partition)
    if redelivery_count:
        m.redelivery_count = redelivery_count
    if ack_set:
        m.ack_set.extend(ack_set)
    return encode_payload_command(cmd, entry)
