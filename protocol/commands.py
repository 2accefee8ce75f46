"""Encoders for every Pulsar command Horae sends (client-side ones re-exported, see below).

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
:func:`encode_message`, are assembled by hand in :mod:`protocol.hot_commands` (pinned
byte-for-byte to pb-built twins there).

Layout: framing and varints live in :mod:`protocol.framing`; the client-side encoders (CONNECT,
PRODUCER, SEND, SUBSCRIBE, FLOW, ACK, ...) in :mod:`protocol.client_commands`; the two hot
per-message encoders in :mod:`protocol.hot_commands`. Everything is importable from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from protocol import pulsar_pb as pb
from protocol.client_commands import (
    encode_ack,
    encode_connect,
    encode_consumer_stats,
    encode_flow,
    encode_get_last_message_id,
    encode_get_schema,
    encode_get_topics_of_namespace,
    encode_lookup,
    encode_partitioned_metadata,
    encode_producer,
    encode_redeliver,
    encode_seek,
    encode_send,
    encode_subscribe,
    encode_unsubscribe,
)
from protocol.errors import ServerError
from protocol.framing import MessageId, encode_command, encode_payload_command
from protocol.framing import set_message_id as _message_id
from protocol.hot_commands import (
    encode_message,
    encode_message_head,
    encode_send_receipt,
)
from protocol.limits import PROTOCOL_VERSION
from protocol.send_accel import encode_message_run

_T = pb.BaseCommand

# --------------------------------------------------------------------------- broker side


def encode_connected(
    server_version: str,
    protocol_version: int = PROTOCOL_VERSION,
    max_message_size: int | None = None,
    *,
    supports_topic_watchers: bool = False,
) -> bytes:
    """``supports_topic_watchers``: the broker serves WATCH_TOPIC_LIST (feature_flags)."""
    cmd = pb.BaseCommand(type=_T.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    if max_message_size is not None:
        cmd.connected.max_message_size = max_message_size
    cmd.connected.feature_flags.supports_topic_watchers = supports_topic_watchers
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
    *,
    ready: bool | None = None,
    topic_epoch: int | None = None,
) -> bytes:
    """PRODUCER_SUCCESS; *ready* sets producer_ready explicitly (False: the producer is queued
    for exclusive access, WaitForExclusive; True: the second answer once it is promoted);
    *topic_epoch* is the epoch an exclusive producer was granted.

    schema_version is always present, as Pulsar sends it: a schema-less producer (None) gets
    the empty version (Pulsar's ``SchemaVersion.Empty``). The Java client reads the field
    unconditionally and drops the connection when it is missing."""
    cmd = pb.BaseCommand(type=_T.PRODUCER_SUCCESS)
    ps = cmd.producer_success
    ps.request_id = request_id
    ps.producer_name = producer_name
    ps.last_sequence_id = last_sequence_id
    ps.schema_version = b"" if schema_version is None else schema_version
    if ready is not None:
        ps.producer_ready = ready
    if topic_epoch is not None:
        ps.topic_epoch = topic_epoch
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
    broker_service_url_tls: str | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    r.response = _LOOKUP_TYPES[response]
    if broker_service_url is not None:
        r.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        r.brokerServiceUrlTls = broker_service_url_tls
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


def encode_end_txn_on_partition_response(
    request_id: int, txnid_least_bits: int, txnid_most_bits: int, *,
    error: ServerError | int, message: str,
) -> bytes:
    """END_TXN_ON_PARTITION_RESPONSE refusing the request (the broker ends no transaction)."""
    cmd = pb.BaseCommand(type=_T.END_TXN_ON_PARTITION_RESPONSE)
    _txn_refusal(cmd.endTxnOnPartitionResponse, request_id, txnid_least_bits, txnid_most_bits,
                 error, message)
    return encode_command(cmd)


def encode_end_txn_on_subscription_response(
    request_id: int, txnid_least_bits: int, txnid_most_bits: int, *,
    error: ServerError | int, message: str,
) -> bytes:
    """END_TXN_ON_SUBSCRIPTION_RESPONSE refusing the request (the broker ends no transaction)."""
    cmd = pb.BaseCommand(type=_T.END_TXN_ON_SUBSCRIPTION_RESPONSE)
    _txn_refusal(cmd.endTxnOnSubscriptionResponse, request_id, txnid_least_bits,
                 txnid_most_bits, error, message)
    return encode_command(cmd)


def _txn_refusal(
    r: pb.CommandEndTxnOnPartitionResponse | pb.CommandEndTxnOnSubscriptionResponse,
    request_id: int, txnid_least_bits: int, txnid_most_bits: int,
    error: ServerError | int, message: str,
) -> None:
    r.request_id = request_id
    r.txnid_least_bits = txnid_least_bits
    r.txnid_most_bits = txnid_most_bits
    r.error = int(error)  # type: ignore[assignment]
    r.message = message


def encode_get_or_create_schema_response(
    request_id: int,
    *,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
    schema_version: bytes | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_T.GET_OR_CREATE_SCHEMA_RESPONSE)
    r = cmd.getOrCreateSchemaResponse
    r.request_id = request_id
    if error_code is not None:
        r.error_code = int(error_code)  # type: ignore[assignment]
    if error_message is not None:
        r.error_message = error_message
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
    "encode_end_txn_on_partition_response",
    "encode_end_txn_on_subscription_response",
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
    "encode_message_head",
    "encode_message_run",
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
