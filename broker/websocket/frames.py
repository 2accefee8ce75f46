"""The WebSocket API's JSON frames: Pulsar's shapes, parsed and built without IO.

Theory of operation
-------------------
Pulsar's WebSocket service reads and writes these classes with Jackson
(``org.apache.pulsar.websocket.data``): ``ProducerMessage`` in, ``ProducerAck`` out on the
producer endpoint; ``ConsumerMessage`` out and ``ConsumerCommand`` in on the consumer and reader
endpoints; ``EndOfTopicResponse`` out. The parsers here accept what Jackson accepts for them
(unknown fields ignored; a number or boolean where a string is expected taken as its text, as
in the documentation's ``"context": 5``) and refuse the rest with :class:`FrameError`, which
carries Pulsar's :class:`WebSocketError` code. JSON nesting is bounded
(:func:`broker.json_bounds.loads`); the frame's size is bounded by the session before it gets
here (``webSocketMaxTextFrameSize``).

Message ids are Pulsar's: ``base64(MessageIdData)`` as ``MessageIdImpl.toByteArray`` writes
it (ledger and entry id; the partition when >= 0; batch index and size for a message of a
batch). Times are ISO-8601 with the offset (Pulsar's ``DateFormatter``), here in UTC.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

from broker.json_bounds import loads
from protocol import pulsar_pb as pb

__all__ = [
    "ConsumerCommand",
    "FrameError",
    "MessageRef",
    "ProduceRequest",
    "WebSocketError",
    "consumer_message",
    "decode_message_id",
    "encode_message_id",
    "end_of_topic",
    "format_time",
    "parse_consumer_command",
    "parse_produce_request",
    "producer_ack",
    "producer_error",
]


class WebSocketError(IntEnum):
    """Pulsar's ``WebSocketError``: the code in ``send-error:N`` and the close reasons."""

    FailedToCreateProducer = 1
    FailedToSubscribe = 2
    FailedToDeserializeFromJSON = 3
    FailedToSerializeToJSON = 4
    AuthenticationError = 5
    NotAuthorizedError = 6
    PayloadEncodingError = 7
    UnknownError = 8

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    WebSocketError.FailedToCreateProducer: "Failed to create producer",
    WebSocketError.FailedToSubscribe: "Failed to subscribe",
    WebSocketError.FailedToDeserializeFromJSON: "Failed to de-serialize from JSON",
    WebSocketError.FailedToSerializeToJSON: "Failed to serialize to JSON",
    WebSocketError.AuthenticationError: "Failed to authenticate client",
    WebSocketError.NotAuthorizedError: "Client is not authorized",
    WebSocketError.PayloadEncodingError: "Invalid payload encoding",
    WebSocketError.UnknownError: "Unknown error",
}


class FrameError(ValueError):
    """A frame the API refuses: Pulsar's error code, the message, the request's context."""

    def __init__(self, error: WebSocketError, message: str | None,
                 context: str | None = None) -> None:
        super().__init__(message or error.description)
        self.error = error
        self.message = message
        self.context = context


# ---------------------------------------------------------------------------- message ids


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A message id as a WebSocket client names it."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1
    batch_size: int = 0
    partition: int = -1


def encode_message_id(ref: MessageRef) -> str:
    m = pb.MessageIdData(ledgerId=ref.ledger_id & 0xFFFFFFFFFFFFFFFF,
                         entryId=ref.entry_id & 0xFFFFFFFFFFFFFFFF)
    if ref.partition >= 0:
        m.partition = ref.partition
    if ref.batch_index >= 0:
        m.batch_index = ref.batch_index
    if ref.batch_size > 0:
        m.batch_size = ref.batch_size
    return base64.b64encode(m.SerializeToString()).decode("ascii")


def decode_message_id(text: object) -> MessageRef:
    """Pulsar's ``MessageId.fromByteArray(Base64.decode(text))``; :class:`FrameError` otherwise."""
    if not isinstance(text, str) or not text:
        raise FrameError(WebSocketError.FailedToDeserializeFromJSON, "Missing messageId")
    try:
        raw = base64.b64decode(text, validate=True)
        m = pb.MessageIdData.FromString(raw)
    except (binascii.Error, ValueError, Exception) as exc:  # DecodeError is not a ValueError
        raise FrameError(WebSocketError.FailedToDeserializeFromJSON,
                         f"Invalid messageId {text!r}: {exc}") from None
    if not m.IsInitialized():
        raise FrameError(WebSocketError.FailedToDeserializeFromJSON,
                         f"Invalid messageId {text!r}: ledgerId and entryId are required")
    ledger, entry = _signed(m.ledgerId), _signed(m.entryId)
    return MessageRef(ledger, entry,
                      m.batch_index if m.HasField("batch_index") else -1,
                      m.batch_size if m.HasField("batch_size") else 0,
                      m.partition if m.HasField("partition") else -1)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# ---------------------------------------------------------------------------- times


def format_time(ms: int) -> str:
    """Pulsar's ``DateFormatter.format``: ISO-8601 with milliseconds and the offset (UTC)."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> int:
    """Pulsar's ``DateFormatter.parse``: an ISO-8601 time with its offset -> epoch ms."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"Text '{text}' could not be parsed: {exc}") from None
    if moment.tzinfo is None:
        raise ValueError(f"Text '{text}' could not be parsed: no offset")
    return int(moment.timestamp() * 1000)


# ---------------------------------------------------------------------------- producer


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """Pulsar's ``ProducerMessage``, decoded."""

    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    context: str | None = None
    key: str | None = None
    replication_clusters: tuple[str, ...] = ()
    disable_replication: bool = False
    event_time_ms: int = 0
    deliver_at_ms: int = 0
    deliver_after_ms: int = 0
    sequence_id: int | None = None


def _text(value: object, name: str) -> str | None:
    """A Jackson String field: null, a string, or a scalar taken as its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    raise ValueError(f"Cannot deserialize value of type `java.lang.String` from {_kind(value)} "
                     f"(field \"{name}\")")


def _long(value: object, name: str) -> int:
    """A Jackson primitive long field: null -> 0, an integer, or an integral string."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"Cannot coerce boolean to long (field \"{name}\")")
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"Numeric value ({value}) out of range of long (field \"{name}\")")
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return _long(int(value.strip()), name)
        except ValueError:
            pass
    raise ValueError(f"Cannot deserialize value of type `long` from {_kind(value)} "
                     f"(field \"{name}\")")


_KINDS: dict[type, str] = {dict: "Object", list: "Array", str: "String"}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def parse_produce_request(text: str | bytes) -> ProduceRequest:
    """A producer frame -> :class:`ProduceRequest`, or :class:`FrameError` with Pulsar's code:
    3 when the JSON does not match ``ProducerMessage``, 7 for the payload or the event time."""
    try:
        doc = loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"Cannot deserialize ProducerMessage from {_kind(doc)}")
        context = _text(doc.get("context"), "context")
        payload_text = _text(doc.get("payload"), "payload")
        properties = _properties(doc.get("properties"))
        key = _text(doc.get("key"), "key")
        clusters_raw = doc.get("replicationClusters")
        if clusters_raw is not None and not isinstance(clusters_raw, list):
            raise ValueError("Cannot deserialize replicationClusters from "
                             f"{_kind(clusters_raw)}")
        clusters = tuple(str(_text(c, "replicationClusters")) for c in clusters_raw or ())
        event_time = _text(doc.get("eventTime"), "eventTime")
        deliver_at = _long(doc.get("deliverAt"), "deliverAt")
        deliver_after = _long(doc.get("deliverAfterMs"), "deliverAfterMs")
        sequence = doc.get("sequenceId")
        sequence_id = _long(sequence, "sequenceId") if sequence is not None else None
        disable = doc.get("disableReplication")
        if disable is not None and not isinstance(disable, bool):
            raise ValueError("Cannot deserialize disableReplication from " + _kind(disable))
    except ValueError as exc:  # json.JSONDecodeError and JsonTooDeepError are ValueErrors
        raise FrameError(WebSocketError.FailedToDeserializeFromJSON, str(exc)) from None
    if payload_text is None:
        raise FrameError(WebSocketError.PayloadEncodingError, None, context)
    try:
        payload = base64.b64decode(payload_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FrameError(WebSocketError.PayloadEncodingError,
                         f"Invalid Base64 message-payload error={exc}", context) from None
    event_time_ms = 0
    if event_time is not None:
        try:
            event_time_ms = parse_time(event_time)
        except ValueError as exc:
            raise FrameError(WebSocketError.PayloadEncodingError, str(exc), context) from None
    return ProduceRequest(payload, properties, context, key, clusters, bool(disable),
                          event_time_ms, deliver_at, deliver_after, sequence_id)


def _properties(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"Cannot deserialize properties from {_kind(value)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        text = _text(v, f"properties.{k}")
        if text is not None:
            out[k] = text
    return out


#: ``ProducerAck``'s primitive fields, which Pulsar 4.0 writes in every answer (0 in each; the
#: send error's code is in ``result``).
_ACK_PRIMITIVES = {"errorCode": 0, "schemaVersion": 0}


def producer_ack(message_id: str, context: str | None) -> str:
    """``ProducerAck`` of a stored message (null fields left out, as Jackson's NON_NULL)."""
    return _dumps({"result": "ok", "messageId": message_id, "context": context,
                   **_ACK_PRIMITIVES})


def producer_error(error: WebSocketError, message: str | None, context: str | None) -> str:
    """``ProducerAck`` of a refused or failed send: ``result`` is ``send-error:<code>``."""
    return _dumps({"result": f"send-error:{int(error)}", "errorMsg": message,
                   "context": context, **_ACK_PRIMITIVES})


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in doc.items() if v is not None}, ensure_ascii=False)


# ---------------------------------------------------------------------------- consumer


@dataclass(frozen=True, slots=True)
class ConsumerCommand:
    """Pulsar's ``ConsumerCommand``: an ack when ``type`` is absent (or unknown)."""

    type: str | None
    message_id: str | None = None
    ack_type: str | None = None
    permit_messages: int | None = None


def parse_consumer_command(text: str | bytes) -> ConsumerCommand:
    try:
        doc = loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"Cannot deserialize ConsumerCommand from {_kind(doc)}")
        permits = doc.get("permitMessages")
        permit_messages = None
        if permits is not None:
            permit_messages = _long(permits, "permitMessages")
            if not -(1 << 31) <= permit_messages < 1 << 31:
                raise ValueError(f"Numeric value ({permits}) out of range of int")
        return ConsumerCommand(_text(doc.get("type"), "type"),
                               _text(doc.get("messageId"), "messageId"),
                               _text(doc.get("ackType"), "ackType"), permit_messages)
    except ValueError as exc:
        raise FrameError(WebSocketError.FailedToDeserializeFromJSON, str(exc)) from None


def consumer_message(message_id: str, payload: bytes, metadata: pb.MessageMetadata,
                     single: pb.SingleMessageMetadata | None, redelivery_count: int) -> str:
    """``ConsumerMessage`` of one message (*single*: its metadata within a batch)."""
    source: Any = single if single is not None else metadata
    doc: dict[str, Any] = {
        "messageId": message_id,
        "payload": base64.b64encode(payload).decode("ascii"),
        "properties": {kv.key: kv.value for kv in source.properties},
        "publishTime": format_time(metadata.publish_time),
        "redeliveryCount": redelivery_count,
    }
    event_time = source.event_time if source.HasField("event_time") else 0
    if event_time:
        doc["eventTime"] = format_time(event_time)
    if source.HasField("partition_key"):
        doc["key"] = source.partition_key
    return json.dumps(doc, ensure_ascii=False)


def end_of_topic(reached: bool) -> str:
    """``EndOfTopicResponse``."""
    return json.dumps({"endOfTopic": reached})
