"""Broker entry metadata (PIP-70): the prefix a broker puts before an entry it stores.

Theory of operation
-------------------
With ``brokerEntryMetadataInterceptors`` configured, the broker stores every entry as::

    [magic 0x0e02:u16][size:u32][BrokerEntryMetadata{broker_timestamp, index}]   the prefix
    [metadataSize:u32][MessageMetadata][payload]                                 the entry

as Pulsar's ``Commands.addBrokerEntryMetadata`` does. Without interceptors nothing is prefixed and
the stored bytes are the producer's entry, as before.

The prefix is unambiguous: an entry's first four bytes are its metadata size, at most a few MiB,
so its first two bytes are zero; a stored form starting ``0e 02`` is prefixed. That is why the
entry readers of :mod:`protocol.metadata` (``parse_metadata``, ``parse_entry``, ``peek_dispatch``,
``split_entry``) accept both forms without costing an unprefixed entry anything: a prefixed
form's metadata size reads as at least ``0x0e020000``, larger than any entry, and only that
refusal looks for the prefix (:func:`entry_start`). Whoever needs the entry alone calls
:func:`strip`; :func:`protocol.hot_commands.encode_message` keeps the prefix in the MESSAGE frame
(before the checksum, where clients look for it) only when asked, else strips it.

``index`` is the topic's message count (Pulsar's ``AppendIndexMetadataInterceptor``): the index
of the entry's last message, a batch of N advancing it by N, starting at 0 for the first
message. ``broker_timestamp`` is the broker's clock when the entry was appended, in ms.

Pure functions, sans-IO.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from protocol import pulsar_pb as pb
from protocol.errors import MalformedEntryError
from protocol.framing import varint
from protocol.limits import MAGIC_BROKER_ENTRY_METADATA

__all__ = [
    "APPEND_BROKER_TIMESTAMP",
    "APPEND_INDEX",
    "BROKER_ENTRY_METADATA_VERSION",
    "INTERCEPTORS",
    "BrokerEntryMetadata",
    "entry_start",
    "has_prefix",
    "parse_fields",
    "parse_prefix",
    "prefix",
    "split_prefix",
    "strip",
]

APPEND_BROKER_TIMESTAMP: Final = (
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor")
"""Pulsar's interceptor class that sets ``broker_timestamp``."""
APPEND_INDEX: Final = "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
"""Pulsar's interceptor class that sets ``index``."""
INTERCEPTORS: Final = frozenset((APPEND_BROKER_TIMESTAMP, APPEND_INDEX))
"""The ``brokerEntryMetadataInterceptors`` class names the broker knows."""
BROKER_ENTRY_METADATA_VERSION: Final = 18
"""The protocol version from which Pulsar sends broker entry metadata to a client that also
announced ``FeatureFlags.supports_broker_entry_metadata`` (``PulsarCommandSenderImpl``)."""

_HEAD: Final = struct.Struct(">HI")
_MAGIC_HI: Final = MAGIC_BROKER_ENTRY_METADATA >> 8
_MAGIC_LO: Final = MAGIC_BROKER_ENTRY_METADATA & 0xFF


@dataclass(frozen=True, slots=True)
class BrokerEntryMetadata:
    """The two fields of ``BrokerEntryMetadata`` (None when absent)."""

    broker_timestamp: int | None
    index: int | None


def prefix(entry: bytes, broker_timestamp: int | None, index: int | None) -> bytes:
    """*entry* with a broker entry metadata prefix holding the given fields (None: absent)."""
    body = b""
    if broker_timestamp is not None:
        body = b"\x08" + varint(broker_timestamp)
    if index is not None:
        body += b"\x10" + varint(index)
    return b"".join((_HEAD.pack(MAGIC_BROKER_ENTRY_METADATA, len(body)), body, entry))


def has_prefix(stored: bytes | bytearray | memoryview) -> bool:
    """Whether a stored form starts with broker entry metadata."""
    return len(stored) >= 2 and stored[0] == _MAGIC_HI and stored[1] == _MAGIC_LO


def entry_start(stored: bytes | bytearray | memoryview) -> int:
    """Where the entry begins in a stored form: 0 without a prefix, else just after it.
    Raises :class:`MalformedEntryError` for a prefix that does not fit the bytes."""
    if not has_prefix(stored):
        return 0
    if len(stored) < 6:
        raise MalformedEntryError("truncated broker entry metadata header")
    size: int = _HEAD.unpack_from(stored, 0)[1]
    if size > len(stored) - 6:
        raise MalformedEntryError(
            f"broker entry metadata size {size} exceeds the entry ({len(stored)} bytes)")
    return 6 + size


def split_prefix(stored: bytes) -> tuple[bytes, bytes]:
    """(the prefix, ``b""`` when there is none; the entry) of a stored form."""
    start = entry_start(stored)
    if not start:
        return b"", stored
    return stored[:start], stored[start:]


def strip(stored: bytes) -> bytes:
    """The entry of a stored form (the same object when it has no prefix)."""
    start = entry_start(stored)
    return stored[start:] if start else stored


def parse_prefix(stored: bytes) -> BrokerEntryMetadata | None:
    """The broker entry metadata of a stored form, or None when it has none. Raises
    :class:`MalformedEntryError` when the prefix does not parse."""
    start = entry_start(stored)
    if not start:
        return None
    return parse_fields(stored[6:start])


def parse_fields(data: bytes) -> BrokerEntryMetadata:
    """A serialized ``BrokerEntryMetadata`` (what follows the magic and size)."""
    try:
        md: pb.BrokerEntryMetadata = pb.BrokerEntryMetadata.FromString(data)
    except DecodeError as exc:
        raise MalformedEntryError(f"broker entry metadata does not parse: {exc}") from None
    has = md.HasField
    return BrokerEntryMetadata(md.broker_timestamp if has("broker_timestamp") else None,
                               md.index if has("index") else None)
