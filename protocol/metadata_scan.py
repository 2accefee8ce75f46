"""The publish check of an entry's MessageMetadata without protobuf: its tags read by regex.

Theory of operation
-------------------
Every SEND's metadata must be checked before the entry is stored: it must parse, carry the three
required fields (``producer_name``, ``sequence_id``, ``publish_time``) and, for the broker, say how
many messages the entry holds and whether it is a chunk other than the last.
:func:`protocol.metadata.check_publish_metadata` does that with one upb parse, but most of its
cost is reading the parsed object (``HasField``, attributes, repeated containers).
The entries a client sends are small variations of one shape, so
:func:`scan_publish_metadata` reads the same facts straight from the bytes with anchored regexes:

    0a L producer_name  10 v sequence_id  18 v publish_time      required, first, in this order
    then, any number of times and in any order:
      a varint field other than 1-3 (8 9 11 12 17 19 20 22-25 27-30), tag of its declaration
      a length-delimited field (4 5 6 7 14 15 16 18 26): tag, length of 1..4 bytes, value

Varints are of 1..10 bytes (upb takes any 10th byte below 0x80); a value must end inside the
metadata. What the counts and sizes claim (``num_messages_in_batch``, ``compression`` and
``uncompressed_size``, the chunk fields) goes through
:func:`protocol.entry_shape.entry_shape_error`, the very function the generic check raises from:
an entry it faults is declined here and refused there. A ``compression`` value protobuf does
not know (it keeps the last known one, which a regex cannot tell) is declined as well. A ``properties`` element (4) is accepted only as exactly ``0a L key 12 L value``: a
KeyValue with both of its required fields and nothing else. Anything else -- an unknown field,
``encryption_keys`` (nested required fields, left to upb), a second required field, a wrong wire
type, a non-canonical tag, a truncation -- returns None, and the caller checks the entry the
generic way, which accepts it or raises. So the scan never changes a verdict: whatever it accepts,
upb parses with every required field present, and the values it returns are those of
:func:`~protocol.metadata.check_publish_metadata` (pinned by property tests over random and
mutated metadata). Order and repetition are free because protobuf allows them too: a repeated
scalar keeps its last value, as does a repeated regex group. String fields are not checked for
UTF-8: upb does not refuse invalid UTF-8 in proto2 strings either.

What every protobuf serializer writes for a plain message, a batch, a compressed batch or a
delayed message (no length-delimited field after ``producer_name``) costs one regex match; each
length-delimited field (a key, properties, a schema version, a chunk's uuid) one more; a batch,
a compressed entry or a chunk one call of ``entry_shape_error``. Pure
function, sans-IO; the broker's publish path (``Topic.check_publish``) calls it.
"""

from __future__ import annotations

import re
import struct
from typing import Final

from protocol.entry_shape import MAX_EXPANSION, MIN_BATCHED_MESSAGE_BYTES, entry_shape_error
from protocol.limits import MAX_MESSAGE_SIZE
from protocol.send_path import varint_value

_V64: Final = rb"[\x80-\xff]{0,9}[\x00-\x7f]"
"""A varint of 1..10 bytes, as upb reads them (bits beyond the 64th of a 10th byte dropped)."""
_LENGTH: Final = rb"([\x80-\xff]{0,3}[\x00-\x7f])"
"""A length: a varint of 1..4 bytes (below 2**28)."""

_SCALARS: Final = (
    rb"(?:(?:\x60|[\x88\xa0\xb0\xb8\xc0\xc8\xf0]\x01)" + _V64  # values unread
    + rb"|\x58(" + _V64 + rb")"  # 11 num_messages_in_batch
    + rb"|\x98\x01(" + _V64 + rb")"  # 19 deliver_at_time
    + rb"|\xd8\x01(" + _V64 + rb")"  # 27 num_chunks_from_msg
    + rb"|\xe8\x01(" + _V64 + rb")"  # 29 chunk_id
    + rb"|\x40(" + _V64 + rb")"  # 8 compression
    + rb"|\x48(" + _V64 + rb")"  # 9 uncompressed_size
    + rb"|\xe0\x01(" + _V64 + rb")"  # 28 total_chunk_msg_size
    + rb")*+"
)
"""Any number of varint fields, in any order: 12 event_time, 17 partition_key_b64_encoded, 20
marker_type, 22-23 txnid bits, 24 highest_sequence_id, 25 null_value, 30 null_partition_key;
and, captured (a repeated group keeps its last match, as protobuf keeps the last value), the
seven whose values or presence the broker needs."""
_BYTES_FIELD: Final = rb"(\x22|\x2a|\x32|\x3a|\x72|\x7a|\x82\x01|\x92\x01|\xd2\x01)" + _LENGTH
"""The tag and length of a length-delimited field: 4 properties, 5 replicated_from, 6
partition_key, 7 replicate_to, 14 encryption_algo, 15 encryption_param, 16 schema_version, 18
ordering_key, 26 uuid. (13 encryption_keys is left to upb: its nested fields are required.)"""

# After producer_name: the other two required fields, then scalars up to the end of the
# metadata or up to the next length-delimited field; after that field's value, _RUN again.
_FIRST: Final = re.compile(
    rb"\x10" + _V64 + rb"\x18" + _V64 + _SCALARS + rb"(?:" + _BYTES_FIELD + rb")?", re.DOTALL)
_first_match: Final = _FIRST.match
_RUN: Final = re.compile(_SCALARS + rb"(?:" + _BYTES_FIELD + rb")?", re.DOTALL)
_run_match: Final = _RUN.match
_length_match: Final = re.compile(_LENGTH, re.DOTALL).match
_u32_unpack_from: Final = struct.Struct(">I").unpack_from
_from_bytes: Final = int.from_bytes
_PROPERTIES_TAG: Final = b"\x22"
_CODECS: Final = len(MAX_EXPANSION)


def int32_value(data: bytes) -> int:
    """An int32 field's value from its varint bytes: the low 32 bits, two's complement (as upb
    and protoc's parsers truncate)."""
    if len(data) <= 4:  # below 2**28: positive
        return varint_value(data)
    value = 0
    shift = 0
    for byte in data[:5]:  # bytes 6..10 hold bits 35 and up
        value |= (byte & 0x7F) << shift
        shift += 7
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def varint6_value(data: bytes) -> int:
    """The value of a complete 6-byte varint (2**35 to 2**42: a time in epoch milliseconds),
    its 7-bit groups gathered two lanes at a time (fewer bytecodes than one group per byte)."""
    x = _from_bytes(data, "little")
    x = (x & 0x7F007F007F) | (x >> 1 & 0x3F803F803F80)     # byte pairs -> 14-bit lanes
    return (x & 0x3FFF) | (x >> 2 & 0xFFFC000) | (x >> 4 & 0x3FFF0000000)


def int64_value(data: bytes) -> int:
    """An int64 field's value from its varint bytes: the low 64 bits, two's complement (as upb
    reads ``deliver_at_time``)."""
    if len(data) == 6:  # a time in epoch milliseconds (2**35 to 2**42): the usual one
        return varint6_value(data)
    value = varint_value(data)
    if len(data) < 9:   # below 2**56: positive
        return value
    value &= 0xFFFF_FFFF_FFFF_FFFF
    return value - (1 << 64) if value >> 63 else value


def scan_publish_metadata(entry: bytes, max_message_size: int = MAX_MESSAGE_SIZE,
                          ) -> tuple[int, bool, bytes | None] | None:
    """(messages in the entry, whether it is a chunk other than the last, the varint bytes of
    ``deliver_at_time`` -- :func:`int64_value` reads them, when a caller needs the time -- or
    None when it is not set) of an entry ``[metadataSize][MessageMetadata][payload]``, or None
    when the metadata is not of a layout this scan accepts (see the module docstring) and must be
    checked with :func:`protocol.metadata.check_publish_metadata`, which may raise.

    ``messages`` is ``num_messages_in_batch`` (1 when absent); the chunk test is
    ``chunk_id < num_chunks_from_msg - 1`` with both defaulting to 0. *max_message_size* is the
    broker's ``maxMessageSize`` (it bounds a chunked message's ``total_chunk_msg_size``).
    """
    entry_size = len(entry)
    if entry_size < 6:
        return None
    end = 4 + _u32_unpack_from(entry, 0)[0]
    if end > entry_size or entry[4] != 0x0A:  # producer_name first
        return None
    name_size = entry[5]
    if name_size < 0x80:
        match = _first_match(entry, 6 + name_size, end)
    else:
        length = _length_match(entry, 5, end)
        if length is None:
            return None
        match = _first_match(entry, length.end() + varint_value(length.group()), end)
    if match is None:
        return None
    if match.lastindex is None:  # nothing captured: one message, no length-delimited field
        return SINGLE if match.end() == end else None
    (messages, delayed, num_chunks, chunk_id, compression, uncompressed, total_chunk, tag,
     size) = match.groups()
    pos = match.end()
    while tag is not None:  # a length-delimited field: skip its value, match the run after it
        value_end = pos + (size[0] if len(size) == 1 else varint_value(size))
        if value_end > end or (tag == _PROPERTIES_TAG and not _is_key_value(entry, pos, value_end)):
            return None
        if value_end == end:
            pos = end
            break
        match = _run_match(entry, value_end, end)
        if match is None:
            return None
        pos = match.end()
        if match.lastindex is None:
            break
        (more_messages, more_delayed, more_chunks, more_chunk_id, more_compression,
         more_uncompressed, more_total_chunk, tag, size) = match.groups()
        # a field seen again keeps its last value, as protobuf does
        if more_messages is not None:
            messages = more_messages
        if more_delayed is not None:
            delayed = more_delayed
        if more_chunks is not None:
            num_chunks = more_chunks
        if more_chunk_id is not None:
            chunk_id = more_chunk_id
        if more_compression is not None:
            compression = more_compression
        if more_uncompressed is not None:
            uncompressed = more_uncompressed
        if more_total_chunk is not None:
            total_chunk = more_total_chunk
    if pos != end:
        return None
    count = None if messages is None else messages[0] if len(messages) == 1 else int32_value(messages)
    if compression is None and num_chunks is None and chunk_id is None:
        if count is None:
            return 1, False, delayed
        # an uncompressed batch: entry_shape_error's batch test inline (the common case)
        if count < 1 or count * MIN_BATCHED_MESSAGE_BYTES > entry_size - end:
            return None
        return count, False, delayed
    codec = 0
    if compression is not None:
        codec = compression[0] if len(compression) == 1 else int32_value(compression)
        if not 0 <= codec < _CODECS:
            return None  # an unknown value: protobuf keeps an earlier known one, if any
    chunks = None if num_chunks is None else int32_value(num_chunks)
    chunk = None if chunk_id is None else int32_value(chunk_id)
    if entry_shape_error(
            entry_size - end, count, codec,
            0 if uncompressed is None else varint_value(uncompressed) & 0xFFFFFFFF,
            chunks, chunk, 0 if total_chunk is None else int32_value(total_chunk),
            max_message_size) is not None:
        return None
    # a chunk passed entry_shape_error: num_chunks_from_msg is present, chunk_id defaults to 0
    partial = chunks is not None and (0 if chunk is None else chunk) < chunks - 1
    return 1 if count is None else count, partial, delayed


SINGLE: Final = (1, False, None)
"""What :func:`scan_publish_metadata` returns, this very tuple, for the metadata a plain message
carries (nothing the scan captures: one message, no chunk, no ``deliver_at_time``; no
length-delimited field after ``producer_name``): a caller may test it with ``is``."""


def _is_key_value(entry: bytes, pos: int, end: int) -> bool:
    """Whether ``entry[pos:end]`` is exactly ``0a L key 12 L value``: a KeyValue with both of its
    required fields and nothing else."""
    if end - pos >= 4 and entry[pos] == 0x0A and entry[pos + 1] < 0x80:  # a key below 128 bytes
        value_pos = pos + 2 + entry[pos + 1]
        if value_pos + 2 <= end and entry[value_pos] == 0x12 and entry[value_pos + 1] < 0x80:
            return value_pos + 2 + entry[value_pos + 1] == end
    for tag in (0x0A, 0x12):
        if pos >= end or entry[pos] != tag:
            return False
        length = _length_match(entry, pos + 1, end)
        if length is None:
            return False
        pos = length.end() + varint_value(length.group())
        if pos > end:
            return False
    return pos == end


__all__ = ["int32_value", "int64_value", "scan_publish_metadata", "varint6_value"]
