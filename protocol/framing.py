"""Frame assembly shared by the encoders: headers, checksum, hand-written varints.

Theory of operation
-------------------
A frame is ``[totalSize:u32][commandSize:u32][BaseCommand]`` and, for SEND/MESSAGE,
``[0x0e01:u16][crc32c:u32][entry]`` after it, where totalSize counts every byte after itself and
the CRC32C covers exactly the entry. :func:`encode_command` and :func:`encode_payload_command`
frame a ``pb.BaseCommand``; ``SerializeToString`` enforces proto2's required fields.
:func:`varint` is the protobuf base-128 encoding the hand-assembled hot encoders use.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, TypeVar

from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.limits import MAGIC_CRC32C

MessageId = tuple[int, int]
"""(ledger_id, entry_id)."""

HEADER: Final = struct.Struct(">II")
"""totalSize, commandSize."""
CHECKSUM_HEADER: Final = struct.Struct(">HI")
"""magic 0x0e01, crc32c."""
BY_REFERENCE_BYTES: Final = 16 * 1024
"""A buffer (an entry, a queued frame) this large goes to the socket by reference, its own
buffer of a vectored write, not copied into a frame or a joined write: below it a copy costs
less than another buffer of the write."""

ONE_BYTE: Final = tuple(bytes((i,)) for i in range(128))
"""``ONE_BYTE[n] == bytes((n,))``: a 1-byte varint or length (n < 128) without a call."""


def _slow_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int32/int64 negatives are sent as 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


SMALL_VARINT_LIMIT: Final = 1 << 14
_CONTINUED: Final = tuple(bytes((i | 0x80,)) for i in range(128))
"""``_CONTINUED[n]``: the 7 bits ``n`` with the continuation bit (a varint's non-final byte)."""
SMALL_VARINT: Final = ONE_BYTE + tuple(low + high for high in ONE_BYTE[1:] for low in _CONTINUED)
"""``SMALL_VARINT[n]`` is the varint of ``0 <= n < 16384`` (1-2 bytes): hot encoders index it
inline instead of calling :func:`varint` (~0.3 MB, built once at import: two-byte varints are
the low 7 bits continued, then the high ones, joined without a call per entry)."""
LOW_14_BITS: Final = tuple(low + high for high in _CONTINUED for low in _CONTINUED)
"""``LOW_14_BITS[n & 0x3FFF] + SMALL_VARINT[n >> 14]`` is the varint of ``16384 <= n < 2**28``."""
_VARINT_28_BITS: Final = 1 << 28


def varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative values as 10-byte two's complement (int32/int64)."""
    if 0 <= value < SMALL_VARINT_LIMIT:
        return SMALL_VARINT[value]
    if SMALL_VARINT_LIMIT <= value < _VARINT_28_BITS:
        # low 14 bits as two continuation bytes, then the (1-2 byte) rest
        return LOW_14_BITS[value & 0x3FFF] + SMALL_VARINT[value >> 14]
    return _slow_varint(value)


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Frame a command without payload. Raises ``EncodeError`` if a required field is unset."""
    body: bytes = cmd.SerializeToString()
    return HEADER.pack(len(body) + 4, len(body)) + body


def encode_payload_command(cmd: pb.BaseCommand, entry: bytes, *, checksum: bool = True) -> bytes:
    """Frame a command carrying an entry (SEND, MESSAGE), with magic 0x0e01 + CRC32C unless
    ``checksum`` is False (a peer below protocol v6)."""
    body: bytes = cmd.SerializeToString()
    return _frame_with_entry(body, entry, crc32c(entry) if checksum else None)


def _frame_with_entry(body: bytes, entry: bytes, crc: int | None) -> bytes:
    if crc is None:
        return b"".join((HEADER.pack(len(body) + 4 + len(entry), len(body)), body, entry))
    return b"".join(
        (
            HEADER.pack(len(body) + 10 + len(entry), len(body)),
            body,
            CHECKSUM_HEADER.pack(MAGIC_CRC32C, crc),
            entry,
        )
    )


def coalesce(buffers: list[bytes]) -> list[bytes]:
    """``buffers`` with every run of small ones joined; each one of at least
    :data:`BY_REFERENCE_BYTES` stays a buffer of its own (written by reference)."""
    parts: list[bytes] = []
    run: list[bytes] = []
    for buffer in buffers:
        if len(buffer) >= BY_REFERENCE_BYTES:
            if run:
                parts.append(run[0] if len(run) == 1 else b"".join(run))
                run = []
            parts.append(buffer)
        else:
            run.append(buffer)
    if run:
        parts.append(run[0] if len(run) == 1 else b"".join(run))
    return parts


def set_message_id(
    target: pb.MessageIdData,
    ledger_id: int,
    entry_id: int,
    *,
    partition: int | None = None,
    batch_index: int | None = None,
) -> pb.MessageIdData:
    target.ledgerId = ledger_id
    target.entryId = entry_id
    if partition is not None:
        target.partition = partition
    if batch_index is not None:
        target.batch_index = batch_index
    return target


__all__ = [
    "BY_REFERENCE_BYTES",
    "CHECKSUM_HEADER",
    "HEADER",
    "ONE_BYTE",
    "SMALL_VARINT",
    "SMALL_VARINT_LIMIT",
    "MessageId",
    "coalesce",
    "encode_command",
    "encode_payload_command",
    "set_message_id",
    "varint",
]


_Frozen = TypeVar("_Frozen")


def slot_setter(cls: type[_Frozen], name: str) -> Callable[[_Frozen, Any], None]:
    """The slot descriptor's setter of a frozen slotted dataclass field.

    A frozen dataclass's generated ``__init__`` goes through ``object.__setattr__`` once per
    field (about 0.1-0.15 us each). The decoder's hot paths build ``Frame`` and ``EntryInfo``
    with ``object.__new__`` and fill the slots through these setters instead; the instances are
    indistinguishable from ones built by calling the class.
    """
    setter: Callable[[_Frozen, Any], None] = vars(cls)[name].__set__
    return setter
