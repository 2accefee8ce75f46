"""Topic operations of Pulsar's admin API: unload, terminate, peek, examine, expire, grow.

Theory of operation: Pulsar's ``PersistentTopics`` paths, status codes and reasons, over the
same :class:`AdminService` the other topic routes use:

- ``PUT .../{topic}/unload``: closes the loaded topic (each partition of a partitioned one);
  clients reconnect and load it again on a new ledger. 204.
- ``POST .../{topic}/terminate``: the topic takes no more messages (durably, see
  :mod:`broker.topics.termination`); answers the last message id ``{"ledgerId", "entryId",
  "partitionIndex", "batchIndex", "batchSize"}`` (batch -1 and 0, as Pulsar's MessageIdImpl).
  On a partitioned topic 405 "Termination of a partitioned topic is not allowed";
  ``POST .../terminate/partitions`` terminates every partition and answers ``{index: id}``.
  On a non-persistent topic termination is 406 "Need to provide a persistent topic name" and
  expiry 405 "Expire messages on a non-persistent topic is not allowed", Pulsar's answers.
- ``GET .../subscription/{sub}/position/{n}``: peek the n-th (1-based) unacknowledged entry
  (a subscription the topic does not have is created at the earliest message, as Pulsar does);
  ``GET .../examinemessage?initialPosition=earliest|latest&messagePosition=n``: the n-th entry
  from either end. Both answer the entry's payload (``application/octet-stream``) with the
  ``X-Pulsar-*`` headers Pulsar's admin client decodes (a batch comes whole, with
  ``X-Pulsar-num-batch-message``). 405 on a partitioned topic, 404 past the end.
  ``GET .../ledger/{ledgerId}/entry/{entryId}`` answers one entry by its id the same way (404
  "Message not found" for an id the topic does not hold).
- ``POST .../subscription/{sub}/expireMessages/{seconds}``, ``.../all_subscription/
  expireMessages/{seconds}`` and ``.../subscription/{sub}/expireMessages`` with a message id:
  acknowledge what is older (:mod:`broker.subscriptions.expiry`). 204.
- ``POST .../{topic}/partitions`` with a number: grow a partitioned topic; fewer partitions
  than now is 422 "Desired partitions N can't be less than the current partitions M.", as
  Pulsar refuses shrinking.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import json_response, no_content, topic_of
from broker.admin.service import (
    NON_PERSISTENT,
    PERSISTENT,
    AdminEntries,
    AdminService,
    AdminTopics,
)
from broker.admin.topics import SUB, TOPIC
from broker.metrics.rates import iso_ms
from broker.subscriptions.expiry import expire_before, expire_up_to
from broker.topics.names import TopicName
from broker.topics.topic import Topic
from protocol.entry_metadata import parse_prefix
from protocol.metadata import parse_metadata, split_entry
from storage.positions import Position

__all__ = ["add_routes", "entry_response"]

MESSAGE_NOT_FOUND = "Message not found"
NP_TOPIC = "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}"
NP_SUB = NP_TOPIC + "/subscription/{sub}"
_COMPRESSION = {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}


async def _topic(request: web.Request) -> tuple[AdminService, TopicName]:
    domain = NON_PERSISTENT if request.path.startswith("/admin/v2/non-persistent/") \
        else PERSISTENT
    return await topic_of(request, domain)


def _message_id(pos: Position | None, partition: int = -1) -> dict[str, int]:
    """Pulsar's MessageIdImpl as its admin writes it (no batch: index -1, size 0)."""
    ledger, entry = (-1, -1) if pos is None else (pos.ledger_id, pos.entry_id)
    return {"ledgerId": ledger, "entryId": entry, "partitionIndex": partition,
            "batchIndex": -1, "batchSize": 0}


def _positive_int(request: web.Request, text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise E.bad_request(f"{what} must be an integer") from None
    if value <= 0:
        raise E.precondition_failed(f"{what} must be greater than 0")
    return value


# --- unload / terminate ------------------------------------------------------------------
async def unload(request: web.Request) -> web.Response:
    admin, tn = await _topic(request)
    for topic in await admin.topics.targets(tn):
        await admin.topics.unload(topic)
    return no_content()


async def terminate(request: web.Request) -> web.Response:
    admin, tn = await _topic(request)
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_allowed("Termination of a partitioned topic is not allowed")
    [topic] = await admin.topics.targets(tn)
    return json_response(_message_id(await topic.terminate()))


async def terminate_partitions(request: web.Request) -> web.Response:
    admin, tn = await _topic(request)
    n = await admin.topics.partition_count(tn)
    if n == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    out: dict[str, Any] = {}
    for i in range(n):
        topic = await admin.topics.get(tn.partition(i), create=True)
        out[str(i)] = _message_id(await topic.terminate(), i)
    return json_response(out)


# --- peek / examine ------------------------------------------------------------------------
#: An HTTP header name (RFC 9110 token).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: What a header value may not hold: control characters (CR, LF, NUL, ...).
_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _header_safe(value: str) -> str:
    """*value* as a header value: control characters percent-escaped, so a message's text
    can never break or inject headers."""
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)


def entry_response(pos: Position, data: bytes) -> web.Response:
    """An entry as Pulsar's peek/examine answer it: payload body, metadata in headers."""
    md = parse_metadata(data)
    payload = bytes(split_entry(data)[1])
    has = md.HasField
    h: dict[str, str] = {
        "X-Pulsar-Message-ID": f"{pos.ledger_id}:{pos.entry_id}",
        "X-Pulsar-publish-time": iso_ms(md.publish_time),
        "X-Pulsar-producer-name": _header_safe(md.producer_name),
        "X-Pulsar-sequence-id": str(md.sequence_id),
        "X-Pulsar-batch-size": str(len(payload)),
    }
    broker_metadata = parse_prefix(data)
    if broker_metadata is not None:
        if broker_metadata.broker_timestamp is not None:
            h["X-Pulsar-Broker-Entry-METADATA-timestamp"] = iso_ms(broker_metadata.broker_timestamp)
        if broker_metadata.index is not None:
            h["X-Pulsar-Broker-Entry-METADATA-index"] = str(broker_metadata.index)
    for kv in md.properties:
        # Only names an HTTP header may carry ("details=man" may not: clients refuse the whole
        # answer); every property is in the JSON header below anyway.
        if _TOKEN.fullmatch(kv.key):
            h[f"X-Pulsar-PROPERTY-{kv.key}"] = _header_safe(kv.value)
    if len(md.properties):
        # All of them in one JSON header, as Pulsar sends: names keep their case there (HTTP
        # libraries canonicalise header names); ASCII with escapes, so any text fits.
        h["X-Pulsar-PROPERTY"] = json.dumps({kv.key: kv.value for kv in md.properties})
    if has("event_time") and md.event_time:
        h["X-Pulsar-event-time"] = iso_ms(md.event_time)
    if has("deliver_at_time"):
        h["X-Pulsar-deliver-at-time"] = iso_ms(md.deliver_at_time)
    if has("partition_key"):
        h["X-Pulsar-partition-key"] = _header_safe(md.partition_key)
    if has("ordering_key"):
        h["X-Pulsar-Base64-ordering-key"] = base64.b64encode(md.ordering_key).decode()
    if has("schema_version"):
        h["X-Pulsar-Base64-schema-version-b64encoded"] = base64.b64encode(
            md.schema_version).decode()
    if has("compression") and md.compression:
        h["X-Pulsar-compression"] = _COMPRESSION.get(md.compression, str(md.compression))
        h["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if has("num_messages_in_batch"):
        h["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
    if has("null_value") and md.null_value:
        h["X-Pulsar-null-value"] = "true"
    if has("encryption_algo") or len(md.encryption_keys):
        h["X-Pulsar-Is-Encrypted"] = "true"
    if has("chunk_id"):
        h["X-Pulsar-chunk-id"] = str(md.chunk_id)
        h["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        h["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
    return web.Response(body=payload, headers=h, content_type="application/octet-stream")


async def _single(request: web.Request, refusal: str) -> Topic:
    admin, tn = await _topic(request)
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_allowed(refusal)
    [topic] = await admin.topics.targets(tn)
    return topic


async def _read(topic: Topic, pos: Position) -> web.Response:
    data = await AdminEntries.read(topic, pos)
    if data is None:
        raise E.not_found(MESSAGE_NOT_FOUND)
    return entry_response(pos, data)


async def peek(request: web.Request) -> web.Response:
    """As Pulsar's ``getSubscriptionReference``: a subscription the topic does not have is
    created first, at the earliest message, so peeking a new name shows the whole topic."""
    n = _positive_int(request, request.match_info["n"], "messagePosition")
    topic = await _single(request, "Peek messages on a partitioned topic is not allowed")
    name = request.match_info["sub"]
    if name not in topic.subscriptions:
        await topic.subscriptions.get_or_create_subscription(name, initial_position="earliest")
    sub = AdminTopics.subscription(topic, name)
    pos = AdminEntries.nth_unacked(topic, sub, n)
    if pos is None:
        raise E.not_found(MESSAGE_NOT_FOUND)
    return await _read(topic, pos)


async def examine(request: web.Request) -> web.Response:
    initial = request.query.get("initialPosition", "latest").lower()
    if initial not in ("latest", "earliest"):
        raise E.precondition_failed("initialPosition must be 'latest' or 'earliest'")
    n = _positive_int(request, request.query.get("messagePosition", "1"), "messagePosition")
    topic = await _single(request, "Examine messages on a partitioned topic is not allowed, "
                                   "please try examine message on specific topic partition")
    entries = AdminEntries.positions(topic)
    if not entries:
        raise E.precondition_failed(
            "Could not examine messages due to the total message is zero")
    if n > len(entries):
        raise E.not_found(MESSAGE_NOT_FOUND)
    pos = entries[n - 1] if initial == "earliest" else entries[len(entries) - n]
    return await _read(topic, pos)


async def message_by_id(request: web.Request) -> web.Response:
    """``GET .../ledger/{ledgerId}/entry/{entryId}``: that entry, as peek answers it. A
    partitioned topic's parent has no ledgers: ask a partition (404 otherwise, as Pulsar's
    topic lookup answers)."""
    m = request.match_info
    try:
        pos = Position(int(m["ledgerId"]), int(m["entryId"]))
    except ValueError:
        raise E.bad_request("ledgerId and entryId must be integers") from None
    admin, tn = await _topic(request)
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_found(E.TOPIC_NOT_FOUND)
    [topic] = await admin.topics.targets(tn)
    return await _read(topic, pos)


# --- expire --------------------------------------------------------------------------------
def _cutoff_ms(request: web.Request) -> int | None:
    """Entries published before this time expire; None for 0 seconds, which expires nothing
    (Pulsar's ``MessageImpl.isEntryExpired`` holds no entry expired at a TTL of 0; a negative
    time expires every entry)."""
    try:
        seconds = int(request.match_info["seconds"])
    except ValueError:
        raise E.bad_request("expireTimeInSeconds must be an integer") from None
    return None if seconds == 0 else int(time.time() * 1000) - seconds * 1000


async def expire_subscription(request: web.Request) -> web.Response:
    cutoff = _cutoff_ms(request)
    admin, tn = await _topic(request)
    for _, sub in await admin.topics.subscriptions_of(tn, request.match_info["sub"]):
        if cutoff is not None:
            await expire_before(sub, cutoff)
    return no_content()


async def expire_all_subscriptions(request: web.Request) -> web.Response:
    cutoff = _cutoff_ms(request)
    admin, tn = await _topic(request)
    for topic in await admin.topics.targets(tn):
        for sub in list(topic.subscriptions.values()):
            if cutoff is not None:
                await expire_before(sub, cutoff)
    return no_content()


async def expire_to_message(request: web.Request) -> web.Response:
    data = bodies.parse_reset_cursor_data(bodies.load_json(await request.read()))
    admin, tn = await _topic(request)
    n = await admin.topics.partition_count(tn)
    if n > 0:
        if not 0 <= data.partition_index < n:
            raise E.not_allowed("Expire message at position is not supported for "
                                "partitioned-topic")
        tn = tn.partition(data.partition_index)
    [(_, sub)] = await admin.topics.subscriptions_of(tn, request.match_info["sub"])
    last = Position(data.ledger_id, data.entry_id)
    if data.is_excluded:
        last = Position(data.ledger_id, data.entry_id - 1)
    await expire_up_to(sub, last)
    return no_content()


# --- partitions ------------------------------------------------------------------------------
async def update_partitions(request: web.Request) -> web.Response:
    partitions = bodies.parse_partitions(bodies.load_json(await request.read()))
    admin, tn = await _topic(request)
    if partitions <= 0:
        raise E.RestError(406, E.PARTITIONS_NOT_POSITIVE)
    admin.topics.check_partition_limit(partitions)
    current = await admin.topics.partition_count(tn)
    if current == 0:
        if await admin.topics.exists(tn):
            raise E.RestError(422, f"Topic {tn} is not the partitioned topic.")
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    if partitions < current:
        raise E.RestError(422, f"Desired partitions {partitions} can't be less than the "
                               f"current partitions {current}.")
    if partitions > current:
        await admin.topics.grow_partitioned(tn, partitions)
    return no_content()


# --- non-persistent topics ----------------------------------------------------------------
async def unload_nonpersistent(request: web.Request) -> web.Response:
    """Unloading an in-memory topic closes it: its clients reconnect to a fresh one."""
    admin, tn = await _topic(request)
    n = await admin.topics.partition_count(tn)
    for name in [tn.partition(i) for i in range(n)] if n else [tn]:
        admin.topics.close_nonpersistent(name)
    return no_content()


def _not_on_nonpersistent(status: int,
                          reason: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def refuse(request: web.Request) -> web.Response:
        await _topic(request)
        raise E.RestError(status, reason)
    return refuse


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_put(TOPIC + "/unload", unload)
    r.add_post(TOPIC + "/terminate", terminate)
    r.add_post(TOPIC + "/terminate/partitions", terminate_partitions)
    r.add_post(TOPIC + "/partitions", update_partitions)
    r.add_post(TOPIC + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions)
    r.add_post(SUB + "/expireMessages/{seconds}", expire_subscription)
    r.add_post(SUB + "/expireMessages", expire_to_message)
    # Pulsar refuses termination and expiry on non-persistent topics (nothing is stored), with
    # these statuses and reasons.
    r.add_put(NP_TOPIC + "/unload", unload_nonpersistent)
    r.add_post(NP_TOPIC + "/partitions", update_partitions)
    terminate_np = _not_on_nonpersistent(406, "Need to provide a persistent topic name")
    expire_np = _not_on_nonpersistent(
        405, "Expire messages on a non-persistent topic is not allowed")
    r.add_post(NP_TOPIC + "/terminate", terminate_np)
    r.add_post(NP_TOPIC + "/terminate/partitions", terminate_np)
    r.add_post(NP_TOPIC + "/all_subscription/expireMessages/{seconds}", expire_np)
    r.add_post(NP_SUB + "/expireMessages/{seconds}", expire_np)
    r.add_post(NP_SUB + "/expireMessages", expire_np)
    r.add_get(SUB + "/position/{n}", peek)
    r.add_get(TOPIC + "/examinemessage", examine)
    r.add_get(TOPIC + "/ledger/{ledgerId}/entry/{entryId}", message_by_id)

