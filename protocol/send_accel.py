"""The hot loops: consecutive SENDs, the plain-message verdict, a run of MESSAGEs, the peek.

Theory of operation
-------------------
Five functions carry most of the event loop's codec work per unbatched SEND and per delivery:

* :func:`decode_sends` takes, from a position of a read's buffer, every whole frame that is a
  SEND of the usual layout (:func:`protocol.send_path.parse_send` accepts it) into a list of
  :class:`~protocol.send_path.SendFrame`, and returns the position of the first frame it does
  not take; :class:`protocol.frames.FrameDecoder` decodes that one the generic way, which
  judges it (and raises what it must). It never raises on any bytes.
* :func:`plain_metadata` is ``scan_publish_metadata(entry) is SINGLE``: the entry's metadata
  is one plain message (:mod:`protocol.metadata_scan`), which the producer takes without
  :meth:`broker.topics.topic.Topic.check_publish`.
* :func:`scan_publish_metadata` is :func:`protocol.metadata_scan.scan_publish_metadata`, what
  :meth:`~broker.topics.topic.Topic.check_publish` reads of every other entry (a delayed or
  keyed message, a batch): the C twin walks the layouts that carry no compression, chunk or
  ``properties`` field itself and hands those, and anything it does not take, to the
  reference, which answers.
* :func:`encode_message_run` makes the MESSAGE frames of one flush to one consumer (plain
  entries, first delivery): :func:`protocol.hot_commands.encode_message_run_py`'s bytes, in
  as few buffers as a vectored write allows (an entry of at least
  :data:`~protocol.framing.BY_REFERENCE_BYTES` stays a buffer of its own, the rest is joined:
  what :func:`~protocol.framing.coalesce` makes of the reference's buffers).
* :func:`peek_dispatch` is :func:`protocol.metadata.peek_dispatch`, a stored entry's batch size
  and deliver time, what a dispatcher reads of every entry it sends: the C twin walks a flat
  metadata's fields itself (no protobuf object built) and hands anything else (a sub-message,
  broker entry metadata, malformed bytes) to the reference, which answers or raises.

A sixth, :data:`keyed_run`, is the C twin of
:func:`broker.delayed.replace_by_key.classify_run` (what the replace-by-key policy finds in a
run of entries); its reference lives with the policy, which binds it (None when not built).
A seventh, :data:`ack_positions`, reads an ACK's message ids as positions from the command's
bytes when they all name whole entries (``ack_positions(Position, command)``, None for
anything else): a consumer's ACK of 1,000 ids took ~1.5 µs an id to read through the parsed
command's per-id objects. Its reference is that reading, in :mod:`broker.net.consumers`, which
binds it (None when not built: the ids are read one by one there).

Each has a pure-Python definition (``decode_sends_py``, ``plain_metadata_py`` here, the scan
in :mod:`protocol.metadata_scan`, ``encode_message_run_py`` beside its sibling encoders, ``peek_dispatch`` beside the other
metadata readers), the reference, and an optional C twin
(``protocol/_send_accel.c``, built with the package when a compiler is there; an install
without one runs the reference, with the same results). The C functions compute exactly what
the references do; tests/protocol/test_protocol_send_accel.py runs both over random, mutated
and truncated frames and runs of deliveries, and compares frames, positions, buffers and the
decoder's errors. :data:`ACCELERATED` says which one runs. Sans-IO, no state.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from crc32c import crc32c

from protocol.entry_shape import MIN_BATCHED_MESSAGE_BYTES
from protocol.framing import BY_REFERENCE_BYTES
from protocol.hot_commands import encode_message_run_py
from protocol.metadata import peek_dispatch as peek_dispatch_py
from protocol.metadata_scan import SINGLE
from protocol.metadata_scan import scan_publish_metadata as scan_publish_metadata_py
from protocol.send_path import SendFrame, parse_send

__all__ = ["ACCELERATED", "ack_positions", "decode_sends", "decode_sends_py", "encode_message_run",
           "keyed_run", "peek_dispatch", "plain_metadata", "plain_metadata_py",
           "scan_publish_metadata"]

_header_unpack_from: Final = struct.Struct(">II").unpack_from
_TYPE_TAG: Final = 0x08
_SEND_TYPE_BYTE: Final = 0x06  # BaseCommand starts "08 06" for a SEND


def decode_sends_py(buf: bytes | bytearray, pos: int, max_frame_size: int,
                    out: list[SendFrame]) -> int:
    """Append to *out* the SENDs of the usual layout that follow one another in *buf* from
    *pos* (``pos >= 0``), each a whole frame of at most *max_frame_size* bytes; the position
    of the first frame not taken."""
    append = out.append
    size = len(buf)
    while size - pos >= 12:
        total, command_size = _header_unpack_from(buf, pos)
        frame_end = pos + 4 + total
        if not (
            total <= max_frame_size
            and 4 <= command_size <= total - 4
            and frame_end <= size
            and buf[pos + 9] == _SEND_TYPE_BYTE
            and buf[pos + 8] == _TYPE_TAG
        ):
            break
        send = parse_send(buf, pos + 8, pos + 8 + command_size, frame_end)
        if send is None:
            break
        append(send)
        pos = frame_end
    return pos


def plain_metadata_py(entry: bytes) -> bool:
    """``scan_publish_metadata(entry) is SINGLE``: one plain message (no batch, chunk,
    ``deliver_at_time`` or length-delimited field after ``producer_name``)."""
    return scan_publish_metadata_py(entry) is SINGLE


decode_sends: Callable[[bytes | bytearray, int, int, list[SendFrame]], int]
plain_metadata: Callable[[bytes], bool]
encode_message_run: Callable[[int, int | None, Sequence[tuple[int, int]], Sequence[bytes]],
                             list[bytes]]
peek_dispatch: Callable[[bytes], tuple[int, int | None]]
scan_publish_metadata: Callable[[bytes, int], tuple[int, bool, bytes | None] | None]
#: ``keyed_run(reference_of_one, hash128, withheld, unknown, entries)``: see the module docstring.
keyed_run: Callable[..., tuple[list[Any], list[int], int]] | None
#: ``ack_positions(position_type, command)``: see the module docstring.
ack_positions: Callable[[type[Any], bytes], list[Any] | None] | None
try:
    from protocol import _send_accel  # type: ignore[attr-defined]
except ImportError:  # built without a compiler: the reference, same results
    ACCELERATED = False
    decode_sends = decode_sends_py
    plain_metadata = plain_metadata_py
    encode_message_run = encode_message_run_py
    peek_dispatch = peek_dispatch_py
    scan_publish_metadata = scan_publish_metadata_py
    keyed_run = None
    ack_positions = None
else:
    ACCELERATED = True
    decode_sends = partial(_send_accel.decode_sends, SendFrame, crc32c)
    plain_metadata = _send_accel.plain_metadata
    encode_message_run = partial(_send_accel.encode_message_run, crc32c, BY_REFERENCE_BYTES)
    peek_dispatch = partial(_send_accel.peek_dispatch, peek_dispatch_py)
    scan_publish_metadata = partial(_send_accel.scan_metadata, scan_publish_metadata_py, SINGLE,
                                    MIN_BATCHED_MESSAGE_BYTES)
    keyed_run = _send_accel.keyed_run
    ack_positions = _send_accel.ack_positions
