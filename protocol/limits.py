"""Wire limits and magic numbers of the Pulsar binary protocol (version 20).

Every length read from the peer is compared with these before anything is buffered.
"""

from __future__ import annotations

from typing import Final

MAX_MESSAGE_SIZE: Final = 5 * 1024 * 1024
"""Pulsar broker default ``maxMessageSize`` (5 MiB): the largest entry a producer may send."""

FRAME_PADDING: Final = 10 * 1024
"""Pulsar's ``Commands.MESSAGE_SIZE_FRAME_PADDING``: room for the command and headers around an
entry of MAX_MESSAGE_SIZE bytes."""

MAX_FRAME_SIZE: Final = MAX_MESSAGE_SIZE + FRAME_PADDING
"""Largest accepted ``totalSize`` (the u32 that counts every byte after itself)."""

PROTOCOL_VERSION: Final = 20
"""What pulsar-client 3.13 (C++ 4.2.0) speaks; ``ProtocolVersion.v20``."""

MAGIC_CRC32C: Final = 0x0E01
"""u16 that precedes the CRC32C of a payload frame's entry."""

MAGIC_BROKER_ENTRY_METADATA: Final = 0x0E02
"""u16 that precedes optional broker-entry metadata (broker -> client only)."""

__all__ = [
    "FRAME_PADDING",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "MAX_FRAME_SIZE",
    "MAX_MESSAGE_SIZE",
    "PROTOCOL_VERSION",
]
