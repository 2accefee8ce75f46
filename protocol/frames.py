"""Incremental, sans-IO decoder of Pulsar binary-protocol frames.

Theory of operation
-------------------
Bytes go in with :meth:`FrameDecoder.receive_data`; complete frames come out of
:meth:`FrameDecoder.next_frame`, which returns :data:`NEED_DATA` when the buffer holds no complete
frame. Call ``next_frame`` until it returns ``NEED_DATA`` after every ``receive_data``. Any split
of the same byte stream yields the same frames. Nothing here does IO or keeps time::

    decoder = FrameDecoder()                       # one per connection
    def data_received(data: bytes) -> None:
        decoder.receive_data(data)
        while (frame := decoder.next_frame()) is not NEED_DATA:   # may raise ConnectionFatalError
            handle(frame)

Wire layout (all integers big-endian; Pulsar's binary protocol documentation, "Framing")::

    simple:  [totalSize:u32][commandSize:u32][BaseCommand]
    payload: [totalSize:u32][commandSize:u32][BaseCommand]
             [0x0e02:u16][size:u32][BrokerEntryMetadata]      (optional, broker -> client only)
             [0x0e01:u16][crc32c:u32]                         (optional)
             [metadataSize:u32][MessageMetadata][payload]     <- Frame.entry, what the CRC covers

:meth:`FrameDecoder.receive_frames` does both in one call per socket read and returns a list;
SENDs of the usual layout come out as protobuf-free :class:`~protocol.send_path.SendFrame`
tuples (:func:`~protocol.send_path.parse_send`), everything else as the same :class:`Frame`.
It never raises: the frames before a fault are returned and :attr:`FrameDecoder.error` is set.

Rules, in the order they are applied:

1. ``totalSize`` is checked against ``max_frame_size`` as soon as its 4 bytes are buffered,
   before any of the body is: a TLS ClientHello (``16 03 ..``), an HTTP request (``GET ``) or a
   ``0xFFFFFFFF`` length is refused at once, in constant memory.
2. ``commandSize <= totalSize - 4`` is checked from the 8-byte header, again before the body.
3. The command must parse as a ``BaseCommand`` whose ``type`` is known, whose required fields
   are all present, whose sub-message for that type is present (PING/PONG may omit their
   empty one) and whose string fields are valid UTF-8. Otherwise :class:`MalformedFrameError`,
   except for a ``type`` number the proto does not declare (a newer protocol's command): the
   frame is consumed whole and comes out as :class:`UnknownCommand`, which the broker can
   answer; the stream goes on.
4. Bytes after the command make it a payload frame: optional broker-entry metadata, optional
   magic+CRC32C, then the entry, whose ``metadataSize`` must lie within the frame.
5. A CRC mismatch is *not* raised: ``Frame.checksum_valid`` is False and the broker answers
   SEND_ERROR ChecksumError while the connection stays open.

Every violation raises a :class:`~protocol.errors.ConnectionFatalError` subclass. Once one was
raised the decoder is dead: it drops further input and raises the same error again, so a peer
that keeps sending garbage cannot grow its memory.

Buffering: when no partial frame is pending, a ``bytes`` chunk is adopted without copying and
frames are sliced straight out of it (a read offset, no per-frame buffer copy). A small tail
cut by a chunk boundary is joined to the next chunk (by :meth:`FrameDecoder.receive_frames`: to
the part of it that completes that frame only, the rest of the chunk then adopted as it is; by
:meth:`FrameDecoder.receive_data`: to the whole chunk); only a large frame arriving in many chunks
is assembled in a ``bytearray`` (compacted once the consumed prefix dominates), so assembling a
5 MiB frame from 64 KiB reads stays linear.

Speed (``bench/codec.py``; target 300,000 SEND frames/s on one core). ``Frame`` keeps the
contract's shape: ``Frame.command`` is always a real, fully parsed ``pb.BaseCommand`` (a upb
parse costs ~0.3 us; nothing is lazy). What the SEND hot path saves instead:

* the required-field check of a SEND is proven from its serialized bytes by one regex match
  (``command_check.send_is_complete``) rather than ``HasField``/``IsInitialized`` calls (~1.5 us);
  anything unusual falls back to the generic check, so the verdict is identical;
* a payload frame carrying a checksum and no broker entry metadata is handled inline;
* frames are built through the slot descriptors of the frozen dataclass (``_new_frame``),
  half the cost of its generated ``__init__``; the objects are identical.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from crc32c import crc32c
from google.protobuf.message import DecodeError

from protocol import pulsar_pb as pb
from protocol.command_check import parse_command
from protocol.command_check import send_is_complete as _send_is_complete
from protocol.command_check import validate_command as _validate
from protocol.errors import (
    ConnectionFatalError,
    ForeignProtocolError,
    FrameTooLargeError,
    MalformedFrameError,
    UnknownCommandTypeError,
)
from protocol.framing import slot_setter
from protocol.limits import MAX_FRAME_SIZE
from protocol.send_accel import decode_sends as _decode_sends
from protocol.send_path import SendFrame
from protocol.send_path import declined_send as _declined_send


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    ``entry`` is set for payload frames only: ``[metadataSize:u32][MessageMetadata][payload]``,
    the bytes the checksum covers, stored as-is as the ledger entry and sent back in MESSAGE.
    ``checksum_valid`` is None when the frame carried no 0x0e01 magic, False on a CRC mismatch.
    ``broker_entry_metadata`` is the raw ``BrokerEntryMetadata`` bytes when 0x0e02 was present.
    """

    command: pb.BaseCommand
    entry: bytes | None = None
    checksum_valid: bool | None = None
    broker_entry_metadata: bytes | None = None


@dataclass(frozen=True, slots=True)
class UnknownCommand:
    """A frame whose command type the proto does not declare (rule 3): only its number is
    known, so no field of it (a request id) can be read."""

    type_number: int


class _Sentinel(Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.value


NEED_DATA: Final = _Sentinel.NEED_DATA
"""Returned by :meth:`FrameDecoder.next_frame` when no complete frame is buffered."""

NeedData = Literal[_Sentinel.NEED_DATA]

_U32: Final = struct.Struct(">I")
_HEADER: Final = struct.Struct(">II")
_MAGIC_CRC_HI, _MAGIC_CRC_LO = 0x0E, 0x01
_MAGIC_BEM_LO = 0x02
_SEND_TYPE_BYTE = pb.BaseCommand.SEND

# First 4 bytes of an HTTP/1.x request line or the HTTP/2 preface, as a u32 length.
_HTTP_PREFIXES: Final = frozenset(
    {b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC", b"PRI "}
)
# Compact the assembly buffer once this many consumed bytes sit in front of the pending ones.
_COMPACT_AFTER: Final = 64 * 1024
# Pending bytes below this are re-joined with the next chunk into one ``bytes``; above it (a
# large frame arriving in many chunks) they go to a bytearray, so assembly stays linear.
_SMALL_PENDING: Final = 64 * 1024
_from_string: Final = pb.BaseCommand.FromString
_SEND: Final = pb.BaseCommand.SEND


def _too_large(head: bytes, size: int, limit: int) -> FrameTooLargeError:
    """Diagnose an over-limit length from the 4 bytes that carried it."""
    if head[0] == 0x16 and head[1] == 0x03:  # TLS record: handshake, version 3.x
        return ForeignProtocolError("tls", size, limit)
    if head in _HTTP_PREFIXES:
        return ForeignProtocolError("http", size, limit)
    return FrameTooLargeError(size, limit)




class FrameDecoder:
    """Bytes in, :class:`Frame` objects out. Not thread-safe; one per connection."""

    __slots__ = ("_buf", "_error", "_max_frame_size", "_pos")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        if max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8 bytes")
        self._max_frame_size = max_frame_size
        # Either an adopted immutable chunk (bytes) or an assembly buffer (bytearray); the bytes
        # before _pos are consumed.
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._error: ConnectionFatalError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (0 once the decoder failed)."""
        return len(self._buf) - self._pos

    @property
    def failed(self) -> bool:
        """True once a connection-fatal error was raised (or is about to be)."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes from the peer. Never raises; errors surface from :meth:`next_frame`."""
        if self._error is not None or not data:
            return  # a dead decoder holds no more memory whatever the peer sends
        buf = self._buf
        pos = self._pos
        pending = len(buf) - pos
        if pending <= 0:
            # Nothing pending: adopt the chunk. A bytearray/memoryview must be copied, the
            # caller may reuse it.
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
        elif pending < _SMALL_PENDING:
            # The usual case: the tail of a frame cut by the chunk boundary. Joining it to the
            # chunk as one bytes object costs the same copy as appending to a bytearray, and
            # keeps later slices single copies.
            head = buf[pos:]
            self._buf = (head if type(head) is bytes else bytes(head)) + data
            self._pos = 0
        elif type(buf) is bytes:
            # A large frame in the making: assemble it in a bytearray (amortised appends).
            assembly = bytearray(memoryview(buf)[pos:])
            assembly += data
            self._buf = assembly
            self._pos = 0
        else:
            assert isinstance(buf, bytearray)
            if pos >= _COMPACT_AFTER and pos * 2 >= len(buf):
                del buf[:pos]
                self._pos = 0
            buf += data
        self._check_pending_header()

    def _check_pending_header(self) -> None:
        """Apply rules 1 and 2 to the first pending header so that an impossible length is
        refused (and its buffer dropped) even if the caller keeps feeding before reading."""
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < 4:
            return
        try:
            (total,) = _U32.unpack_from(buf, pos)
            if total > self._max_frame_size:
                raise _too_large(bytes(buf[pos : pos + 4]), total, self._max_frame_size)
            if avail >= 8:
                (command_size,) = _U32.unpack_from(buf, pos + 4)
                if command_size > total - 4:
                    raise MalformedFrameError(
                        f"command size {command_size} exceeds frame size {total} - 4"
                    )
        except ConnectionFatalError as exc:
            self._fail(exc)

    def _fail(self, exc: ConnectionFatalError) -> None:
        self._error = exc
        self._buf = b""
        self._pos = 0

    @property
    def error(self) -> ConnectionFatalError | None:
        """The connection-fatal error once the stream turned invalid, else None."""
        return self._error

    def receive_frames(
        self, data: bytes | bytearray | memoryview, *, send_frames: bool = True
    ) -> list[Frame | SendFrame | UnknownCommand]:
        """:meth:`receive_data`, then every complete frame, in one call (one per socket read).

        With ``send_frames`` a SEND of the usual layout comes out as a
        :class:`~protocol.send_path.SendFrame` (no protobuf object, see
        :func:`~protocol.send_path.parse_send`), and a SEND the fast path declines as one too,
        from the generic decode (:func:`~protocol.send_path.declined_send`); any other frame as
        the :class:`Frame` that :meth:`next_frame` gives. Never raises: when the
        stream turns invalid, the frames before the fault are returned and :attr:`error` is set;
        handle them, then close the connection with that error.

        A chunk that completes a small pending frame and carries more is not joined with it
        whole: the pending bytes are joined with the rest of that one frame, which is decoded,
        and the chunk is then adopted from the next frame on (one copy of a frame, not of
        the chunk).
        """
        if send_frames and self._pos == len(self._buf) and type(data) is bytes \
                and self._error is None and len(data) >= 12:
            # Nothing pending and the read is one whole SEND of the usual layout (a lone
            # publisher's read): parsed from the chunk itself, as _decode would parse it.
            total = _header_unpack_from(data, 0)[0]
            if total + 4 == len(data):
                sends: list[Frame | SendFrame | UnknownCommand] = []
                if _decode_sends(data, 0, self._max_frame_size, sends) == len(data):  # type: ignore[arg-type]
                    self._buf = b""
                    self._pos = 0
                    return sends
        split = self._completing(data)
        if split:
            self.receive_data(data[:split])
            frames = self._decode(send_frames)
            if self._error is not None:
                return frames
            if self._pos == len(self._buf) and isinstance(data, bytes):  # adopt the rest
                self._buf = data
                self._pos = split
                self._check_pending_header()
            else:  # not reached with a frame exactly completed; kept for safety
                self.receive_data(memoryview(data)[split:])
            frames += self._decode(send_frames)
            return frames
        self.receive_data(data)
        return self._decode(send_frames)

    def _completing(self, data: bytes | bytearray | memoryview) -> int:
        """The bytes of *data* that complete the pending frame, when that frame is small
        (below the re-join bound), its length is known and valid, and *data* (an immutable
        ``bytes``, adopted as is) holds more after it; else 0."""
        if type(data) is not bytes or self._error is not None:
            return 0
        buf = self._buf
        pos = self._pos
        pending = len(buf) - pos
        if pending < 4 or pending >= _SMALL_PENDING:
            return 0
        (total,) = _U32.unpack_from(buf, pos)
        if total > self._max_frame_size:
            return 0  # refused by the usual path
        need = total + 4 - pending
        return need if 0 < need < len(data) else 0

    def _decode(self, send_frames: bool) -> list[Frame | SendFrame | UnknownCommand]:
        """Every complete frame of the buffer (:meth:`receive_frames`)."""
        frames: list[Frame | SendFrame | UnknownCommand] = []
        append = frames.append
        max_size = self._max_frame_size
        next_frame = self.next_frame
        while self._error is None:
            if send_frames:
                # Consecutive SENDs of the usual layout (protocol.send_accel: C when built).
                buf = self._buf
                start = self._pos
                pos = _decode_sends(buf, start, max_size, frames)  # type: ignore[arg-type]
                if pos != start:
                    if pos == len(buf):
                        self._buf = b""
                        self._pos = 0
                        break  # nothing left to read
                    self._pos = pos
            try:
                frame = next_frame()
            except ConnectionFatalError:
                break  # recorded in self._error
            if frame is NEED_DATA:
                break
            if send_frames and type(frame) is Frame and frame.command.type == _SEND_TYPE_BYTE:
                # every SEND comes out the same way: one the fast path declined too
                append(_declined_send(frame.command.send, frame.entry, frame.checksum_valid))
                continue
            append(frame)
        return frames

    def next_frame(self) -> Frame | UnknownCommand | NeedData:
        """The next complete frame (:class:`UnknownCommand` for an undeclared command type),
        or :data:`NEED_DATA`.

        Raises a :class:`~protocol.errors.ConnectionFatalError` subclass (and keeps raising it)
        when the stream is invalid.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        size = len(buf)
        if size - pos < 8:
            if size - pos >= 4:
                self._check_pending_header()
                if self._error is not None:
                    raise self._error
            return NEED_DATA
        total, command_size = _header_unpack_from(buf, pos)
        if total > self._max_frame_size or command_size > total - 4:
            self._check_pending_header()
            assert self._error is not None
            raise self._error
        frame_end = pos + 4 + total
        if frame_end > size:
            return NEED_DATA
        command_end = pos + 8 + command_size
        raw = buf[pos + 8 : command_end]
        frame: Frame | UnknownCommand
        try:
            try:
                cmd: pb.BaseCommand = _from_string(raw)
            except DecodeError as exc:
                raise MalformedFrameError(f"command does not parse as BaseCommand: {exc}") from None
            # The SEND hot path proves its required fields from the bytes (~0.2 us, see
            # command_check.send_is_complete) instead of IsInitialized (~0.5 us) and friends.
            if (
                cmd.type != _SEND
                or _send_is_complete(raw) is None
                or raw[3] + 4 != len(raw)  # nothing but type and send in the command
            ):
                _validate(cmd)
            if command_end == frame_end:
                frame = _new_frame(cmd, None, None, None)
            elif (
                frame_end - command_end >= 10
                and buf[command_end] == _MAGIC_CRC_HI
                and buf[command_end + 1] == _MAGIC_CRC_LO
            ):
                # The common payload frame: checksum, no broker entry metadata.
                (expected,) = _u32_unpack_from(buf, command_end + 2)
                entry = buf[command_end + 6 : frame_end]
                if type(entry) is not bytes:  # assembled in a bytearray
                    entry = bytes(entry)
                (metadata_size,) = _u32_unpack_from(entry, 0)
                if metadata_size > len(entry) - 4:
                    raise MalformedFrameError(
                        f"metadata size {metadata_size} exceeds the {len(entry) - 4} bytes "
                        "left in the frame"
                    )
                frame = _new_frame(cmd, entry, crc32c(entry) == expected, None)
            else:
                frame = _payload_frame(cmd, buf, command_end, frame_end)
        except UnknownCommandTypeError as exc:
            frame = UnknownCommand(exc.type_number)  # consumed whole; the stream is intact
        except ConnectionFatalError as exc:
            self._fail(exc)
            raise
        if frame_end == size:
            self._buf = b""  # release the chunk / assembly buffer
            self._pos = 0
        else:
            self._pos = frame_end
        return frame


def _payload_frame(cmd: pb.BaseCommand, buf: bytes | bytearray, pos: int, frame_end: int) -> Frame:
    """Rule 4 in full: optional broker entry metadata, optional checksum, then the entry."""
    broker_entry_metadata: bytes | None = None
    if frame_end - pos >= 2 and buf[pos] == _MAGIC_CRC_HI and buf[pos + 1] == _MAGIC_BEM_LO:
        if frame_end - pos < 6:
            raise MalformedFrameError("truncated broker entry metadata header")
        (bem_size,) = _U32.unpack_from(buf, pos + 2)
        if bem_size > frame_end - pos - 6:
            raise MalformedFrameError(f"broker entry metadata size {bem_size} exceeds the frame")
        broker_entry_metadata = bytes(buf[pos + 6 : pos + 6 + bem_size])
        pos += 6 + bem_size
    checksum_valid: bool | None = None
    if frame_end - pos >= 2 and buf[pos] == _MAGIC_CRC_HI and buf[pos + 1] == _MAGIC_CRC_LO:
        if frame_end - pos < 6:
            raise MalformedFrameError("truncated checksum")
        (expected,) = _U32.unpack_from(buf, pos + 2)
        entry = bytes(buf[pos + 6 : frame_end])
        checksum_valid = crc32c(entry) == expected
    else:
        entry = bytes(buf[pos:frame_end])
    if len(entry) < 4:
        raise MalformedFrameError(f"payload of {len(entry)} bytes has no metadata size")
    (metadata_size,) = _U32.unpack_from(entry, 0)
    if metadata_size > len(entry) - 4:
        raise MalformedFrameError(
            f"metadata size {metadata_size} exceeds the {len(entry) - 4} bytes left in the frame"
        )
    return _new_frame(cmd, entry, checksum_valid, broker_entry_metadata)


_header_unpack_from: Final = _HEADER.unpack_from
_u32_unpack_from: Final = _U32.unpack_from
_frame_new: Final = object.__new__
# Frame is frozen: the hot path fills its slots through their descriptors (see slot_setter).

_set_command: Final = slot_setter(Frame, "command")
_set_entry: Final = slot_setter(Frame, "entry")
_set_checksum_valid: Final = slot_setter(Frame, "checksum_valid")
_set_broker_entry_metadata: Final = slot_setter(Frame, "broker_entry_metadata")


def _new_frame(
    command: pb.BaseCommand,
    entry: bytes | None,
    checksum_valid: bool | None,
    broker_entry_metadata: bytes | None,
) -> Frame:
    frame: Frame = _frame_new(Frame)
    _set_command(frame, command)
    _set_entry(frame, entry)
    _set_checksum_valid(frame, checksum_valid)
    _set_broker_entry_metadata(frame, broker_entry_metadata)
    return frame


__all__ = ["NEED_DATA", "Frame", "FrameDecoder", "NeedData", "SendFrame", "UnknownCommand",
           "parse_command"]
