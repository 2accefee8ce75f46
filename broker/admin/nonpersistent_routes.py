"""Admin REST for non-persistent topics (``/admin/v2/non-persistent/...``) and the namespace's
topic list with its ``mode`` filter.

Theory of operation
-------------------
Pulsar's NonPersistentTopics resource: list, create, delete, partitioned create/list/delete,
stats (NonPersistentTopicStats with ``msgDropRate``), partitioned-stats, subscriptions (listed,
deleted; an admin create is refused with Pulsar's 400, as only a client makes one). The
topics themselves are :class:`broker.topics.nonpersistent.NonPersistentTopic`, kept in memory
by the broker and reached through :class:`broker.admin.service.AdminTopics`; partitioned
metadata is shared with persistent topics (the service's ``topic`` records, keyed by full
name). ``GET /admin/v2/namespaces/{t}/{ns}
/topics?mode=PERSISTENT|NON_PERSISTENT|ALL`` (default PERSISTENT, as Pulsar) lists both domains.
Errors are Pulsar's texts through :mod:`broker.admin.errors`.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, no_content, topic_of
from broker.admin.service import AdminService, topic_name
from broker.topics.names import TopicName
from broker.topics.nonpersistent import NonPersistentTopic

__all__ = ["add_routes"]

BASE = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"
DOMAIN = "non-persistent"
_MODES = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": (DOMAIN,),
          "ALL": ("persistent", DOMAIN)}


def _loaded(admin: AdminService, tn: TopicName) -> NonPersistentTopic:
    topic = admin.topics.nonpersistent(tn)
    if topic is None:
        raise E.not_found(E.TOPIC_NOT_FOUND)
    return topic


async def list_topics(request: web.Request) -> web.Response:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    return json_response(await admin.topics.list_topics(m["tenant"], m["namespace"], DOMAIN))


async def list_partitioned(request: web.Request) -> web.Response:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    return json_response(await admin.topics.list_partitioned(m["tenant"], m["namespace"], DOMAIN))


async def namespace_topics(request: web.Request) -> web.Response:
    """``GET /admin/v2/namespaces/{t}/{ns}/topics?mode=...`` (Pulsar's getTopics)."""
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    mode = request.query.get("mode", "PERSISTENT").upper()
    domains = _MODES.get(mode)
    if domains is None:
        raise E.bad_request(f"Invalid mode {mode!r}: PERSISTENT, NON_PERSISTENT or ALL")
    names = await admin.topics.names(m["tenant"], m["namespace"])
    return json_response([n for n in names if n.split("://", 1)[0] in domains])


async def create_topic(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    if await admin.topics.partition_count(tn) > 0 or \
            admin.topics.nonpersistent(tn) is not None:
        raise E.conflict(E.TOPIC_EXISTS)
    admin.topics.create_nonpersistent(tn)
    return no_content()


async def delete_topic(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    if await admin.topics.partition_count(tn) > 0:
        raise E.conflict("Topic is a partitioned topic: delete it with DELETE .../partitions")
    _loaded(admin, tn)
    await admin.topics.delete(tn, force=force)
    return no_content()


async def create_partitioned(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    partitions = bodies.parse_partitions(bodies.load_json(await request.read()))
    if "-partition-" in tn.local_name:
        raise E.precondition_failed(E.PARTITIONED_NAME_WITH_SUFFIX)
    if partitions <= 0:
        raise E.RestError(406, E.PARTITIONS_NOT_POSITIVE)
    if await admin.topics.partition_count(tn) > 0:
        raise E.conflict(E.PARTITIONED_TOPIC_EXISTS)
    if admin.topics.nonpersistent(tn) is not None:
        raise E.conflict(E.TOPIC_EXISTS)
    await admin.topics.create_partitioned(tn, partitions)
    return no_content()


async def get_partitions(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    return json_response({"partitions": await admin.topics.partition_count(tn),
                          "deleted": False})


async def delete_partitioned(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    if await admin.topics.partition_count(tn) == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    await admin.topics.delete(tn, force=force)
    return no_content()


async def stats(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    return json_response(_loaded(admin, tn).stats())


async def partitioned_stats(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    n = await admin.topics.partition_count(tn)
    if n == 0:
        raise E.not_found(E.PARTITIONED_TOPIC_NOT_FOUND)
    parts = {}
    for i in range(n):
        topic = admin.topics.nonpersistent(tn.partition(i))
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
    admin, tn = await topic_of(request, DOMAIN)
    return json_response(sorted(_loaded(admin, tn).subscriptions))


async def delete_subscription(request: web.Request) -> web.Response:
    admin, tn = await topic_of(request, DOMAIN)
    topic = _loaded(admin, tn)
    name = request.match_info["sub"]
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise E.not_found("Subscription not found")
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    if sub.consumers and not force:
        raise E.precondition_failed("Subscription has active connected consumers")
    topic.subscriptions.delete_subscription(name, force=True)
    return no_content()


async def create_subscription(request: web.Request) -> web.Response:
    """Refused as Pulsar refuses it: a non-persistent subscription lives while a consumer has
    it, so only a client makes one."""
    m = request.match_info
    topic_name(m["tenant"], m["namespace"], m["topic"], DOMAIN)   # a bad name: its own 412
    raise E.bad_request("Create subscription on non-persistent topic can only be done "
                        "through client")


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
    r.add_put(TOPIC + "/subscription/{sub}", create_subscription)
