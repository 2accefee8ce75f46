"""What an entry's counts and sizes may claim: the one verdict both publish checks share.

Theory of operation
-------------------
A consumer trusts what an entry's MessageMetadata claims. It reads ``num_messages_in_batch``
messages out of the payload, allocates ``uncompressed_size`` bytes to decompress into and
``total_chunk_msg_size`` bytes to put a chunked message back together; the broker counts
``num_messages_in_batch`` as the entry's messages (backlog, permits, rates). A claim the payload
cannot back -- 0 or -5 messages, 2**31 of them, a 2 GiB decompression of 40 bytes, a chunk 7 of
3 -- makes counters go negative, leaves the entry in the backlog for good, or brings the
official consumer down. So the publish path refuses it: :func:`entry_shape_error` is called by
:func:`protocol.metadata.check_publish_metadata` (which raises it as
:class:`~protocol.errors.MalformedEntryError`) and by
:func:`protocol.metadata_scan.scan_publish_metadata` (which then declines the entry, so the first
one refuses it): the same function, so the two never disagree. Every bound is sound: no entry a
real producer writes is refused (they are derived from how the clients build entries, below).

* ``num_messages_in_batch`` (when present: the entry is a batch) is at least 1, and at most what
  the batch payload can hold at :data:`MIN_BATCHED_MESSAGE_BYTES` a message. The batch payload is
  ``uncompressed_size`` bytes when the entry is compressed, ``total_chunk_msg_size`` when it is an
  uncompressed chunk, else the payload itself. The messages of an uncompressed batch are not
  walked one by one: that costs about a microsecond a message, against one for the whole check.
* ``uncompressed_size`` of a compressed entry is at most the codec's largest expansion
  (:data:`MAX_EXPANSION`) of its compressed bytes: the payload, or for a chunk the whole
  message's (``total_chunk_msg_size``). It is not bounded by ``maxMessageSize``: the clients check
  the *compressed* size against it, so an unchunked 500 KB message that compresses under a
  100 KB limit goes out with ``uncompressed_size`` 500,000, and every chunk of a compressed
  message carries the whole message's uncompressed size.
* A chunk (``num_chunks_from_msg`` or ``chunk_id`` present) has ``num_chunks_from_msg >= 1``,
  ``0 <= chunk_id < num_chunks_from_msg`` and a ``total_chunk_msg_size`` no smaller than its own
  payload and no larger than ``num_chunks_from_msg`` chunks of the largest message (each chunk
  is an entry of at most ``maxMessageSize`` bytes). Its ``uuid`` is the consumers' business (a
  chunk without one is stored, as Pulsar stores it, and the clients group it under "").

Pure functions, sans-IO.
"""

from __future__ import annotations

from typing import Final

from protocol.errors import MalformedEntryError

__all__ = [
    "MAX_EXPANSION",
    "MIN_BATCHED_MESSAGE_BYTES",
    "check_send_messages",
    "entry_shape_error",
]

MIN_BATCHED_MESSAGE_BYTES: Final = 6
"""The fewest bytes one message of a batch payload takes: its u32 metadata size and a
SingleMessageMetadata holding only its one required field, ``payload_size`` (a tag byte and a
one-byte varint), with no data."""

MAX_EXPANSION: Final = (1, 255, 1032, 32768, 22)
"""Most bytes one compressed byte decodes to, by ``CompressionType`` (NONE, LZ4, ZLIB, ZSTD,
SNAPPY): LZ4's block format (what the clients write) 255, each match-length byte adding 255;
deflate 1032, zlib's documented limit; zstd 32768, a 4-byte RLE block decoding to 128 KiB;
snappy 22, a 3-byte copy producing 64 bytes."""


def entry_shape_error(payload_size: int, messages: int | None, compression: int,
                      uncompressed_size: int, num_chunks: int | None, chunk_id: int | None,
                      total_chunk_size: int, max_message_size: int) -> str | None:
    """Why an entry's counts and sizes cannot be true (the module docstring), or None.

    *payload_size* is the bytes after the metadata; *messages* is ``num_messages_in_batch`` or
    None when absent; *compression* a known ``CompressionType`` value (0 when absent);
    *num_chunks* and *chunk_id* None when absent (then ``total_chunk_size`` is not read unless
    the other one is present).
    """
    chunked = num_chunks is not None or chunk_id is not None
    if chunked:
        chunks = 0 if num_chunks is None else num_chunks
        chunk = 0 if chunk_id is None else chunk_id
        if chunks < 1:
            return f"num_chunks_from_msg {chunks} is below 1"
        if not 0 <= chunk < chunks:
            return f"chunk_id {chunk} is not below num_chunks_from_msg {chunks}"
        if not payload_size <= total_chunk_size <= chunks * max_message_size:
            return (f"total_chunk_msg_size {total_chunk_size} does not fit {chunks} chunks "
                    f"(this one of {payload_size} bytes, each at most {max_message_size})")
    compressed_size = total_chunk_size if chunked else payload_size
    if compression:
        limit = MAX_EXPANSION[compression] * compressed_size
        if uncompressed_size > limit:
            return (f"uncompressed_size {uncompressed_size} exceeds what {compressed_size} "
                    f"compressed bytes can hold ({limit})")
    if messages is not None:
        if messages < 1:
            return f"num_messages_in_batch {messages} is below 1"
        batch_size = uncompressed_size if compression else compressed_size
        if messages * MIN_BATCHED_MESSAGE_BYTES > batch_size:
            return (f"num_messages_in_batch {messages} exceeds what a batch of {batch_size} "
                    f"bytes can hold ({batch_size // MIN_BATCHED_MESSAGE_BYTES})")
    return None


def check_send_messages(num_messages: int, messages: int) -> None:
    """A SEND's ``num_messages`` is between 1 and the *messages* its entry holds (clients send
    the batch's size, or leave it at its default 1); raises :class:`MalformedEntryError`."""
    if not 1 <= num_messages <= messages:
        raise MalformedEntryError(
            f"num_messages {num_messages} of the SEND is not between 1 and the entry's "
            f"{messages} messages")
