"""Pulsar's ``/admin/v2/brokers`` routes for a one-broker cluster.

Theory of operation
-------------------
* ``GET /admin/v2/brokers/health?topicVersion=V1|V2``: the health check
  (:mod:`broker.admin.healthcheck`): storage state plus a produce/consume round trip on the
  heartbeat topic; "ok" or 500 with the reason; 400 for a topicVersion that is neither.
* ``GET /admin/v2/brokers/ready``: "ok" while the broker serves, 503 once it is closing.
* ``GET /status.html``: Pulsar's liveness page, "OK" while the broker serves, 404 once it is
  closing (Pulsar answers 404 when its status file is gone). Never authenticated, as in Pulsar,
  so container and Kubernetes probes need no credentials.
* ``GET /admin/v2/brokers/{cluster}``: the active brokers of the cluster as Pulsar lists them,
  broker ids ``<advertisedAddress>:<webServicePort>``; this node is the only one. Another
  cluster name is 404 "Cluster does not exist: cluster=<name>" (Horae knows only its own).
* ``GET /admin/v2/brokers``: the same list for this broker's own cluster.
* ``GET /admin/v2/brokers/leaderBroker``: Pulsar's BrokerInfo of the leader, this broker.

All but ``/status.html`` are super-user operations (:mod:`broker.admin.auth`). The fixed paths are registered before
``{cluster}`` so "health", "ready" and "leaderBroker" are never read as cluster names.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import errors as E
from broker.admin.healthcheck import HealthCheckError, credentials_of
from broker.admin.responses import admin_of, json_response
from broker.topics.heartbeat import TopicVersion

__all__ = ["STATUS_PAGE", "add_routes"]

#: Pulsar's unauthenticated liveness page (its Helm chart probes it).
STATUS_PAGE = "/status.html"


async def health(request: web.Request) -> web.Response:
    raw_version = request.query.get("topicVersion")
    try:
        version = TopicVersion(raw_version) if raw_version else TopicVersion.V1
    except ValueError:
        raise E.bad_request(f"Invalid topicVersion {raw_version!r}: V1 or V2") from None
    try:
        await admin_of(request).broker.health_check(version, credentials_of(request.headers))
    except HealthCheckError as exc:
        raise E.RestError(500, str(exc)) from None
    return web.Response(text="ok", content_type="text/plain")


async def ready(request: web.Request) -> web.Response:
    if admin_of(request).broker.closing:
        raise E.RestError(503, "Broker is shutting down")
    return web.Response(text="ok", content_type="text/plain")


async def status_page(request: web.Request) -> web.Response:
    if admin_of(request).broker.closing:
        raise E.not_found("Broker is shutting down")
    return web.Response(text="OK", content_type="text/plain")


async def active_brokers(request: web.Request) -> web.Response:
    broker = admin_of(request).broker
    cluster = request.match_info["cluster"]
    if cluster != broker.cluster_name:
        raise E.not_found(f"Cluster does not exist: cluster={cluster}")
    return json_response([broker.broker_id()])


async def list_brokers(request: web.Request) -> web.Response:
    """``GET /admin/v2/brokers``: the active brokers of this broker's cluster."""
    return json_response([admin_of(request).broker.broker_id()])


async def leader_broker(request: web.Request) -> web.Response:
    broker = admin_of(request).broker
    return json_response({"brokerId": broker.broker_id(), "serviceUrl": broker.web_url()})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/admin/v2/brokers", list_brokers)
    r.add_get("/admin/v2/brokers/", list_brokers)
    r.add_get("/admin/v2/brokers/health", health)
    r.add_get("/admin/v2/brokers/ready", ready)
    r.add_get(STATUS_PAGE, status_page)
    r.add_get("/admin/v2/brokers/leaderBroker", leader_broker)
    r.add_get("/admin/v2/brokers/{cluster}", active_brokers)
