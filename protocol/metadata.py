"""Entries, message metadata, batches and the Key_Shared hash.

Theory of operation
-------------------
An *entry* is what a producer's SEND carries after the checksum and what the broker stores and
sends back verbatim in MESSAGE::

    entry = [metadataSize:u32 big-endian][MessageMetadata][payload]

With broker entry metadata configured the broker stores it behind a prefix
(:mod:`protocol.entry_metadata`); every reader here accepts the stored form as well, at no cost
to an unprefixed entry.

The broker forwards the producer's bytes untouched (a batch is a batch only because the producer
set ``num_messages_in_batch``; the broker must never add it). The one exception is the
fixed-delay policy (PIP-437), which needs ``deliver_at_time`` rewritten:
:func:`rewrite_deliver_at` returns a *new* entry, so its CRC32C changes; the MESSAGE encoder
recomputes the CRC from the entry it sends unless given ``entry_crc`` -- never pass the CRC of
the original bytes for a rewritten entry.

:func:`parse_entry` is the broker's cheap read (one upb parse of the metadata, ~1 us) into an
immutable :class:`EntryInfo`. The publish path checks an entry first with
:func:`protocol.metadata_scan.scan_publish_metadata` (no protobuf at all, for the layouts clients
write); what that declines, or what the delay guard must read, it parses once with
:func:`check_publish_metadata` (the same verdicts as :func:`parse_metadata`, cheaper) and hands
that one parsed message on: :func:`entry_info` and :func:`rewrite_deliver_at` take it instead of
parsing the entry again. A batch payload is ``N x [u32 size][SingleMessageMetadata][data]``
and :func:`iter_batch` walks it. Every malformed input raises :class:`MalformedEntryError`
(a request-scoped error: SEND_ERROR, the connection survives).

Key_Shared routing follows Pulsar exactly (``StickyKeyConsumerSelector.makeStickyKeyHash`` ->
``Murmur3_32Hash.makeHash``): the hash is MurmurHash3 x86 32-bit of the sticky key bytes, seed 0,
masked with ``Integer.MAX_VALUE`` (0x7fffffff); hash-range selectors use the slot
``hash % 65536`` (``DEFAULT_RANGE_SIZE = 2 << 15``). The sticky key is the ordering key, else the
partition key (base64-decoded when ``partition_key_b64_encoded``, else its UTF-8 bytes), else the
literal ``b"NONE_KEY"`` (Pulsar's ``NONE_KEY``), so key-less messages share one slot as in Pulsar.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import mmh3
from crc32c import crc32c
from google.protobuf.message import DecodeError

from protocol import pulsar_pb as pb
from protocol.entry_metadata import entry_start, parse_prefix
from protocol.entry_shape import entry_shape_error
from protocol.errors import MalformedEntryError
from protocol.framing import slot_setter
from protocol.limits import MAGIC_BROKER_ENTRY_METADATA, MAX_MESSAGE_SIZE

_U32: Final = struct.Struct(">I")

NONE_KEY: Final = b"NONE_KEY"
"""Pulsar's sticky key for messages with neither ordering key nor partition key."""

KEY_SHARED_RANGE_SIZE: Final = 65536
"""Pulsar's ``StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE`` (2 << 15): hash ranges are 0..65535."""


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """What the broker needs from an entry's MessageMetadata, read once at publish time."""

    publish_time: int
    """Milliseconds since the epoch, set by the producer."""
    deliver_at_time: int | None
    """Milliseconds since the epoch; None when the message is not delayed."""
    num_messages_in_batch: int | None
    """None when the entry is not a batch (the field is absent)."""
    partition_key: str | None
    ordering_key: bytes | None
    sequence_id: int
    producer_name: str
    event_time: int
    highest_sequence_id: int
    partition_key_b64_encoded: bool = False

    @property
    def messages(self) -> int:
        """Messages in the entry: the FLOW permits it costs."""
        return self.num_messages_in_batch if self.num_messages_in_batch is not None else 1

    @property
    def sticky_key(self) -> bytes:
        """The Key_Shared routing key, as Pulsar's ``peekStickyKey`` computes it."""
        if self.ordering_key is not None:
            return self.ordering_key
        if self.partition_key is not None:
            if self.partition_key_b64_encoded:
                try:
                    return base64.b64decode(self.partition_key, validate=True)
                except (binascii.Error, ValueError):
                    pass  # not base64 after all: route on the text, never fail a dispatch
            return self.partition_key.encode()
        return NONE_KEY


def encode_entry(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """``[metadataSize][metadata][payload]``; raises ``EncodeError`` if a required field is unset."""
    md: bytes = metadata.SerializeToString()
    return b"".join((_U32.pack(len(md)), md, payload))


def split_entry(entry: bytes) -> tuple[bytes, memoryview]:
    """(serialized MessageMetadata, payload view) of an entry or of its stored form (a broker
    entry metadata prefix is skipped, :mod:`protocol.entry_metadata`)."""
    start, size = _metadata_span(entry)
    end = start + 4 + size
    return entry[start + 4 : end], memoryview(entry)[end:]


def _metadata_span(entry: bytes) -> tuple[int, int]:
    """(where the entry starts, its metadata size) in an entry or its stored form: a prefix is
    looked for only when the size read at 0 cannot be one (see protocol.entry_metadata)."""
    if len(entry) < 4:
        raise MalformedEntryError(f"entry of {len(entry)} bytes has no metadata size")
    (size,) = _u32_unpack_from(entry, 0)
    if size <= len(entry) - 4:
        return 0, size
    start = entry_start(entry)
    if start and len(entry) - start >= 4:
        (size,) = _u32_unpack_from(entry, start)
        if size <= len(entry) - start - 4:
            return start, size
    raise MalformedEntryError(f"metadata size {size} exceeds the entry ({len(entry)} bytes)")


def _metadata_bytes(entry: bytes) -> bytes:
    if len(entry) < 4:
        raise MalformedEntryError(f"entry of {len(entry)} bytes has no metadata size")
    (size,) = _u32_unpack_from(entry, 0)
    if size > len(entry) - 4:
        start, size = _metadata_span(entry)
        return entry[start + 4 : start + 4 + size]
    return entry[4 : 4 + size]


def parse_metadata(entry: bytes) -> pb.MessageMetadata:
    """The full MessageMetadata of an entry or its stored form (required fields checked, nested ones too: a
    consumer cannot parse metadata that misses any, so such an entry must never be stored)."""
    try:
        md: pb.MessageMetadata = _metadata_from_string(_metadata_bytes(entry))
    except DecodeError as exc:
        raise MalformedEntryError(f"message metadata does not parse: {exc}") from None
    if not md.IsInitialized():
        raise MalformedEntryError(
            "message metadata misses required fields: " + ", ".join(md.FindInitializationErrors())
        )
    return md


def check_publish_metadata(entry: bytes, max_message_size: int = MAX_MESSAGE_SIZE,
                           ) -> tuple[pb.MessageMetadata, int, bool]:
    """:func:`parse_metadata`'s verdicts at the publish path's price (one upb parse per SEND),
    and what the entry's counts and sizes claim checked against its payload
    (:func:`protocol.entry_shape.entry_shape_error`; *max_message_size* is the broker's
    ``maxMessageSize``): (the parsed metadata, messages in the entry, whether it is a chunk other
    than the last of its message).

    The three required top-level fields are tested with ``HasField``; the whole-tree
    ``IsInitialized`` walk (about as dear as the parse) runs only when the metadata holds a
    message-typed field (``properties``, ``encryption_keys``), the only places a nested
    required field can be missing. Whatever this accepts, :func:`parse_metadata` accepts.
    ``num_messages_in_batch`` defaults to 1 and ``num_chunks_from_msg`` to 0 when absent.
    """
    if len(entry) < 4:
        raise MalformedEntryError(f"entry of {len(entry)} bytes has no metadata size")
    (size,) = _u32_unpack_from(entry, 0)
    if size > len(entry) - 4:
        raise MalformedEntryError(f"metadata size {size} exceeds the entry ({len(entry)} bytes)")
    try:
        md: pb.MessageMetadata = _metadata_from_string(entry[4 : 4 + size])
    except DecodeError as exc:
        raise MalformedEntryError(f"message metadata does not parse: {exc}") from None
    has = md.HasField
    if not (has("publish_time") and has("sequence_id") and has("producer_name")) or (
        (md.properties or md.encryption_keys) and not md.IsInitialized()
    ):
        raise MalformedEntryError(
            "message metadata misses required fields: " + ", ".join(md.FindInitializationErrors())
        )
    messages = md.num_messages_in_batch
    compression = md.compression
    error = None
    if compression or has("num_chunks_from_msg") or has("chunk_id"):
        error = entry_shape_error(
            len(entry) - 4 - size, messages if has("num_messages_in_batch") else None,
            compression, md.uncompressed_size,
            md.num_chunks_from_msg if has("num_chunks_from_msg") else None,
            md.chunk_id if has("chunk_id") else None, md.total_chunk_msg_size, max_message_size)
    elif has("num_messages_in_batch"):  # an uncompressed batch: the fields read are its count
        error = entry_shape_error(len(entry) - 4 - size, messages, 0, 0, None, None, 0,
                                  max_message_size)
    if error is not None:
        raise MalformedEntryError(f"message metadata claims what the entry cannot hold: {error}")
    return md, messages, md.chunk_id < md.num_chunks_from_msg - 1


def parse_entry(entry: bytes) -> EntryInfo:
    """Read the fields the broker routes and schedules on (publish hot path, ~2.5 us), from an
    entry or its stored form."""
    return entry_info(parse_metadata(entry))


def entry_timestamp(entry: bytes) -> int:
    """When an entry was published, in ms: the broker's timestamp of its stored form when it
    has one, else the producer's ``publish_time`` (Pulsar's ``MessageImpl.getEntryTimestamp``,
    what its seek by time, message expiry and time-based backlog quota compare)."""
    if entry and entry[0] == _PREFIX_FIRST_BYTE:
        found = parse_prefix(entry)
        if found is not None and found.broker_timestamp is not None:
            return found.broker_timestamp
    return parse_metadata(entry).publish_time


def peek_dispatch(entry: bytes) -> tuple[int, int | None]:
    """(messages in the entry, ``deliver_at_time`` or None) of a stored entry: what a
    dispatcher needs for every entry it sends when it routes on no key (one upb parse, none of
    :class:`EntryInfo`'s fields built). Raises :class:`MalformedEntryError` as
    :func:`parse_metadata` does for an entry whose metadata does not parse."""
    try:   # _metadata_bytes' usual case inline (one call fewer per message sent)
        (size,) = _u32_unpack_from(entry, 0)
    except struct.error:   # under 4 bytes: _metadata_bytes raises what it must
        size = len(entry)
    raw = entry[4:4 + size] if size <= len(entry) - 4 else _metadata_bytes(entry)
    try:
        md: pb.MessageMetadata = _metadata_from_string(raw)
    except DecodeError as exc:
        raise MalformedEntryError(f"message metadata does not parse: {exc}") from None
    return md.num_messages_in_batch, (
        md.deliver_at_time if md.HasField("deliver_at_time") else None)


def entry_info(md: pb.MessageMetadata) -> EntryInfo:
    """The :class:`EntryInfo` of metadata already checked (:func:`parse_metadata` or
    :func:`check_publish_metadata`); raises :class:`MalformedEntryError` for a string field holding
    invalid UTF-8."""
    has = md.HasField
    partition_key = md.partition_key if has("partition_key") else None
    producer_name = md.producer_name
    # upb returns a proto2 string holding invalid UTF-8 as bytes; keep EntryInfo's types honest.
    if type(producer_name) is not str or (
        partition_key is not None and type(partition_key) is not str
    ):
        raise MalformedEntryError("message metadata holds a string that is not valid UTF-8")
    info: EntryInfo = _new_info(EntryInfo)
    _set_publish_time(info, md.publish_time)
    _set_deliver_at_time(info, md.deliver_at_time if has("deliver_at_time") else None)
    _set_num_messages_in_batch(
        info, md.num_messages_in_batch if has("num_messages_in_batch") else None
    )
    _set_partition_key(info, partition_key)
    _set_ordering_key(info, md.ordering_key if has("ordering_key") else None)
    _set_sequence_id(info, md.sequence_id)
    _set_producer_name(info, producer_name)
    _set_event_time(info, md.event_time)
    _set_highest_sequence_id(info, md.highest_sequence_id)
    _set_partition_key_b64_encoded(info, partition_key is not None and md.partition_key_b64_encoded)
    return info


_u32_unpack_from: Final = _U32.unpack_from
_PREFIX_FIRST_BYTE: Final = MAGIC_BROKER_ENTRY_METADATA >> 8
_metadata_from_string: Final = pb.MessageMetadata.FromString
_new_info: Final = object.__new__


# EntryInfo is frozen: parse_entry fills its slots through their descriptors (see slot_setter).
_set_publish_time: Final = slot_setter(EntryInfo, "publish_time")
_set_deliver_at_time: Final = slot_setter(EntryInfo, "deliver_at_time")
_set_num_messages_in_batch: Final = slot_setter(EntryInfo, "num_messages_in_batch")
_set_partition_key: Final = slot_setter(EntryInfo, "partition_key")
_set_ordering_key: Final = slot_setter(EntryInfo, "ordering_key")
_set_sequence_id: Final = slot_setter(EntryInfo, "sequence_id")
_set_producer_name: Final = slot_setter(EntryInfo, "producer_name")
_set_event_time: Final = slot_setter(EntryInfo, "event_time")
_set_highest_sequence_id: Final = slot_setter(EntryInfo, "highest_sequence_id")
_set_partition_key_b64_encoded: Final = slot_setter(EntryInfo, "partition_key_b64_encoded")


def rewrite_deliver_at(entry: bytes, deliver_at_ms: int,
                       metadata: pb.MessageMetadata | None = None) -> bytes:
    """A new entry whose metadata has ``deliver_at_time = deliver_at_ms``, payload unchanged.

    The metadata is re-serialized (unknown fields are kept), so the entry's CRC32C changes:
    encode MESSAGE frames for it without a stale ``entry_crc``. *metadata*, when given, is the
    entry's own already-checked metadata (not parsed again); it is changed in place.
    """
    md = parse_metadata(entry) if metadata is None else metadata
    md.deliver_at_time = deliver_at_ms
    _, payload = split_entry(entry)
    return encode_entry(md, bytes(payload))


def stamp_txnid(entry: bytes, most: int, least: int) -> bytes:
    """The entry with ``txnid_most_bits``/``txnid_least_bits`` in its metadata: a transactional
    SEND names its transaction in the command (the Go client nowhere else); the stored entry
    carries it, as the Java client writes it. Unchanged when the metadata names one already.
    Raises :class:`MalformedEntryError` when the metadata does not parse."""
    md = parse_metadata(entry)
    if md.HasField("txnid_most_bits") or md.HasField("txnid_least_bits"):
        return entry
    md.txnid_most_bits = most
    md.txnid_least_bits = least
    _, payload = split_entry(entry)
    return encode_entry(md, bytes(payload))


def entry_checksum(entry: bytes | bytearray | memoryview) -> int:
    """CRC32C (Castagnoli) of an entry, as carried after magic 0x0e01."""
    result: int = crc32c(entry)
    return result


def iter_batch(
    payload: bytes | memoryview, count: int
) -> Iterator[tuple[pb.SingleMessageMetadata, bytes]]:
    """Yield ``(SingleMessageMetadata, data)`` for each of the ``count`` messages of a batch
    payload (``count`` = the outer ``num_messages_in_batch``)."""
    view = memoryview(payload)
    pos = 0
    end = len(view)
    for index in range(count):
        if end - pos < 4:
            raise MalformedEntryError(f"batch message {index} of {count}: truncated size")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if size > end - pos:
            raise MalformedEntryError(
                f"batch message {index}: metadata size {size} exceeds payload"
            )
        try:
            single: pb.SingleMessageMetadata = pb.SingleMessageMetadata.FromString(
                view[pos : pos + size]
            )
        except DecodeError as exc:
            raise MalformedEntryError(
                f"batch message {index}: metadata does not parse: {exc}"
            ) from None
        if not single.HasField("payload_size"):
            raise MalformedEntryError(f"batch message {index}: payload_size missing")
        pos += size
        data_size = single.payload_size
        if data_size < 0 or data_size > end - pos:
            raise MalformedEntryError(
                f"batch message {index}: payload size {data_size} exceeds payload"
            )
        yield single, bytes(view[pos : pos + data_size])
        pos += data_size


def encode_batch_payload(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """A batch entry's payload, ``N x [u32 size][SingleMessageMetadata][data]`` (the inverse of
    :func:`iter_batch`). Each ``payload_size`` must equal ``len(data)``; the entry's own metadata
    carries ``num_messages_in_batch = N``."""
    parts: list[bytes] = []
    for index, (single, data) in enumerate(messages):
        if single.payload_size != len(data) or not single.HasField("payload_size"):
            raise ValueError(f"batch message {index}: payload_size is not len(data) = {len(data)}")
        md: bytes = single.SerializeToString()
        parts += (_U32.pack(len(md)), md, data)
    return b"".join(parts)


def murmur3_32_hash(key: bytes) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: murmur3 x86 32-bit, seed 0, ``& 0x7fffffff``."""
    result: int = mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF
    return result


def sticky_key_hash(key: bytes) -> int:
    """The Key_Shared hash slot of a sticky key, in ``range(65536)``: ``murmur3_32_hash % 65536``
    (what Pulsar's hash-range selectors compare with consumers' hash ranges)."""
    return murmur3_32_hash(key) % KEY_SHARED_RANGE_SIZE


__all__ = [
    "KEY_SHARED_RANGE_SIZE",
    "NONE_KEY",
    "EntryInfo",
    "check_publish_metadata",
    "encode_batch_payload",
    "encode_entry",
    "entry_checksum",
    "entry_info",
    "entry_timestamp",
    "iter_batch",
    "murmur3_32_hash",
    "parse_entry",
    "parse_metadata",
    "peek_dispatch",
    "rewrite_deliver_at",
    "split_entry",
    "sticky_key_hash",
]
