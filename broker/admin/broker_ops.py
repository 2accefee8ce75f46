"""Small maintenance routes: a topic's policies deleted at once, the broker's owned namespaces,
a backlog-quota check on demand.

Theory of operation: Pulsar's paths and answers (v2 ``PersistentTopics``, ``BrokersBase``):

- ``DELETE /admin/v2/persistent/{t}/{ns}/{topic}/policies``: every topic-level policy of the
  topic goes (its record keeps only what is not a policy in Pulsar: the topic's properties
  and its creation time); the loaded topic falls back to its namespace's and the broker's
  values at once. 204; 404 ``Namespace does not exist``.
- ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``: a map of bundle name
  (``tenant/ns/0x00000000_0xffffffff``, one bundle per namespace) to its
  NamespaceOwnershipStatus (``broker_assignment`` shared, ``is_controlled`` false,
  ``is_active`` true); on one node every namespace is owned here. 404 ``Broker id 'b' not
  found in available brokers.`` for another broker, 404 for another cluster.
- ``GET /admin/v2/brokers/backlog-quota-check``: runs the backlog-quota check of every loaded
  topic now (what the ``backlogQuotaCheckIntervalInSeconds`` timer does), then answers 204.
- ``POST /admin/v2/brokers/shutdown``: this broker's graceful shutdown (:func:`shutdown_broker`).
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import errors as E
from broker.admin.properties_routes import PROPERTIES
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import topic_name
from broker.admin.topic_times import CREATED
from broker.shutdown_request import ShutdownRequest

__all__ = ["add_routes"]

#: Fields of a topic's record that are not TopicPolicies in Pulsar
_NOT_POLICIES = frozenset({PROPERTIES, CREATED})
FULL_RANGE = "0x00000000_0xffffffff"


async def delete_topic_policies(request: web.Request) -> web.Response:
    admin = admin_of(request)
    m = request.match_info
    # as Pulsar's: no namespace check (204 for a missing one, whose topics keep no record)
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    await admin.policy_store.records.keep_topic_fields(tn.full, _NOT_POLICIES)
    return no_content()


def _this_broker(broker_id: str, ours: str, web_url: str) -> bool:
    return broker_id in (ours, web_url) or f"http://{broker_id}" == web_url


async def owned_namespaces(request: web.Request) -> web.Response:
    admin = admin_of(request)
    broker = admin.broker
    wanted = request.match_info["broker"]
    if not _this_broker(wanted, broker.broker_id(), broker.web_url()):
        raise E.not_found(f"Broker id '{wanted}' not found in available brokers.")
    # the {cluster} of the path is not checked, as in Pulsar (any name answers this broker's)
    owned = {}
    for tenant in await admin.tenants.tenants():
        for ns in await admin.tenants.namespaces(tenant):
            owned[f"{ns}/{FULL_RANGE}"] = {"broker_assignment": "shared",
                                           "is_controlled": False, "is_active": True}
    return json_response(owned)


async def backlog_quota_check(request: web.Request) -> web.Response:
    admin = admin_of(request)
    for tenant in await admin.tenants.tenants():
        for ns in await admin.tenants.namespaces(tenant):
            for topic in admin.topics.loaded_of_namespace(tenant, ns.split("/", 1)[1]):
                if topic.backlog.task is None:      # else the timer's check is running now
                    await topic.backlog.check_quotas()
    return no_content()


SHUTDOWN_KEY = web.AppKey("horae_shutdown", ShutdownRequest)


def _query_int(request: web.Request, name: str) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise E.bad_request(f"Invalid {name}: expected an integer, got {raw!r}") from None


async def shutdown_broker(request: web.Request) -> web.StreamResponse:
    """``POST /admin/v2/brokers/shutdown?maxConcurrentUnloadPerSec=&forcedTerminateTopic=``:
    Pulsar's graceful shutdown of this broker (super-user). 204 is written before the
    shutdown starts; then the topics are unloaded (in-flight publishes answered, clients
    told), cursors and snapshots flushed and the store closed, and ``horae serve`` exits 0.
    One node has no other broker to take its bundles, so the unload rate has nothing to pace
    and every topic closes at once; ``forcedTerminateTopic`` (default true, as Pulsar's) is
    accepted: clients are always told the topic closed."""
    max_rate = _query_int(request, "maxConcurrentUnloadPerSec")
    forced = request.query.get("forcedTerminateTopic", "true").lower() == "true"
    shutdown = request.app.get(SHUTDOWN_KEY)
    if shutdown is None:
        raise E.RestError(503, "This broker cannot be shut down over REST")
    response = web.Response(status=204)
    await response.prepare(request)
    await response.write_eof()
    shutdown.request(max_rate, forced)
    return response


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_delete("/admin/v2/persistent/{tenant}/{namespace}/{topic}/policies",
                 delete_topic_policies)
    r.add_get("/admin/v2/brokers/backlog-quota-check", backlog_quota_check)
    r.add_post("/admin/v2/brokers/shutdown", shutdown_broker)
    r.add_get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces)
