"""Admin REST for non-persistent topics (``/admin/v2/non-persistent/...``) and the namespace's
topic list with its ``mode`` filter.

Theory of operation
-------------------
Pulsar's NonPersistentTopics resource: list, create, delete, partitioned create/list/delete,
stats (NonPersistentTopicStats with ``msgDropRate``), partitioned-stats, subscriptions. The
topics themselves are :class:`broker.topics.nonpersistent.NonPersistentTopic`, kept in memory
by the service (``service.nonpersistent``); partitioned metadata is shared with persistent
topics (the service's ``topic`` records, keyed by full name). ``GET /admin/v2/namespaces/{t}/{ns}
/topics?mode=PERSISTENT|NON_PERSISTENT|ALL`` (default PERSISTENT, as Pulsar) lists both domains.
Errors are Pulsar's texts through :mod:`broker.admin.errors`.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.facade import AdminFacade, partition_name, topic_full_name
from broker.admin.responses import facade_of, json_response, no_content
from broker.topics.names import TopicName
from broker.topics.nonpersistent import NonPersistentTopic

__all__ = ["add_routes"]

BASE = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"
DOMAIN = "non-persistent"
_MODES = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": (DOMAIN,),
          "ALL": ("persistent", DOMAIN)}


async def _named(request: web.Request) -> tuple[AdminFacade, str]:
    facade = facade_of(request)
    m = request.match_info
    await facade.require_namespace(m["tenant"], m["namespace"])
    return facade, topic_full_name(m["tenant"], m["namespace"], m["topic"], DOMAIN)


def _loaded(facade: AdminFacade, full: str) -> NonPersistentTopic:
    topic = facade.service.nonpersistent.get(TopicName.parse(full))
    if topic is None:
        raise E.not_found(E.TOPIC_NOT_FOUND)
    return topic


async def _all_topics(facade: AdminFacade, namespace: str) -> list[str]:
    """Topics of *namespace* in both domains, partitioned ones as their partitions."""
    service = facade.service
    names = set(await service.list_topics(namespace))
    for parent in await service.list_partitioned_topics(namespace):
        names.discard(parent)
        names.update(partition_name(parent, i)
                     for i in range(await service.get_partition_count(parent)))
    return sorted(names)


async def list_topics(request: web.Request) -> web.Response:
    facade = facade_of(request)
    m = request.match_info
    await facade.require_namespace(m["tenant"], m["namespace"])
    names = await _all_topics(facade, f"{m['tenant']}/{m['namespace']}")
    return json_response([n for n in names if n.startswith(DOMAIN + "://")])


async def list_partitioned(request: web.Request) -> web.Response:
    facade = facade_of(request)
    m = request.match_info
    await facade.require_namespace(m["tenant"], m["namespace"])
    names = await facade.service.list_partitioned_topics(f"{m['tenant']}/{m['namespace']}")
    return json_response([n for n in names if n.startswith(DOMAIN + "://")])


async def namespace_topics(request: web.Request) -> web.Response:
    """``GET /admin/v2/namespaces/{t}/{ns}/topics?mode=...`` (Pulsar's getTopics)."""
    facade = facade_of(request)
    m = request.match_info
    await facade.require_namespace(m["tenant"], m["namespace"])
    mode = request.query.get("mode", "PERSISTENT").upper()
    domains = _MODES.get(mode)
    if domains is None:
        raise E.bad_request(f"Invalid mode {mode!r}: PERSISTENT, NON_PERSISTENT or ALL")
    names = await _all_topics(facade, f"{m['tenant']}/{m['namespace']}")
    return json_response([n for n in names if n.split("://", 1)[0] in domains])


async def create_topic(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    tn = TopicName.parse(full)
    if await facade.service.get_partition_count(full) > 0 or \
            facade.service.nonpersistent.get(tn) is not None:
        raise E.conflict(E.TOPIC_EXISTS)
    facade.service.get_nonpersistent_topic(tn, create=True)
    return no_content()


async def delete_topic(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    if await facade.service.get_partition_count(full) > 0:
        raise E.conflict("Topic is a partitioned topic: delete it with DELETE .../partitions")
    _loaded(facade, full)
    await facade.service.delete_topic(full, force=force)
    return no_content()


async def create_partitioned(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    partitions = bodies.parse_partitions(bodies.load_json(await request.read()))
    if partitions <= 0:
        raise E.RestError(406, E.PARTITIONS_NOT_POSITIVE)
    if await facade.service.get_partition_count(full) > 0:
        raise E.conflict(E.PARTITIONED_TOPIC_EXISTS)
    if facade.service.nonpersistent.get(TopicName.parse(full)) is not None:
        raise E.conflict(E.TOPIC_EXISTS)
    await facade.service.create_partitioned_topic(full, partitions)
    return no_content()


async def get_partitions(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    return json_response({"partitions": await facade.service.get_partition_count(full),
                          "deleted": False})


async def delete_partitioned(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    if await facade.service.get_partition_count(full) == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    await facade.service.delete_topic(full, force=force)
    return no_content()


async def stats(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    return json_response(_loaded(facade, full).stats())


async def partitioned_stats(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    n = await facade.service.get_partition_count(full)
    if n == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    parts = {}
    for i in range(n):
        topic = facade.service.nonpersistent.get(TopicName.parse(partition_name(full, i)))
        if topic is not None:
            parts[topic.full] = topic.stats()
    total: dict[str, object] = {
        key: sum(float(s[key]) for s in parts.values())
        for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut",
                    "msgDropRate")}
    for key in ("msgInCounter", "bytesInCounter", "msgOutCounter", "bytesOutCounter"):
        total[key] = sum(int(s[key]) for s in parts.values())
    total["metadata"] = {"partitions": n, "deleted": False}
    per_partition = request.query.get("perPartition", "true").lower() in ("1", "true", "yes")
    total["partitions"] = parts if per_partition else {}
    return json_response(total)


async def list_subscriptions(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    return json_response(sorted(_loaded(facade, full).subscriptions))


async def delete_subscription(request: web.Request) -> web.Response:
    facade, full = await _named(request)
    topic = _loaded(facade, full)
    name = request.match_info["sub"]
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise E.not_found("Subscription not found")
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    if sub.consumers and not force:
        raise E.precondition_failed("Subscription has active connected consumers")
    topic.delete_subscription(name, force=True)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/admin/v2/namespaces/{tenant}/{namespace}/topics", namespace_topics)
    r.add_get(BASE, list_topics)
    r.add_get(BASE + "/partitioned", list_partitioned)
    r.add_put(TOPIC, create_topic)
    r.add_delete(TOPIC, delete_topic)
    r.add_put(TOPIC + "/partitions", create_partitioned)
    r.add_get(TOPIC + "/partitions", get_partitions)
    r.add_delete(TOPIC + "/partitions", delete_partitioned)
    r.add_get(TOPIC + "/stats", stats)
    r.add_get(TOPIC + "/partitioned-stats", partitioned_stats)
    r.add_get(TOPIC + "/subscriptions", list_subscriptions)
    r.add_delete(TOPIC + "/subscription/{sub}", delete_subscription)
