"""``/admin/v2/persistent/{tenant}/{namespace}/...``: topics and subscriptions.

Theory of operation: each handler parses the path into a :class:`TopicName` once, asks the
admin service's topics (:class:`broker.admin.service.AdminTopics`) for the topic(s) it
applies to (404s with Pulsar's reasons come from there), and calls the Topic / Subscription methods directly. Operations Pulsar fans
out over a partitioned topic (stats, internal stats, subscriptions, create/delete
subscription, skip_all, reset by time, skip by ids) run on every partition; the ones it
refuses on a partitioned topic (skip/{n}, reset to a position) answer 405 as Pulsar does.
Success without a body is 204, like Pulsar's JAX-RS void methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from broker.admin import bodies, topic_times
from broker.admin import errors as E
from broker.admin.properties_routes import properties_of_create, store_topic_properties
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import AdminEntries, AdminService, topic_name
from broker.admin.shadow_routes import check_shadow_create, check_source_delete
from broker.admin.stats import aggregate_stats
from broker.topics import stats as topic_docs
from broker.topics.names import TopicName
from broker.topics.policies import PolicyLimitError
from broker.topics.topic import Topic
from protocol.errors import NotAllowedError
from storage.positions import Position

BASE = "/admin/v2/persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"
SUB = TOPIC + "/subscription/{sub}"



def _topic_name(request: web.Request) -> TopicName:
    m = request.match_info
    return topic_name(m["tenant"], m["namespace"], m["topic"])


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("1", "true", "yes")


def _topic_busy(topic: Topic) -> bool:
    return bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())


# --- topics ------------------------------------------------------------------------------
async def list_topics(request: web.Request) -> web.Response:
    m = request.match_info
    return json_response(await admin_of(request).topics.list_topics(m["tenant"], m["namespace"]))


async def list_partitioned(request: web.Request) -> web.Response:
    m = request.match_info
    return json_response(
        await admin_of(request).topics.list_partitioned(m["tenant"], m["namespace"]))


async def create_topic(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    m = request.match_info
    properties = properties_of_create(bodies.load_json(await request.read()))
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    if await admin.topics.partition_count(tn) > 0 or await admin.topics.exists(tn):
        raise E.conflict(E.TOPIC_EXISTS)
    shadow = await check_shadow_create(admin, tn, properties, partitioned=False)
    if shadow:  # a shadow is loaded over its source's ledger: the property comes first
        await store_topic_properties(admin, tn, properties)
    try:
        await admin.topics.create(tn)
    except BaseException as exc:
        if shadow:
            await admin.policy_store.records.drop_topic(tn.full)
        if isinstance(exc, PolicyLimitError):
            # Pulsar's broker refuses the topic with NotAllowed, which its REST layer answers
            # 409 here (412 only on the partitioned create, which checks the limit itself)
            raise E.conflict(exc.message) from None
        raise
    if properties and not shadow:
        await store_topic_properties(admin, tn, properties)
    return no_content()


async def create_partitioned(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    m = request.match_info
    body = bodies.load_json(await request.read())
    partitions = bodies.parse_partitions(body)
    properties = properties_of_create(body, partitioned=True)
    if "-partition-" in tn.local_name:
        raise E.precondition_failed(E.PARTITIONED_NAME_WITH_SUFFIX)
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    if partitions <= 0:
        raise E.RestError(406, E.PARTITIONS_NOT_POSITIVE)
    admin.topics.check_partition_limit(partitions)
    if await admin.topics.partition_count(tn) > 0:
        raise E.conflict(E.PARTITIONED_TOPIC_EXISTS)
    if await admin.topics.exists(tn):
        raise E.conflict(E.TOPIC_EXISTS)
    await check_shadow_create(admin, tn, properties, partitioned=True)
    await admin.topics.create_partitioned(tn, partitions)
    if properties:
        await store_topic_properties(admin, tn, properties)
    return no_content()


async def get_partitions(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    if _flag(request, "checkAllowAutoCreation"):
        # A client's HTTP lookup: auto-created as its binary lookup would be.
        partitions = await admin.topics.lookup_partition_count(tn)
    else:
        partitions = await admin.topics.partition_count(tn)
    # Pulsar's PartitionedTopicMetadata; "deleted" is true only while a deletion runs, and
    # "properties" are shown when the partitioned topic has some
    body: dict[str, Any] = {"partitions": partitions, "deleted": False}
    properties = admin.policy_store.records.topic(tn.full).get("properties") if partitions else None
    if properties:
        body["properties"] = properties
    return json_response(body)


async def delete_topic(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    force = _flag(request, "force")
    if await admin.topics.partition_count(tn) > 0:
        raise E.conflict("Topic is a partitioned topic: delete it with DELETE .../partitions")
    if not await admin.topics.exists(tn):
        raise E.not_found(E.TOPIC_NOT_FOUND)
    topic = admin.topics.loaded(tn)
    if topic is not None and not force and _topic_busy(topic):
        raise E.precondition_failed(E.TOPIC_BUSY)
    if not force:
        check_source_delete(admin, tn)
    await admin.topics.delete(tn, force=force)
    return no_content()


async def delete_partitioned(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    force = _flag(request, "force")
    n = await admin.topics.partition_count(tn)
    if n == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    parts = [tn.partition(i) for i in range(n)]
    if not force:
        for p in parts:
            topic = admin.topics.loaded(p)
            if topic is not None and _topic_busy(topic):
                raise E.precondition_failed(E.TOPIC_BUSY)
    await admin.topics.delete(tn, force=force)   # a partitioned topic: all of it
    return no_content()


def _stats_of(request: web.Request) -> Callable[[Topic], dict[str, Any]]:
    """A topic's TopicStats as the request asks: Pulsar's ``excludePublishers`` and
    ``excludeConsumers`` options leave those lists empty."""
    no_publishers = _flag(request, "excludePublishers")
    no_consumers = _flag(request, "excludeConsumers")

    def stats(topic: Topic) -> dict[str, Any]:
        doc = topic_docs.topic_stats(topic)
        if no_publishers:
            doc["publishers"] = []
        if no_consumers:
            for sub in doc["subscriptions"].values():
                sub["consumers"] = []
        return doc

    return stats


async def _timed_stats(admin: AdminService, topics: list[Topic],
                       stats_of: Callable[[Topic], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for topic in topics:
        doc = stats_of(topic)
        await topic_times.stamp(admin, topic, doc)
        docs[topic.full] = doc
    return docs


async def topic_stats(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    n = await admin.topics.partition_count(tn)
    docs = await _timed_stats(admin, await admin.topics.targets(tn), _stats_of(request))
    if n == 0:
        return json_response(next(iter(docs.values())))
    per_partition = request.query.get("perPartition", "true").lower() != "false"
    return json_response(_partitioned_stats(docs, n, per_partition))


async def partitioned_stats(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    n = await admin.topics.partition_count(tn)
    if n == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    per_partition = request.query.get("perPartition", "true").lower() != "false"
    docs = await _timed_stats(admin, await admin.topics.targets(tn), _stats_of(request))
    return json_response(_partitioned_stats(docs, n, per_partition))


def _partitioned_stats(stats: dict[str, dict[str, Any]], n: int,
                       per_partition: bool) -> dict[str, Any]:
    result = aggregate_stats(list(stats.values()))
    topic_times.stamp_partitioned(result, list(stats.values()))
    result["metadata"] = {"partitions": n, "deleted": False}
    result["partitions"] = stats if per_partition else {}
    return result


async def internal_stats(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    n = await admin.topics.partition_count(tn)
    topics = await admin.topics.targets(tn)
    if n == 0:
        return json_response(topic_docs.internal_stats(topics[0]))
    return json_response({"metadata": {"partitions": n, "deleted": False},
                          "partitions": {t.full: topic_docs.internal_stats(t) for t in topics}})


# --- subscriptions -----------------------------------------------------------------------
async def list_subscriptions(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    names: dict[str, None] = {}
    for topic in await admin.topics.targets(tn):
        names.update(dict.fromkeys(topic.subscriptions))
    return json_response(sorted(names))


async def create_subscription(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    m = request.match_info
    sub_name = m["sub"]
    body = bodies.load_json(await request.read())
    position, start_id = bodies.parse_subscription_start(body)
    properties = bodies.parse_subscription_properties(
        body.get("properties") if isinstance(body, dict) else None)
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    n = await admin.topics.partition_count(tn)
    if n > 0:
        topics = await admin.topics.targets(tn)
    else:
        # Pulsar auto-creates the topic here (allowAutoTopicCreation defaults to true).
        topics = [await admin.topics.get(tn, create=True)]
    if any(sub_name in t.subscriptions for t in topics):
        raise E.conflict(E.SUBSCRIPTION_EXISTS)
    for topic in topics:
        await topic.subscriptions.get_or_create_subscription(sub_name, durable=True, initial_position=position,
                                               start_message_id=start_id, properties=properties)
    return no_content()


async def get_subscription_properties(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    merged: dict[str, str] = {}
    for _, sub in await admin.topics.subscriptions_of(tn, request.match_info["sub"]):
        merged.update(sub.properties.current())
    return json_response(merged)


async def update_subscription_properties(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    properties = bodies.parse_subscription_properties(bodies.load_json(await request.read()))
    for _, sub in await admin.topics.subscriptions_of(tn, request.match_info["sub"]):
        sub.properties.replace(properties)
    return no_content()


async def delete_subscription(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    sub_name = request.match_info["sub"]
    force = _flag(request, "force")
    pairs = await admin.topics.subscriptions_of(tn, sub_name)
    if not force and any(sub.consumers for _, sub in pairs):
        raise E.precondition_failed(E.SUBSCRIPTION_BUSY)
    for topic, sub in pairs:
        if force and sub.consumers:
            # force=true: the topic disconnects the consumers, then deletes (Pulsar's).
            await topic.subscriptions.delete_subscription(sub_name, force=True)
        else:
            await topic.subscriptions.delete_subscription(sub_name)
    return no_content()


def _int_path_param(request: web.Request, key: str, reason: str) -> int:
    """An integer path segment, or 400 with ``reason``."""
    try:
        return int(request.match_info[key])
    except ValueError:
        raise E.bad_request(reason) from None


async def skip(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    count = _int_path_param(request, "n", "numMessages must be an integer")
    if count < 0:  # Pulsar has no check (its cursor would move backwards); Horae refuses
        raise E.bad_request(f"numMessages must be a non-negative integer, not {count}")
    if await admin.topics.partition_count(tn) > 0:
        raise E.not_allowed("Skip messages on a partitioned topic is not allowed")
    [(_, sub)] = await admin.topics.subscriptions_of(tn, request.match_info["sub"])
    await sub.resets.skip(count)
    return no_content()


async def skip_all(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    for _, sub in await admin.topics.subscriptions_of(tn, request.match_info["sub"]):
        await sub.resets.skip_all()
    return no_content()


async def reset_cursor_time(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    timestamp_ms = _int_path_param(
        request, "timestamp", "timestamp must be an integer (milliseconds)")
    for _, sub in await admin.topics.subscriptions_of(tn, request.match_info["sub"]):
        await sub.resets.reset_cursor_to_timestamp(timestamp_ms)
    return no_content()


async def reset_cursor_position(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    data = bodies.parse_reset_cursor_data(bodies.load_json(await request.read()))
    n = await admin.topics.partition_count(tn)
    if n > 0:
        if not 0 <= data.partition_index < n:
            raise E.not_allowed("Reset-cursor at position is not allowed for partitioned-topic")
        tn = tn.partition(data.partition_index)
    [(topic, sub)] = await admin.topics.subscriptions_of(tn, request.match_info["sub"])
    position = (data.ledger_id, data.entry_id)
    if data.is_excluded:
        position = _position_after(topic, position)
    await sub.resets.reset_cursor(position)
    return no_content()


def _position_after(topic: Topic, position: tuple[int, int]) -> tuple[int, int]:
    """The entry after *position* (the next ledger's first when *position* ends its ledger;
    the next entry id of an unknown ledger)."""
    after = AdminEntries.after(topic, Position(*position))
    return (after.ledger_id, after.entry_id)


async def skip_by_message_ids(request: web.Request) -> web.Response:
    admin, tn = admin_of(request), _topic_name(request)
    ids = bodies.parse_skip_by_message_ids(bodies.load_json(await request.read()))
    pairs = await admin.topics.subscriptions_of(tn, request.match_info["sub"])
    for _, sub in pairs:  # every partition is checked before any skips (405, nothing done)
        sub.resets.check_skip_by_message_ids()
    partitioned = len(pairs) > 1 or await admin.topics.partition_count(tn) > 0
    chosen = [(topic, sub, _ids_for(topic, ids) if partitioned else ids)
              for topic, sub in pairs]
    for topic, _, mine in chosen:
        for ref in mine:  # checked before anything is skipped: all or nothing
            if not AdminEntries.exists(topic, Position(*ref.position)):
                raise E.precondition_failed(
                    f"Invalid mark deleted position: message {ref.ledger_id}:{ref.entry_id} "
                    f"does not exist on {topic.name}")
            try:
                topic.check_not_in_open_transaction(Position(*ref.position), "skip")
            except NotAllowedError as exc:
                raise E.precondition_failed(exc.message) from None
    for _, sub, mine in chosen:
        if mine:
            await sub.resets.skip_by_message_ids(_to_service_ids(mine))
    return no_content()


def _ids_for(topic: Topic, ids: list[bodies.MessageIdRef]) -> list[bodies.MessageIdRef]:
    """The ids that belong to one partition: by the id's partition when it names one, else by
    ledger ownership (ledger ids are unique across the broker)."""
    index = topic.partition_index
    ledgers = AdminEntries.ledger_ids(topic)
    out = []
    for ref in ids:
        if ref.partition >= 0:
            if ref.partition == index:
                out.append(ref)
        elif ref.ledger_id in ledgers:
            out.append(ref)
    return out


def _to_service_ids(ids: list[bodies.MessageIdRef]) -> list[tuple[int, ...]]:
    """CursorResets.skip_by_message_ids takes (ledger_id, entry_id) tuples, with a third
    element, the batch index, when a single message of a batch is meant."""
    return [ref.position if ref.batch_index is None
            else (ref.ledger_id, ref.entry_id, ref.batch_index) for ref in ids]


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(BASE, list_topics)
    r.add_get(BASE + "/partitioned", list_partitioned)
    r.add_put(TOPIC, create_topic)
    r.add_delete(TOPIC, delete_topic)
    r.add_put(TOPIC + "/partitions", create_partitioned)
    r.add_get(TOPIC + "/partitions", get_partitions)
    r.add_delete(TOPIC + "/partitions", delete_partitioned)
    r.add_get(TOPIC + "/stats", topic_stats)
    r.add_get(TOPIC + "/partitioned-stats", partitioned_stats)
    r.add_get(TOPIC + "/internalStats", internal_stats)
    r.add_get(TOPIC + "/partitioned-internalStats", internal_stats)
    r.add_get(TOPIC + "/subscriptions", list_subscriptions)
    r.add_put(SUB, create_subscription)
    r.add_delete(SUB, delete_subscription)
    r.add_get(SUB + "/properties", get_subscription_properties)
    r.add_put(SUB + "/properties", update_subscription_properties)
    r.add_post(SUB + "/skip/{n}", skip)
    r.add_post(SUB + "/skip_all", skip_all)
    r.add_post(SUB + "/resetcursor/{timestamp}", reset_cursor_time)
    r.add_post(SUB + "/resetcursor", reset_cursor_position)
    r.add_post(SUB + "/skipByMessageIds", skip_by_message_ids)
