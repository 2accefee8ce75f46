"""Encoders for the commands a *client* sends, so tests and benchmarks can act as a raw client.

The broker never sends these; they are built with protobuf (no hot path) and framed by
:mod:`protocol.framing`. ``ids`` are ``(ledger_id, entry_id)`` tuples. Re-exported by
:mod:`protocol.commands`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from protocol import pulsar_pb as pb
from protocol.framing import MessageId, encode_command, encode_payload_command
from protocol.framing import set_message_id as _message_id
from protocol.limits import PROTOCOL_VERSION

_T = pb.BaseCommand


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
    topic_epoch: int | None = None,
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
    if topic_epoch is not None:
        p.topic_epoch = topic_epoch
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


def encode_unsubscribe(consumer_id: int, request_id: int, *, force: bool = False) -> bytes:
    cmd = pb.BaseCommand(type=_T.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id = consumer_id
    cmd.unsubscribe.request_id = request_id
    if force:
        cmd.unsubscribe.force = True
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


__all__ = [
    "encode_ack",
    "encode_connect",
    "encode_consumer_stats",
    "encode_flow",
    "encode_get_last_message_id",
    "encode_get_schema",
    "encode_get_topics_of_namespace",
    "encode_lookup",
    "encode_partitioned_metadata",
    "encode_producer",
    "encode_redeliver",
    "encode_seek",
    "encode_send",
    "encode_subscribe",
    "encode_unsubscribe",
]
