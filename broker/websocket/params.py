"""Query parameters of the WebSocket endpoints, read as Pulsar's handlers read them.

Theory of operation
-------------------
Pulsar's ``ProducerHandler``, ``ConsumerHandler`` and ``ReaderHandler`` take the first value of
each query parameter and pass it to the client builders; a value those refuse is an
``IllegalArgumentException``, answered before the upgrade with HTTP 400 ``Invalid query params:
<message>``. :func:`producer_options`, :func:`consumer_options` and :func:`reader_options` do
the same and raise :class:`InvalidParams` with the builder's message. Integers parse as Java's
``Integer.parseInt``/``Long.parseLong`` (``For input string: "x"``), booleans as
``Boolean.parseBoolean`` (anything but ``true``, in any case, is false). Unknown parameters
are ignored, as in Pulsar. Pure: no IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.sub_types import SubType

__all__ = ["ConsumerOptions", "InvalidParams", "ProducerOptions", "ReaderOptions",
           "consumer_options", "producer_options", "reader_options"]

#: Pulsar's handlers cap the receiver queue at 1000 messages (and its default).
MAX_RECEIVER_QUEUE_SIZE = 1000
#: The client's default ``maxPendingMessages`` and ``sendTimeout``.
DEFAULT_MAX_PENDING_MESSAGES = 1000
DEFAULT_SEND_TIMEOUT_MS = 30_000
#: The client's default ``negativeAckRedeliveryDelay`` (1 minute).
DEFAULT_NEGATIVE_ACK_DELAY_MS = 60_000
#: The client refuses an ack timeout below this (``ackTimeout`` "should be greater than 1000 ms").
MIN_ACK_TIMEOUT_MS = 1000

_ROUTING_MODES = ("SinglePartition", "RoundRobinPartition", "CustomPartition")
_COMPRESSION_TYPES = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
_HASHING_SCHEMES = ("JavaStringHash", "Murmur3_32Hash")
_SUBSCRIPTION_MODES = ("Durable", "NonDurable")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


class InvalidParams(ValueError):
    """A query parameter the client builder would refuse (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    max_pending_messages: int = DEFAULT_MAX_PENDING_MESSAGES
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    compression_type: str = "NONE"


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    sub_type: SubType = SubType.Exclusive
    durable: bool = True
    receiver_queue_size: int = MAX_RECEIVER_QUEUE_SIZE
    consumer_name: str | None = None
    priority_level: int = 0
    ack_timeout_ms: int = 0
    negative_ack_delay_ms: int = DEFAULT_NEGATIVE_ACK_DELAY_MS
    pull_mode: bool = False
    max_redeliver_count: int = 0
    dead_letter_topic: str | None = None


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    receiver_queue_size: int = MAX_RECEIVER_QUEUE_SIZE
    reader_name: str | None = None
    start: str = "latest"
    """``earliest``, ``latest`` or a base64 message id."""


def _int(query: Mapping[str, str], name: str, *, bits: int = 32) -> int | None:
    """Java's ``Integer.parseInt`` (``Long.parseLong`` with *bits* 64) of the parameter."""
    value = query.get(name)
    if value is None:
        return None
    if not _JAVA_INT.fullmatch(value):
        raise InvalidParams(f'For input string: "{value}"')
    number = int(value, 10)
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise InvalidParams(f'For input string: "{value}"')
    return number


def _bool(query: Mapping[str, str], name: str) -> bool | None:
    value = query.get(name)
    return None if value is None else value.lower() == "true"


def _enum(query: Mapping[str, str], name: str, label: str, allowed: tuple[str, ...]) -> str | None:
    value = query.get(name)
    if value is not None and value not in allowed:
        raise InvalidParams(f"Invalid {label} {value}")
    return value


def producer_options(query: Mapping[str, str]) -> ProducerOptions:
    send_timeout = _int(query, "sendTimeoutMillis")
    if send_timeout is not None and send_timeout < 0:
        raise InvalidParams("sendTimeout needs to be >= 0")
    max_pending = _int(query, "maxPendingMessages")
    if max_pending is not None and max_pending < 1:
        raise InvalidParams("maxPendingMessages needs to be > 0")
    batching_max = _int(query, "batchingMaxMessages")
    if batching_max is not None and batching_max < 1:
        raise InvalidParams("batchingMaxMessages needs to be > 0")
    batching_delay = _int(query, "batchingMaxPublishDelay")
    if batching_delay is not None and batching_delay < 0:
        raise InvalidParams("configured value for batch delay must be at least 0ms")
    _enum(query, "messageRoutingMode", "messageRoutingMode", _ROUTING_MODES)
    compression = _enum(query, "compressionType", "compressionType", _COMPRESSION_TYPES)
    hashing = query.get("hashingScheme")
    if hashing is not None and hashing not in _HASHING_SCHEMES:
        raise InvalidParams("No enum constant org.apache.pulsar.client.api.HashingScheme."
                            + hashing)
    name = query.get("producerName")
    return ProducerOptions(
        producer_name=name if name else None,
        initial_sequence_id=_int(query, "initialSequenceId", bits=64),
        send_timeout_ms=DEFAULT_SEND_TIMEOUT_MS if send_timeout is None else send_timeout,
        max_pending_messages=max_pending or DEFAULT_MAX_PENDING_MESSAGES,
        batching_enabled=bool(_bool(query, "batchingEnabled")),
        batching_max_messages=batching_max or 1000,
        batching_max_publish_delay_ms=10 if batching_delay is None else batching_delay,
        compression_type=compression or "NONE",
    )


def _receiver_queue_size(query: Mapping[str, str]) -> int:
    size = _int(query, "receiverQueueSize")
    if size is None:
        return MAX_RECEIVER_QUEUE_SIZE
    if size < 0:
        raise InvalidParams("receiverQueueSize needs to be >= 0")
    return min(size, MAX_RECEIVER_QUEUE_SIZE)


def consumer_options(query: Mapping[str, str]) -> ConsumerOptions:
    ack_timeout = _int(query, "ackTimeoutMillis") or 0
    if ack_timeout and ack_timeout < MIN_ACK_TIMEOUT_MS:
        raise InvalidParams(f"Ack timeout should be greater than {MIN_ACK_TIMEOUT_MS} ms")
    sub_type = _enum(query, "subscriptionType", "subscriptionType",
                     tuple(t.name for t in SubType))
    mode = _enum(query, "subscriptionMode", "subscriptionMode", _SUBSCRIPTION_MODES)
    priority = _int(query, "priorityLevel") or 0
    if priority < 0:
        raise InvalidParams("priorityLevel needs to be >= 0")
    nack_delay = _int(query, "negativeAckRedeliveryDelay")
    if nack_delay is not None and nack_delay < 0:
        raise InvalidParams("redeliveryDelay needs to be >= 0")
    max_redeliver = _int(query, "maxRedeliverCount") or 0
    if max_redeliver < 0 or (max_redeliver == 0 and (
            "maxRedeliverCount" in query or "deadLetterTopic" in query)):
        raise InvalidParams("MaxRedeliveryCount must be > 0.")
    name = query.get("consumerName")
    return ConsumerOptions(
        sub_type=SubType[sub_type] if sub_type is not None else SubType.Exclusive,
        durable=mode != "NonDurable",
        receiver_queue_size=_receiver_queue_size(query),
        consumer_name=name if name else None,
        priority_level=priority,
        ack_timeout_ms=ack_timeout,
        negative_ack_delay_ms=DEFAULT_NEGATIVE_ACK_DELAY_MS if nack_delay is None else nack_delay,
        pull_mode=bool(_bool(query, "pullMode")),
        max_redeliver_count=max_redeliver,
        dead_letter_topic=query.get("deadLetterTopic") or None,
    )


def reader_options(query: Mapping[str, str]) -> ReaderOptions:
    start = (query.get("messageId") or "").strip() or "latest"
    name = query.get("readerName")
    return ReaderOptions(receiver_queue_size=_receiver_queue_size(query),
                         reader_name=name if name else None, start=start)
