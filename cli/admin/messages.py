"""``horae-admin topics`` commands that print messages: peek-messages, get-message-by-id,
examine-message.

Theory of operation: the REST API answers one stored entry per request, its payload as the
body and its metadata in ``X-Pulsar-*`` headers (:func:`cli.admin.rest.call_raw`). A batch entry
is expanded here into its messages, as pulsar-admin's client does (each with its own
properties, batch index and id ``ledger:entry:index``); a ZLIB-compressed entry is inflated
first (the other codecs are shown compressed, said so). ``peek-messages -n N`` asks for the
1st, 2nd, ... unacknowledged entry until N messages are printed or the subscription has no
more (404 "Message not found"), as pulsar-admin does. Each message is printed as pulsar-admin
prints it: its id, publish and event time, properties, then the payload as a hex dump with the
printable characters beside it (Netty's ``prettyHexDump`` layout), so binary payloads never
reach the terminal raw. Used by :mod:`cli.admin.main`; no broker imports.
"""

from __future__ import annotations

import argparse
import datetime
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from cli.admin.args import UsageError, q, topic_base
from cli.admin.auth import AdminAuth
from cli.admin.rest import HttpError, RawAnswer, Request, call_raw

__all__ = ["RUNNERS", "Message", "add_parsers", "hex_dump", "messages_of"]

MESSAGE_NOT_FOUND = "Message not found"
#: Most messages one ``peek-messages`` prints (each costs a request per entry).
MAX_PEEK = 10_000
_PROPERTY_PREFIX = "x-pulsar-property-"


@dataclass(frozen=True, slots=True)
class Message:
    """One message as printed: its id text, times (ms), properties and payload."""
    message_id: str
    batch: bool
    publish_time_ms: int
    event_time_ms: int
    deliver_at_ms: int
    properties: dict[str, str] = field(default_factory=dict)
    payload: bytes = b""
    note: str = ""


def _header(headers: dict[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return value
    return None


def _ms(text: str | None) -> int:
    """An ``X-Pulsar-*-time`` header (ISO 8601, or epoch ms) as epoch ms; 0 when absent."""
    if not text:
        return 0
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(when.timestamp() * 1000)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _single_metadata(data: bytes) -> tuple[dict[str, str], int, int]:
    """(properties, payload_size, event_time) of a SingleMessageMetadata (protobuf: field 1
    properties {1 key, 2 value}, 3 payload_size, 5 event_time); others skipped."""
    props: dict[str, str] = {}
    size = event_time = 0
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            if number == 3:
                size = value
            elif number == 5:
                event_time = value
        elif wire == 2:
            length, pos = _varint(data, pos)
            chunk = data[pos:pos + length]
            pos += length
            if number == 1:
                key = value_text = ""
                inner = 0
                while inner < len(chunk):
                    itag, inner = _varint(chunk, inner)
                    ilen, inner = _varint(chunk, inner)
                    text = chunk[inner:inner + ilen].decode("utf-8", "replace")
                    inner += ilen
                    if itag >> 3 == 1:
                        key = text
                    elif itag >> 3 == 2:
                        value_text = text
                props[key] = value_text
        elif wire == 5:
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return props, size, event_time


def messages_of(answer: RawAnswer) -> list[Message]:
    """The messages of one entry answer: one, or each message of a batch."""
    h = answer.headers
    entry_id = _header(h, "X-Pulsar-Message-ID") or "?"
    publish = _ms(_header(h, "X-Pulsar-publish-time"))
    event = _ms(_header(h, "X-Pulsar-event-time"))
    deliver = _ms(_header(h, "X-Pulsar-deliver-at-time"))
    props = {k[len(_PROPERTY_PREFIX):]: v for k, v in h.items()
             if k.lower().startswith(_PROPERTY_PREFIX)}
    all_props = _header(h, "X-Pulsar-Property")   # every property, names in their own case
    if all_props:
        try:
            decoded = json.loads(all_props)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            props = {str(k): str(v) for k, v in decoded.items()}
    payload, note = answer.body, ""
    codec = (_header(h, "X-Pulsar-compression") or "NONE").upper()
    if codec == "ZLIB":
        try:
            payload = zlib.decompress(payload)
        except zlib.error:
            note = "ZLIB payload does not inflate: shown as stored"
    elif codec != "NONE":
        note = f"{codec}-compressed payload: shown as stored"
    count = _header(h, "X-Pulsar-num-batch-message")
    if count is None or note:
        return [Message(entry_id, False, publish, event, deliver, props, payload, note)]
    out: list[Message] = []
    pos = 0
    try:
        for index in range(int(count)):
            (size,) = struct.unpack_from(">I", payload, pos)
            meta = payload[pos + 4:pos + 4 + size]
            single_props, data_size, single_event = _single_metadata(meta)
            pos += 4 + size
            out.append(Message(f"{entry_id}:{index}", True, publish, single_event or event,
                               deliver, single_props, payload[pos:pos + data_size]))
            pos += data_size
    except (struct.error, ValueError):
        return [Message(entry_id, False, publish, event, deliver, props, answer.body,
                        "batch payload does not parse: shown as stored")]
    return out


def hex_dump(data: bytes) -> str:
    """Netty's ``ByteBufUtil.prettyHexDump`` layout: offset, 16 bytes in hex, printable ASCII."""
    lines = ["         +-------------------------------------------------+",
             "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
             "+--------+-------------------------------------------------+----------------+"]
    for offset in range(0, len(data), 16):
        row = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in row)
        lines.append(f"|{offset:08x}| {hexes:<47} |{text:<16}|")
    lines.append(lines[2])
    return "\n".join(lines)


def format_message(m: Message) -> str:
    """A message as pulsar-admin's peek-messages prints it."""
    lines = [("Batch Message ID: " if m.batch else "Message ID: ") + m.message_id,
             f"Publish time: {m.publish_time_ms}", f"Event time: {m.event_time_ms}"]
    if m.deliver_at_ms:
        lines.append(f"Deliver at time: {m.deliver_at_ms}")
    if m.properties:
        lines.append("Properties:")
        lines.append(json.dumps(m.properties, indent=2, ensure_ascii=False))
    if m.note:
        lines.append(f"({m.note})")
    lines.append(hex_dump(m.payload))
    return "\n".join(lines)


# --- commands ------------------------------------------------------------------------------
Runner = Callable[[str, argparse.Namespace, AdminAuth], str]


def peek(admin_url: str, a: argparse.Namespace, auth: AdminAuth) -> str:
    if not 1 <= a.count <= MAX_PEEK:
        raise UsageError(f"--count must be between 1 and {MAX_PEEK}, not {a.count}")
    sub = topic_base(a.topic) + f"/subscription/{q(a.subscription)}/position/"
    found: list[Message] = []
    nth = 1
    while len(found) < a.count:
        try:
            answer = call_raw(admin_url, Request("GET", sub + str(nth)), auth)
        except HttpError as exc:
            if exc.status == 404 and exc.reason == MESSAGE_NOT_FOUND:
                break           # the subscription has no more: print what was found
            raise
        found.extend(messages_of(answer)[:a.count - len(found)])
        nth += 1
    return "\n".join(format_message(m) for m in found)


def by_id(admin_url: str, a: argparse.Namespace, auth: AdminAuth) -> str:
    path = topic_base(a.topic) + f"/ledger/{a.ledger_id}/entry/{a.entry_id}"
    return "\n".join(format_message(m) for m in messages_of(
        call_raw(admin_url, Request("GET", path), auth)))


def examine(admin_url: str, a: argparse.Namespace, auth: AdminAuth) -> str:
    path = (topic_base(a.topic) + f"/examinemessage?initialPosition={q(a.initial_position)}"
            f"&messagePosition={a.message_position}")
    return "\n".join(format_message(m) for m in messages_of(
        call_raw(admin_url, Request("GET", path), auth)))


RUNNERS: dict[tuple[str, str], Runner] = {
    ("topics", "peek-messages"): peek,
    ("topics", "get-message-by-id"): by_id,
    ("topics", "examine-message"): examine,
    ("topics", "examine-messages"): examine,
}


def add_parsers(topics: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Declare the commands of :data:`RUNNERS` on the ``topics`` sub-parsers."""
    pk = topics.add_parser("peek-messages", help="print the next N unacknowledged messages of "
                           "a subscription (batches expanded, payloads as hex dumps)")
    pk.add_argument("topic")
    pk.add_argument("--subscription", "-s", required=True)
    pk.add_argument("--count", "-n", type=int, default=1, help="messages to print (default 1)")
    gm = topics.add_parser("get-message-by-id", help="print the message(s) stored at a "
                           "ledgerId:entryId (a batch expanded)")
    gm.add_argument("topic")
    gm.add_argument("--ledgerId", "-l", dest="ledger_id", type=int, required=True)
    gm.add_argument("--entryId", "-e", dest="entry_id", type=int, required=True)
    ex = topics.add_parser("examine-message", aliases=["examine-messages"],
                           help="print the n-th message from the earliest or latest end")
    ex.add_argument("topic")
    ex.add_argument("--initialPosition", "-i", dest="initial_position", default="latest",
                    choices=("latest", "earliest"))
    ex.add_argument("--messagePosition", "-m", dest="message_position", type=int, default=1)
