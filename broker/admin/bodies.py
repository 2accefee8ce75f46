"""Request bodies of the admin API, parsed into frozen values (pure: no IO, no service).

Theory of operation: aiohttp hands a handler raw bytes; these functions turn them into
:class:`MessageIdRef` / :class:`ResetCursorData` values or raise :class:`RestError` 400 with
the reason Pulsar gives. Keeping parsing here lets tests pin every accepted body format
without a broker.

skipByMessageIds (PIP-423) accepts the design's body and, like Pulsar's
``SkipMessageIdsRequest``, the later forms:
  0. the design's map ``{"<ledgerId>": "<entryId>", ...}`` (values may be numbers), also as
     ``{"type": "map", "messageIds": {...}}``;
  1. a bare JSON array of base64 ``MessageIdData`` bytes (``MessageId.toByteArray()``);
  2. ``{"type": "byteArray", "messageIds": [base64, ...]}`` (``type`` may be omitted);
  3. ``{"type": "messageId", "messageIds": [{"ledgerId": L, "entryId": E, "batchIndex": B}]}``
     where ids may be numbers or numeric strings and a negative ``batchIndex`` means none.
A ledger or entry id that is missing, not an integer, negative or beyond Java's long is 400
(never read as 0:0), as is a batch or partition index beyond Java's int; anything else
malformed is 400 "Invalid skipByMessageIds payload: <why>". Whether an id names a message that
exists is the handler's check (412), not the parser's.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from broker import json_bounds
from broker.admin.errors import RestError, bad_request
from protocol import pulsar_pb as pb

_SKIP_INVALID = "Invalid skipByMessageIds payload: "


@dataclass(frozen=True, slots=True)
class MessageIdRef:
    """A message id named in a request: (ledger_id, entry_id), optional batch index and
    partition (-1 = not given)."""

    ledger_id: int
    entry_id: int
    batch_index: int | None = None
    partition: int = -1

    @property
    def position(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)


@dataclass(frozen=True, slots=True)
class ResetCursorData:
    """Pulsar's ``ResetCursorData``: where to put a cursor (``isExcluded`` = just after it)."""

    ledger_id: int
    entry_id: int
    partition_index: int = -1
    is_excluded: bool = False
    batch_index: int = -1


def load_json(raw: bytes, *, what: str = "request body") -> object:
    """Decode a JSON body; an empty body is ``None``. 400 when it does not parse or nests
    deeper than :data:`broker.json_bounds.MAX_JSON_DEPTH`."""
    if not raw.strip():
        return None
    try:
        return json_bounds.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, JsonTooDeepError
        raise bad_request(f"Invalid {what}: {exc}") from None


def _as_int(value: object, *, default: int | None = None) -> int:
    """Jackson-like lenient long: numbers or numeric strings."""
    if value is None:
        if default is None:
            raise ValueError("missing value")
        return default
    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError(f"not a number: {value!r}")


def message_id_from_base64(text: object) -> MessageIdRef:
    """Decode base64 ``MessageIdData`` bytes (what ``MessageId.serialize()`` produces)."""
    if not isinstance(text, str):
        raise bad_request(_SKIP_INVALID + f"expected a base64 string, got {text!r}")
    try:
        data = base64.b64decode(text, validate=True)
        msg = pb.MessageIdData()
        msg.ParseFromString(data)
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise bad_request(_SKIP_INVALID + f"bad base64 message id {text!r}: {exc}") from None
    if not msg.IsInitialized():
        raise bad_request(_SKIP_INVALID + f"bad base64 message id {text!r}: missing fields")
    batch = msg.batch_index if msg.HasField("batch_index") and msg.batch_index >= 0 else None
    return MessageIdRef(msg.ledgerId, msg.entryId, batch, msg.partition)


def message_id_to_base64(ledger_id: int, entry_id: int, batch_index: int | None = None,
                         partition: int = -1) -> str:
    """The inverse of :func:`message_id_from_base64` (used by the CLI and tests)."""
    msg = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id, partition=partition)
    if batch_index is not None:
        msg.batch_index = batch_index
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


def _message_id_from_object(obj: object) -> MessageIdRef:
    if not isinstance(obj, dict):
        raise bad_request(_SKIP_INVALID + f"expected an object with ledgerId/entryId, got {obj!r}")
    ledger_id = _id_value("ledgerId", obj.get("ledgerId"))
    entry_id = _id_value("entryId", obj.get("entryId"))
    try:
        batch = _as_int(obj.get("batchIndex"), default=-1)
        partition = _as_int(obj.get("partitionIndex", obj.get("partition")), default=-1)
    except ValueError as exc:
        raise bad_request(_SKIP_INVALID + str(exc)) from None
    _bounded("batchIndex", batch, -_INT_MAX - 1, _INT_MAX, _SKIP_INVALID)
    _bounded("partitionIndex", partition, -_INT_MAX - 1, _INT_MAX, _SKIP_INVALID)
    return MessageIdRef(ledger_id, entry_id, batch if batch >= 0 else None, partition)


_LONG_MAX = (1 << 63) - 1  # Java's Long.MAX_VALUE: ledger and entry ids are longs
_INT_MAX = (1 << 31) - 1  # Java's Integer.MAX_VALUE: batch and partition indexes are ints


def _id_value(name: str, value: object) -> int:
    """A ledger or entry id: present, an integer (or numeric string), 0..Long.MAX_VALUE;
    else 400."""
    try:
        number = _as_int(value)
    except ValueError:
        number = -1
    if value is None:
        raise bad_request(_SKIP_INVALID + f"missing {name}")
    if not 0 <= number <= _LONG_MAX:
        raise bad_request(_SKIP_INVALID + f"{name} must be a non-negative integer, "
                          f"not {value!r}")
    return number


def _bounded(name: str, value: int, low: int, high: int, prefix: str) -> int:
    """400 unless low <= value <= high (Java's long/int ranges)."""
    if not low <= value <= high:
        raise bad_request(f"{prefix}{name} out of range: {value}")
    return value


def _looks_numeric(key: object) -> bool:
    return isinstance(key, str) and key.strip().lstrip("-").isdigit()


def _message_ids_from_map(items: dict[object, object]) -> list[MessageIdRef]:
    """The design's ``{"<ledgerId>": "<entryId>"}`` map."""
    return [MessageIdRef(_id_value("ledgerId", key), _id_value("entryId", value))
            for key, value in items.items()]


def parse_skip_by_message_ids(body: object) -> list[MessageIdRef]:
    """The three PIP-423 body formats -> message ids (order kept, duplicates dropped)."""
    if body is None:
        raise bad_request(_SKIP_INVALID + "empty body")
    ids: list[MessageIdRef]
    if isinstance(body, list):
        ids = [message_id_from_base64(item) for item in body if item is not None]
    elif isinstance(body, dict):
        if "messageIds" not in body:
            if not body or not all(_looks_numeric(key) for key in body):
                raise bad_request(_SKIP_INVALID + "missing messageIds")
            return list(dict.fromkeys(_message_ids_from_map(body)))
        items = body["messageIds"]
        kind = body.get("type")
        if isinstance(items, dict) and (kind is None or str(kind).lower() == "map"):
            return list(dict.fromkeys(_message_ids_from_map(items)))
        if not isinstance(items, list):
            raise bad_request(_SKIP_INVALID + "unsupported messageIds type")
        if kind is None or kind == "" or str(kind).lower() == "bytearray":
            ids = [message_id_from_base64(item) for item in items if item is not None]
        elif str(kind).lower() == "messageid":
            ids = [_message_id_from_object(item) for item in items if item is not None]
        else:
            raise bad_request(_SKIP_INVALID + "unsupported type for array")
    else:
        raise bad_request(_SKIP_INVALID + "unsupported top-level JSON")
    return list(dict.fromkeys(ids))


def parse_reset_cursor_data(body: object) -> ResetCursorData:
    """``{"ledgerId": L, "entryId": E, "partitionIndex"?, "isExcluded"?, "batchIndex"?}``."""
    if not isinstance(body, dict) or "ledgerId" not in body or "entryId" not in body:
        raise bad_request("Invalid reset cursor data: expected {\"ledgerId\": L, \"entryId\": E}")
    try:
        data = ResetCursorData(
            ledger_id=_as_int(body["ledgerId"]),
            entry_id=_as_int(body["entryId"]),
            partition_index=_as_int(body.get("partitionIndex"), default=-1),
            is_excluded=bool(body.get("isExcluded", False)),
            batch_index=_as_int(body.get("batchIndex"), default=-1),
        )
    except ValueError as exc:
        raise bad_request(f"Invalid reset cursor data: {exc}") from None
    prefix = "Invalid reset cursor data: "
    _bounded("ledgerId", data.ledger_id, -_LONG_MAX - 1, _LONG_MAX, prefix)
    _bounded("entryId", data.entry_id, -_LONG_MAX - 1, _LONG_MAX, prefix)
    _bounded("partitionIndex", data.partition_index, -_INT_MAX - 1, _INT_MAX, prefix)
    _bounded("batchIndex", data.batch_index, -_INT_MAX - 1, _INT_MAX, prefix)
    return data


def parse_subscription_start(body: object) -> tuple[str, tuple[int, int] | None]:
    """Create-subscription body -> ("latest"|"earliest", start id or None).

    Pulsar takes an optional ``MessageIdImpl``/``ResetCursorData`` JSON; absent means latest.
    (-1, -1) is ``MessageId.earliest``; Long.MAX_VALUE ids are ``MessageId.latest``.
    """
    if body is None:
        return ("latest", None)
    if isinstance(body, str) and body.lower() in ("latest", "earliest"):
        return (body.lower(), None)
    data = parse_reset_cursor_data(body)
    if data.ledger_id < 0 and data.entry_id < 0:
        return ("earliest", None)
    if data.ledger_id >= 2**63 - 1:
        return ("latest", None)
    return ("latest", (data.ledger_id, data.entry_id))


def parse_subscription_properties(body: object) -> dict[str, str]:
    """A subscription's properties: a JSON object of strings (``null``: none)."""
    if body is None:
        return {}
    if not isinstance(body, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in body.items()):
        raise bad_request("Invalid subscription properties: expected an object of strings")
    return dict(body)


def parse_partitions(body: object) -> int:
    """``PUT .../partitions`` body: a JSON integer (Pulsar also tolerates a numeric string), or
    Pulsar's PartitionedTopicMetadata object ``{"partitions": N, "properties": {...}}`` (media
    type ``application/vnd.partitioned-topic-metadata+json``, what pulsar-admin and the Go admin
    client send); its properties are read by
    :func:`broker.admin.properties_routes.properties_of_create`."""
    if isinstance(body, dict) and "partitions" in body:
        body = body["partitions"]
    try:
        if isinstance(body, bool):
            raise ValueError
        return _as_int(body)
    except (ValueError, TypeError):
        raise bad_request("Invalid number of partitions: expected an integer body") from None


__all__ = [
    "MessageIdRef",
    "ResetCursorData",
    "RestError",
    "load_json",
    "message_id_from_base64",
    "message_id_to_base64",
    "parse_partitions",
    "parse_reset_cursor_data",
    "parse_skip_by_message_ids",
    "parse_subscription_start",
]
