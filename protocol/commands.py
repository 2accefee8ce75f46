"""Encoders for every Pulsar command Horae sends, and for the client side (tests, benchmarks).

Theory of operation
-------------------
Each ``encode_*`` returns the complete frame, ready for ``transport.write``::

    simple:  [totalSize:u32][commandSize:u32][BaseCommand]
    payload: [totalSize:u32][commandSize:u32][BaseCommand][0x0e01:u16][crc32c:u32][entry]

``entry`` is ``[metadataSize:u32][MessageMetadata][payload]`` exactly as the producer sent it (see
:mod:`protocol.metadata`); the CRC32C covers the entry and nothing else. The client verifies a
CRC when the 0x0e01 magic is present and *acks away* a message whose CRC mismatches, so the CRC
must be computed over the bytes actually sent: after :func:`protocol.metadata.rewrite_deliver_at`
changes an entry, pass no stale ``entry_crc`` (the encoder then recomputes it).

Most encoders build a ``pb.BaseCommand`` and ``SerializeToString()`` it, which also enforces
proto2's required fields. The two per-message hot paths, :func:`encode_send_receipt` and
:func:`encode_message`, assemble the protobuf varints by hand (about 4x faster); tests pin their
output byte-for-byte to the pb-built encoding (:func:`_reference_send_receipt`,
:func:`_reference_message`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from crc32c import crc32c

from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.limits import MAGIC_CRC32C, PROTOCOL_VERSION

MessageId = tuple[int, int]
"""(ledger_id, entry_id)."""

_HEADER: Final = struct.Struct(">II")
_CHECKSUM_HEADER: Final = struct.Struct(">HI")
_T = pb.BaseCommand

# --------------------------------------------------------------------------- varints

_ONE_BYTE: Final = tuple(bytes((i,)) for i in range(128))


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative values as 10-byte two's complement (int32/int64)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --------------------------------------------------------------------------- framing


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Frame a command without payload. Raises ``EncodeError`` if a required field is unset."""
    body: bytes = cmd.SerializeToString()
    return _HEADER.pack(len(body) + 4, len(body)) + body


def encode_payload_command(cmd: pb.BaseCommand, entry: bytes, *, checksum: bool = True) -> bytes:
    """Frame a command carrying an entry (SEND, MESSAGE), with magic 0x0e01 + CRC32C unless
    ``checksum`` is False (a peer below protocol v6)."""
    body: bytes = cmd.SerializeToString()
    return _frame_with_entry(body, entry, crc32c(entry) if checksum else None)


def _frame_with_entry(body: bytes, entry: bytes, crc: int | None) -> bytes:
    if crc is None:
        return b"".join((_HEADER.pack(len(body) + 4 + len(entry), len(body)), body, entry))
    return b"".join(
        (
            _HEADER.pack(len(body) + 10 + len(entry), len(body)),
            body,
            _CHECKSUM_HEADER.pack(MAGIC_CRC32C, crc),
            entry,
        )
    )


def _message_id(
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


# --------------------------------------------------------------------------- broker side


def encode_connected(
    server_version: str,
    protocol_version: int = PROTOCOL_VERSION,
    max_message_size: int | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    if max_message_size is not None:
        cmd.connected.max_message_size = max_message_size
    return encode_command(cmd)


def encode_success(request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.SUCCESS)
    cmd.success.request_id = request_id
    return encode_command(cmd)


def encode_error(request_id: int, code: ServerError | int, message: str) -> bytes:
    cmd = pb.BaseCommand(type=_T.ERROR)
    cmd.error.request_id = request_id
    cmd.error.error = int(code)  # type: ignore[assignment]
    cmd.error.message = message
    return encode_command(cmd)


def encode_producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    schema_version: bytes | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.PRODUCER_SUCCESS)
    ps = cmd.producer_success
    ps.request_id = request_id
    ps.producer_name = producer_name
    ps.last_sequence_id = last_sequence_id
    if schema_version is not None:
        ps.schema_version = schema_version
    return encode_command(cmd)


def encode_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int = 0
) -> bytes:
    """SEND_RECEIPT{producer_id, sequence_id, message_id{ledger, entry}, highest_sequence_id}.

    Hand-assembled (hot path, one per published entry); equals :func:`_reference_send_receipt`.
    highest_sequence_id is always present, as the Java broker does.
    """
    mid = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
    inner = b"".join(
        (
            b"\x08",
            _varint(producer_id),
            b"\x10",
            _varint(sequence_id),
            b"\x1a",
            _ONE_BYTE[len(mid)],  # a MessageIdData of two uint64 is at most 22 bytes
            mid,
            b"\x20",
            _varint(highest_sequence_id),
        )
    )
    # BaseCommand{type(1)=7, send_receipt(7)=inner}; inner is at most 66 bytes -> 1-byte length
    body = b"\x08\x07\x3a" + _ONE_BYTE[len(inner)] + inner
    return _HEADER.pack(len(body) + 4, len(body)) + body


def _reference_send_receipt(
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


def encode_send_error(
    producer_id: int, sequence_id: int, code: ServerError | int, message: str
) -> bytes:
    cmd = pb.BaseCommand(type=_T.SEND_ERROR)
    e = cmd.send_error
    e.producer_id = producer_id
    e.sequence_id = sequence_id
    e.error = int(code)  # type: ignore[assignment]
    e.message = message
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
) -> bytes:
    """MESSAGE{consumer_id, message_id, [redelivery_count], [ack_set]} + 0x0e01 + CRC32C + entry.

    Hand-assembled (hot path, one per delivery); equals :func:`_reference_message`.
    ``entry_crc`` is ``crc32c(entry)`` when the caller already knows it (e.g. from publish);
    it must describe these exact bytes. ``redelivery_count`` is sent only when non-zero.
    ``checksum=False`` omits magic and CRC (the client treats the CRC as optional).
    """
    mid = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
    if partition is not None:
        mid += b"\x18" + _varint(partition)
    parts = [b"\x08", _varint(consumer_id), b"\x12", _ONE_BYTE[len(mid)], mid]
    if redelivery_count:
        parts += (b"\x18", _varint(redelivery_count))
    if ack_set:
        for word in ack_set:  # proto2 repeated int64, not packed
            parts += (b"\x20", _varint(word))
    inner = b"".join(parts)
    body = b"\x08\x09\x4a" + _varint(len(inner)) + inner
    if not checksum:
        return b"".join((_HEADER.pack(len(body) + 4 + len(entry), len(body)), body, entry))
    if entry_crc is None:
        entry_crc = crc32c(entry)
    return b"".join(
        (
            _HEADER.pack(len(body) + 10 + len(entry), len(body)),
            body,
            _CHECKSUM_HEADER.pack(MAGIC_CRC32C, entry_crc),
            entry,
        )
    )


def _reference_message(
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


def encode_ping() -> bytes:
    return _PING


def encode_pong() -> bytes:
    return _PONG


LookupResponse = Literal["connect", "redirect", "failed"]
_LOOKUP_TYPES: Final = {
    "connect": pb.CommandLookupTopicResponse.Connect,
    "redirect": pb.CommandLookupTopicResponse.Redirect,
    "failed": pb.CommandLookupTopicResponse.Failed,
}


def encode_lookup_response(
    request_id: int,
    broker_service_url: str | None = None,
    *,
    response: LookupResponse = "connect",
    authoritative: bool = True,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    r.response = _LOOKUP_TYPES[response]
    if broker_service_url is not None:
        r.brokerServiceUrl = broker_service_url
    if response != "failed":
        r.authoritative = authoritative
    if error is not None:
        r.error = int(error)  # type: ignore[assignment]
    if message is not None:
        r.message = message
    return encode_command(cmd)


def encode_partitioned_metadata_response(
    request_id: int,
    partitions: int = 0,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """Success with ``partitions`` (0 = not partitioned), or Failed with ``error``."""
    cmd = pb.BaseCommand(type=_T.PARTITIONED_METADATA_RESPONSE)
    r = cmd.partitionMetadataResponse
    r.request_id = request_id
    if error is None:
        r.response = pb.CommandPartitionedTopicMetadataResponse.Success
        r.partitions = partitions
    else:
        r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        r.error = int(error)  # type: ignore[assignment]
        r.message = message if message is not None else ServerError(error).name
    return encode_command(cmd)


def encode_close_producer(producer_id: int, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    cmd.close_producer.request_id = request_id
    return encode_command(cmd)


def encode_close_consumer(consumer_id: int, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = request_id
    return encode_command(cmd)


def encode_active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    cmd = pb.BaseCommand(type=_T.ACTIVE_CONSUMER_CHANGE)
    cmd.active_consumer_change.consumer_id = consumer_id
    cmd.active_consumer_change.is_active = is_active
    return encode_command(cmd)


def encode_get_last_message_id_response(
    request_id: int,
    ledger_id: int,
    entry_id: int,
    *,
    partition: int | None = None,
    batch_index: int | None = None,
    mark_delete: MessageId | None = None,
) -> bytes:
    """``mark_delete`` is the subscription's (ledger_id, entry_id) mark-delete position."""
    cmd = pb.BaseCommand(type=_T.GET_LAST_MESSAGE_ID_RESPONSE)
    r = cmd.getLastMessageIdResponse
    r.request_id = request_id
    _message_id(
        r.last_message_id, ledger_id, entry_id, partition=partition, batch_index=batch_index
    )
    if mark_delete is not None:
        _message_id(r.consumer_mark_delete_position, mark_delete[0], mark_delete[1])
    return encode_command(cmd)


def encode_get_topics_of_namespace_response(request_id: int, topics: Iterable[str]) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    r = cmd.getTopicsOfNamespaceResponse
    r.request_id = request_id
    r.topics.extend(topics)
    return encode_command(cmd)


def encode_get_schema_response(
    request_id: int,
    *,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
    schema: pb.Schema | None = None,
    schema_version: bytes | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_SCHEMA_RESPONSE)
    r = cmd.getSchemaResponse
    r.request_id = request_id
    if error_code is not None:
        r.error_code = int(error_code)  # type: ignore[assignment]
    if error_message is not None:
        r.error_message = error_message
    if schema is not None:
        r.schema.CopyFrom(schema)
    if schema_version is not None:
        r.schema_version = schema_version
    return encode_command(cmd)


def encode_ack_response(
    consumer_id: int,
    request_id: int,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.ACK_RESPONSE)
    r = cmd.ackResponse
    r.consumer_id = consumer_id
    r.request_id = request_id
    if error is not None:
        r.error = int(error)  # type: ignore[assignment]
    if message is not None:
        r.message = message
    return encode_command(cmd)


def encode_consumer_stats_response(request_id: int, **fields: object) -> bytes:
    """CONSUMER_STATS_RESPONSE; ``fields`` are CommandConsumerStatsResponse field names
    (``msgRateOut=1.5``, ``consumerName="c"``, ``error_code=ServerError.ConsumerNotFound``...)."""
    cmd = pb.BaseCommand(type=_T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumerStatsResponse
    r.request_id = request_id
    for name, value in fields.items():
        if name == "error_code" and value is not None:
            value = int(value)  # type: ignore[call-overload]
        setattr(r, name, value)
    return encode_command(cmd)


def encode_reached_end_of_topic(consumer_id: int) -> bytes:
    """Never send this to pulsar-client 3.13: it closes the connection on it (reference 2.2)."""
    cmd = pb.BaseCommand(type=_T.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = consumer_id
    return encode_command(cmd)


# --------------------------------------------------------------------------- client side


def encode_connect(
    client_version: str = "Horae-test",
    protocol_version: int = PROTOCOL_VERSION,
    *,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.CONNECT)
    c = cmd.connect
    c.client_version = client_version
    c.protocol_version = protocol_version
    if auth_method_name is not None:
        c.auth_method_name = auth_method_name
    if auth_data is not None:
        c.auth_data = auth_data
    return encode_command(cmd)


def encode_partitioned_metadata(topic: str, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    return encode_command(cmd)


def encode_lookup(topic: str, request_id: int, *, authoritative: bool = False) -> bytes:
    cmd = pb.BaseCommand(type=_T.LOOKUP)
    cmd.lookupTopic.topic = topic
    cmd.lookupTopic.request_id = request_id
    cmd.lookupTopic.authoritative = authoritative
    return encode_command(cmd)


def encode_producer(
    topic: str,
    producer_id: int,
    request_id: int,
    producer_name: str | None = None,
    access_mode: int = 0,
    *,
    epoch: int = 0,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.PRODUCER)
    p = cmd.producer
    p.topic = topic
    p.producer_id = producer_id
    p.request_id = request_id
    if producer_name is not None:
        p.producer_name = producer_name
    p.user_provided_producer_name = producer_name is not None
    p.producer_access_mode = access_mode  # type: ignore[assignment]
    p.epoch = epoch
    return encode_command(cmd)


def encode_send(
    producer_id: int,
    sequence_id: int,
    entry: bytes,
    *,
    num_messages: int | None = None,
    highest_sequence_id: int | None = None,
    checksum: bool = True,
) -> bytes:
    """SEND with ``entry`` = ``[metadataSize][MessageMetadata][payload]`` (metadata.encode_entry).
    ``num_messages`` is set only for batches, like the C++ client."""
    cmd = pb.BaseCommand(type=_T.SEND)
    s = cmd.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    if num_messages is not None:
        s.num_messages = num_messages
    if highest_sequence_id is not None:
        s.highest_sequence_id = highest_sequence_id
    return encode_payload_command(cmd, entry, checksum=checksum)


def encode_subscribe(
    topic: str,
    subscription: str,
    sub_type: int,
    consumer_id: int,
    request_id: int,
    *,
    initial_position: int = 0,
    durable: bool = True,
    start_message_id: MessageId | None = None,
    consumer_name: str | None = None,
    key_shared_mode: int | None = None,
    hash_ranges: Sequence[tuple[int, int]] = (),
    allow_out_of_order_delivery: bool | None = None,
) -> bytes:
    """``sub_type``: Exclusive 0, Shared 1, Failover 2, Key_Shared 3; ``initial_position``:
    Latest 0, Earliest 1; ``key_shared_mode``: AUTO_SPLIT 0, STICKY 1 (with ``hash_ranges``)."""
    cmd = pb.BaseCommand(type=_T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic = topic
    s.subscription = subscription
    s.subType = sub_type  # type: ignore[assignment]
    s.consumer_id = consumer_id
    s.request_id = request_id
    s.durable = durable
    s.initialPosition = initial_position  # type: ignore[assignment]
    s.priority_level = 0
    if consumer_name is not None:
        s.consumer_name = consumer_name
    if start_message_id is not None:
        _message_id(s.start_message_id, start_message_id[0], start_message_id[1])
    if key_shared_mode is not None:
        s.keySharedMeta.keySharedMode = key_shared_mode  # type: ignore[assignment]
        for start, end in hash_ranges:
            s.keySharedMeta.hashRanges.add(start=start, end=end)
        if allow_out_of_order_delivery is not None:
            s.keySharedMeta.allowOutOfOrderDelivery = allow_out_of_order_delivery
    return encode_command(cmd)


def encode_flow(consumer_id: int, permits: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.FLOW)
    cmd.flow.consumer_id = consumer_id
    cmd.flow.messagePermits = permits
    return encode_command(cmd)


def encode_ack(
    consumer_id: int,
    ids: Iterable[MessageId],
    *,
    cumulative: bool = False,
    request_id: int | None = None,
    validation_error: int | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.ACK)
    a = cmd.ack
    a.consumer_id = consumer_id
    a.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    for ledger_id, entry_id in ids:
        _message_id(a.message_id.add(), ledger_id, entry_id)
    if request_id is not None:
        a.request_id = request_id
    if validation_error is not None:
        a.validation_error = validation_error  # type: ignore[assignment]
    return encode_command(cmd)


def encode_redeliver(consumer_id: int, ids: Iterable[MessageId] = ()) -> bytes:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES; no ids means "everything unacked"."""
    cmd = pb.BaseCommand(type=_T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    r = cmd.redeliverUnacknowledgedMessages
    r.consumer_id = consumer_id
    for ledger_id, entry_id in ids:
        _message_id(r.message_ids.add(), ledger_id, entry_id)
    return encode_command(cmd)


def encode_seek(
    consumer_id: int,
    request_id: int,
    *,
    message_id: MessageId | None = None,
    publish_time: int | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.SEEK)
    s = cmd.seek
    s.consumer_id = consumer_id
    s.request_id = request_id
    if message_id is not None:
        _message_id(s.message_id, message_id[0], message_id[1])
    if publish_time is not None:
        s.message_publish_time = publish_time
    return encode_command(cmd)


def encode_unsubscribe(consumer_id: int, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id = consumer_id
    cmd.unsubscribe.request_id = request_id
    return encode_command(cmd)


def encode_get_last_message_id(consumer_id: int, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_LAST_MESSAGE_ID)
    cmd.getLastMessageId.consumer_id = consumer_id
    cmd.getLastMessageId.request_id = request_id
    return encode_command(cmd)


def encode_get_topics_of_namespace(request_id: int, namespace: str, mode: int = 0) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_TOPICS_OF_NAMESPACE)
    g = cmd.getTopicsOfNamespace
    g.request_id = request_id
    g.namespace = namespace
    g.mode = mode  # type: ignore[assignment]
    return encode_command(cmd)


def encode_get_schema(request_id: int, topic: str, schema_version: bytes | None = None) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_SCHEMA)
    cmd.getSchema.request_id = request_id
    cmd.getSchema.topic = topic
    if schema_version is not None:
        cmd.getSchema.schema_version = schema_version
    return encode_command(cmd)


def encode_consumer_stats(request_id: int, consumer_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_T.CONSUMER_STATS)
    cmd.consumerStats.request_id = request_id
    cmd.consumerStats.consumer_id = consumer_id
    return encode_command(cmd)


def _simple(cmd_type: int, field: str) -> bytes:
    cmd = pb.BaseCommand(type=cmd_type)  # type: ignore[arg-type]
    getattr(cmd, field).SetInParent()  # the C++ client sets the empty sub-message too
    return encode_command(cmd)


_PING: Final = _simple(_T.PING, "ping")
_PONG: Final = _simple(_T.PONG, "pong")


__all__ = [
    "LookupResponse",
    "MessageId",
    "encode_ack",
    "encode_ack_response",
    "encode_active_consumer_change",
    "encode_close_consumer",
    "encode_close_producer",
    "encode_command",
    "encode_connect",
    "encode_connected",
    "encode_consumer_stats",
    "encode_consumer_stats_response",
    "encode_error",
    "encode_flow",
    "encode_get_last_message_id",
    "encode_get_last_message_id_response",
    "encode_get_schema",
    "encode_get_schema_response",
    "encode_get_topics_of_namespace",
    "encode_get_topics_of_namespace_response",
    "encode_lookup",
    "encode_lookup_response",
    "encode_message",
    "encode_partitioned_metadata",
    "encode_partitioned_metadata_response",
    "encode_payload_command",
    "encode_ping",
    "encode_pong",
    "encode_producer",
    "encode_producer_success",
    "encode_reached_end_of_topic",
    "encode_redeliver",
    "encode_seek",
    "encode_send",
    "encode_send_error",
    "encode_send_receipt",
    "encode_subscribe",
    "encode_success",
    "encode_unsubscribe",
]
