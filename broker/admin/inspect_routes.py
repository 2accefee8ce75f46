"""Inspection and maintenance of a topic, as Pulsar's ``PersistentTopics`` answers them.

Theory of operation: each handler parses the path once, asks the admin service for the
topic(s) it applies to (Pulsar's 404 reasons come from there) and reads or changes them through
:class:`broker.admin.service.AdminEntries`. Paths under ``/admin/v2/persistent/{t}/{ns}/{topic}``:

- ``GET .../messageid/{timestamp}``: the first message published at or after *timestamp* (ms),
  as ``{"ledgerId", "entryId", "partitionIndex", ...}``; the position after the last message
  when every message is older (or there is none), as Pulsar. On a partitioned topic ask a
  partition (405).
- ``GET .../lastMessageId``: the last stored message's id (``entryId`` -1 on an empty topic).
- ``GET .../getMessageIdByIndex?index=N`` (Pulsar's PIP-415): the entry holding message index N
  of broker entry metadata (``AppendIndexMetadataInterceptor``; each stored entry carries its
  last message's index, a count that only grows): a binary search for the first entry whose
  last index is at least N, its id whichever of its messages N names, as Pulsar resolves it;
  ``MessageId.Earliest`` (-1:-1) when that message is no longer stored; 404 ``Invalid index``
  below 0 or past the last index given out; 412 when the broker stamps no index. Entries stored
  before the interceptor was configured carry no index and count as older.
- ``GET .../internal-info``: Pulsar's ManagedLedgerInfo (ledgers, cursors, termination); a
  partitioned topic answers ``{"version", "partitions": {name: info}}``.
- ``PUT .../backlogSize`` with a message id body: the bytes stored from that message on.
- ``POST .../subscription/{sub}/analyzeBacklog`` (optional message id body to start from):
  the subscription's backlog in entries and messages, at most
  :data:`BACKLOG_SCAN_MAX_ENTRIES` entries read (Pulsar's
  ``subscriptionBacklogScanMaxEntries``; ``aborted`` beyond).
- ``DELETE .../truncate``: clear every subscription's backlog, then delete every sealed ledger,
  retention notwithstanding (the current ledger stays). 204.
- ``POST .../trim``: delete the sealed ledgers every subscription has consumed, keeping what
  retention keeps. 200 with no body, as Pulsar.
- ``POST .../createMissedPartitions``: create the partitions of a partitioned topic that do not
  exist yet. 204; 404 "Topic {name} does not exist" for a topic that is not partitioned, as
  Pulsar 4.0.

Partitioned topics: truncate and trim run on every partition, as Pulsar fans them out; the
reads that name one position answer 405 (ask a partition). Non-persistent topics answer as
Pulsar does: 405 (or 412 for truncate) with its reasons.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, no_content, topic_of
from broker.admin.service import AdminEntries, AdminTopics, topic_name
from broker.admin.topic_ops import NP_SUB, NP_TOPIC
from broker.admin.topics import SUB, TOPIC
from broker.topics.names import TopicName
from broker.topics.topic import Topic
from storage.positions import Position

__all__ = ["BACKLOG_SCAN_MAX_ENTRIES", "add_routes"]

#: Pulsar's ``subscriptionBacklogScanMaxEntries`` default: most entries analyzeBacklog reads.
BACKLOG_SCAN_MAX_ENTRIES = 10_000


async def _one(request: web.Request, refusal: str) -> tuple[TopicName, Topic]:
    """The non-partitioned topic (or partition) the path names; 405 *refusal* on a
    partitioned topic, 404 when absent."""
    admin, tn = await topic_of(request)
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_allowed(refusal)
    [topic] = await admin.topics.targets(tn)
    return tn, topic


def _message_id(pos: Position, tn: TopicName) -> dict[str, int]:
    """Pulsar's MessageIdImpl as its admin writes it."""
    return {"ledgerId": pos.ledger_id, "entryId": pos.entry_id,
            "partitionIndex": tn.partition_index if tn.is_partition else -1,
            "batchIndex": -1, "batchSize": 0}


# --- reads ---------------------------------------------------------------------------------
async def message_id_by_time(request: web.Request) -> web.Response:
    try:
        timestamp_ms = int(request.match_info["timestamp"])
    except ValueError:
        raise E.bad_request("timestamp must be an integer (epoch milliseconds)") from None
    tn, topic = await _one(request, "Get message ID by timestamp on a partitioned topic is not "
                                    "allowed, please try do it on specific topic partition")
    return json_response(_message_id(await AdminEntries.first_published_at(topic, timestamp_ms),
                                     tn))


async def last_message_id(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request)
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_found(E.TOPIC_NOT_FOUND)   # the parent of partitions holds no messages
    [topic] = await admin.topics.targets(tn)
    return json_response(_message_id(AdminEntries.last_position(topic), tn))


INDEX_NOT_ENABLED = ("Broker entry metadata index is not enabled: the broker needs "
                     "AppendIndexMetadataInterceptor in brokerEntryMetadataInterceptors")


async def message_id_by_index(request: web.Request) -> web.Response:
    try:
        index = int(request.query["index"])
    except (KeyError, ValueError):
        raise E.bad_request("index must be given as an integer (?index=N)") from None
    tn, topic = await _one(request, "Get message ID by index on a partitioned topic is not "
                                    "allowed, please try do it on specific topic partition")
    stamper = topic.entry_stamper
    if stamper is None or not stamper.indexes:
        raise E.precondition_failed(INDEX_NOT_ENABLED)
    if index < 0 or index > stamper.index:
        raise E.not_found("Invalid index")
    pos = await AdminEntries.entry_of_index(topic, index)
    return json_response(_message_id(pos, tn))


async def internal_info(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request)
    n = await admin.topics.partition_count(tn)
    if n > 0:
        parts = {}
        for i in range(n):
            topic = await admin.topics.get(tn.partition(i), create=True)
            parts[tn.partition(i).full] = AdminEntries.managed_ledger_info(topic)
        return json_response({"version": 0, "partitions": parts})
    [topic] = await admin.topics.targets(tn)
    return json_response(AdminEntries.managed_ledger_info(topic))


async def backlog_size(request: web.Request) -> web.Response:
    data = bodies.parse_reset_cursor_data(bodies.load_json(await request.read()))
    _, topic = await _one(request, "calculate backlog size is not allowed for partitioned-topic")
    return json_response(AdminEntries.backlog_size_from(
        topic, Position(data.ledger_id, data.entry_id)))


async def analyze_backlog(request: web.Request) -> web.Response:
    raw = await request.read()
    start: Position | None = None
    if raw.strip():
        data = bodies.parse_reset_cursor_data(bodies.load_json(raw))
        start = Position(data.ledger_id, data.entry_id)
    _, topic = await _one(request, "Analyze backlog on a partitioned topic is not allowed, "
                                   "please try do it on specific topic partition")
    sub = AdminTopics.subscription(topic, request.match_info["sub"])
    return json_response(await AdminEntries.analyze_backlog(topic, sub, start,
                                                            BACKLOG_SCAN_MAX_ENTRIES))


# --- maintenance ---------------------------------------------------------------------------
async def truncate(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request)
    for topic in await admin.topics.targets(tn):
        await AdminEntries.truncate(topic)
    return no_content()


async def trim(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request)
    for topic in await admin.topics.targets(tn):
        await AdminEntries.trim(topic)
    return json_response(None)   # Pulsar's trimTopic answers 200 with no body


async def create_missed_partitions(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request)
    n = await admin.topics.partition_count(tn)
    if n == 0:   # Pulsar 4.0 reads the partitioned metadata of an existing partitioned topic
        raise E.not_found(f"Topic {tn.full} does not exist")
    for i in range(n):
        await admin.topics.get(tn.partition(i), create=True)
    return no_content()


# --- non-persistent topics -----------------------------------------------------------------
def _refuse(status: int, reason: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def refuse(request: web.Request) -> web.Response:
        m = request.match_info
        await admin_of(request).tenants.require_namespace(m["tenant"], m["namespace"])
        topic_name(m["tenant"], m["namespace"], m["topic"], "non-persistent")
        raise E.RestError(status, reason)
    return refuse


async def analyze_backlog_np(request: web.Request) -> web.Response:
    """Pulsar looks the subscription up first (404 without it); a non-persistent one has no
    backlog to analyze (405)."""
    m = request.match_info
    admin = admin_of(request)
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    topic = admin.topics.nonpersistent(
        topic_name(m["tenant"], m["namespace"], m["topic"], "non-persistent"))
    if topic is None:
        raise E.not_found(E.TOPIC_NOT_FOUND)
    if m["sub"] not in topic.subscriptions:
        raise E.not_found(E.SUBSCRIPTION_NOT_FOUND)
    raise E.not_allowed("Analyze backlog on a non-persistent topic is not allowed")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(TOPIC + "/messageid/{timestamp}", message_id_by_time)
    r.add_get(TOPIC + "/lastMessageId", last_message_id)
    r.add_get(TOPIC + "/getMessageIdByIndex", message_id_by_index)
    r.add_get(TOPIC + "/internal-info", internal_info)
    r.add_put(TOPIC + "/backlogSize", backlog_size)
    r.add_post(SUB + "/analyzeBacklog", analyze_backlog)
    r.add_delete(TOPIC + "/truncate", truncate)
    r.add_post(TOPIC + "/trim", trim)
    r.add_post(TOPIC + "/createMissedPartitions", create_missed_partitions)
    r.add_get(NP_TOPIC + "/messageid/{timestamp}", _refuse(
        405, "Get message ID by timestamp on a non-persistent topic is not allowed"))
    r.add_get(NP_TOPIC + "/lastMessageId", _refuse(
        405, "GetLastMessageId on a non-persistent topic is not allowed"))
    r.add_get(NP_TOPIC + "/getMessageIdByIndex", _refuse(
        406, "Get message ID by index on a non-persistent topic is not allowed"))
    r.add_delete(NP_TOPIC + "/truncate", _refuse(412, "Unsupported truncate"))
    r.add_post(NP_TOPIC + "/trim", _refuse(405, "Trim on a non-persistent topic is not allowed"))
    r.add_post(NP_SUB + "/analyzeBacklog", analyze_backlog_np)

