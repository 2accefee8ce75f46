"""The broker's HTTP side: Pulsar's admin REST API, HTTP lookup, health and /metrics.

Theory of operation: :func:`create_app` builds an aiohttp Application over a BrokerService,
which handlers reach only through the typed :class:`broker.admin.service.AdminService`; the
core serves it on ``webServicePort`` on the broker's own event loop, so handlers await its
operations directly. Routes live in ``topics.py`` (persistent topics and
subscriptions), ``inspect_routes.py`` (a topic's inspection and maintenance),
``namespace_ops.py`` (namespace-wide unload, clear-backlog, unsubscribe),
``broker_config.py`` (dynamic, runtime and internal configuration, version), ``namespaces.py`` (clusters, tenants, namespaces, delayed-delivery
policies), ``permissions.py`` (grants, tenant updates, cluster records) and ``brokers.py``
(health check, readiness, brokers list); this module adds lookup and metrics, the error
middleware (every error body is ``{"reason": ...}``),
the authentication/authorization middleware (:mod:`broker.admin.auth`: 401/403), the server's
connection guard's middleware when given (:mod:`broker.admin.listener`), and the
event-loop lag probe, started in ``on_startup`` and stopped in ``on_cleanup``. The HTTP lookup
answers the URLs a binary LOOKUP does (:meth:`broker.admin.service.AdminBroker.lookup_answer`:
the advertised listener named by ``?listenerName=`` or the
``X-Pulsar-ListenerName`` header, the host the client reached us on). Pulsar's WebSocket API
(``/ws/v2/...``, :mod:`broker.websocket`) is served here too when ``webSocketServiceEnabled``.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from broker.admin import (
    broker_config,
    broker_ops,
    brokers,
    compaction,
    delayed_routes,
    entry_filters,
    inspect_routes,
    namespace_ops,
    namespaces,
    nonpersistent_routes,
    permissions,
    policies,
    policies_quota,
    properties_routes,
    resource_groups,
    scheduled_routes,
    schema_policies,
    schemas,
    shadow_routes,
    storage_policies,
    topic_ops,
    topics,
    transactions_routes,
)
from broker.admin import errors as E
from broker.admin.auth import SECURITY_KEY, RestSecurity, auth_middleware
from broker.admin.broker_ops import SHUTDOWN_KEY
from broker.admin.errors import error_middleware
from broker.admin.listener import WebConnectionGuard
from broker.admin.responses import admin_of, json_response
from broker.admin.service import ADMIN_KEY, AdminService
from broker.metrics import BrokerMetrics
from broker.metrics.lag import LoopLagProbe
from broker.security.authentication import AuthenticationService
from broker.security.authorization import AuthorizationService
from broker.shutdown_request import ShutdownRequest
from broker.topics.service import BrokerService
from broker.websocket import routes as websocket

#: Pulsar's HTTP lookup header naming the advertised listener (or ``?listenerName=``).
LISTENER_HEADER = "X-Pulsar-ListenerName"

METRICS_KEY = web.AppKey("horae_metrics", BrokerMetrics)


async def metrics(request: web.Request) -> web.StreamResponse:
    """Collected in slices on the loop, rendered off it and sent piece by piece (chunked): the
    body of 10,000 topics (~75 MiB) is never whole in memory, and no render of it holds the
    interpreter for long."""
    pieces = request.app[METRICS_KEY].exposition_chunks()
    try:
        piece = await anext(pieces, None)   # collected before the response starts: a 500 if not
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
        await response.prepare(request)
        while piece is not None:
            await response.write(piece)
            piece = await anext(pieces, None)
        await response.write_eof()
        return response
    finally:
        await pieces.aclose()


async def lookup(request: web.Request) -> web.Response:
    """Pulsar's HTTP lookup: this broker owns every topic."""
    admin = admin_of(request)
    m = request.match_info
    if m["domain"] not in ("persistent", "non-persistent"):
        raise E.bad_request(f"Invalid topic domain {m['domain']!r}")
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    listener = request.query.get("listenerName") or request.headers.get(LISTENER_HEADER)
    return json_response(admin.broker.lookup_answer(listener, _local_host(request)))


def _local_host(request: web.Request) -> str | None:
    """The address the client reached us on (the advertised host rule of broker.listeners)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    return str(sockname[0]) if isinstance(sockname, tuple) and sockname else None


def create_app(service: BrokerService, *, metrics_source: BrokerMetrics | None = None,
               authentication: AuthenticationService | None = None,
               authorization: AuthorizationService | None = None,
               web_guard: WebConnectionGuard | None = None,
               shutdown: ShutdownRequest | None = None) -> web.Application:
    """The admin/lookup/metrics application for ``service`` (see module docstring).

    *metrics_source*: the broker's metrics, which ``/metrics`` serves (the server's, shared
    with its snapshot exporter); by default metrics of the app's own with a loop-lag probe.
    The app runs the probe while it is started.

    *authentication*/*authorization* default to disabled ones (every request allowed).
    *web_guard*: the server's connection guard, told by its middleware (the first) when a
    request head arrived whole. *shutdown*: the server's switch for ``POST
    /admin/v2/brokers/shutdown`` (without it, that route answers 503)."""
    if authentication is None:
        authentication = AuthenticationService(
            enabled=False, anonymous_user_role=service.config.anonymous_user_role)
    if authorization is None:
        authorization = AuthorizationService(service.tenancy, enabled=False)
    middlewares = [error_middleware, auth_middleware]
    if web_guard is not None:
        middlewares.insert(0, web_guard.middleware)
    app = web.Application(middlewares=middlewares)
    app[SECURITY_KEY] = RestSecurity(
        authentication, authorization,
        authenticate_metrics=service.config.authenticate_metrics_endpoint)
    app[ADMIN_KEY] = AdminService.over(service)
    if shutdown is not None:
        app[SHUTDOWN_KEY] = shutdown
    if metrics_source is None:
        metrics_source = BrokerMetrics(service, lag_probe=LoopLagProbe(),
                                       resource_groups=service.policies.resource_groups)
    app[METRICS_KEY] = metrics_source
    probe = metrics_source.lag_probe
    if probe is not None:
        async def start_probe(app: web.Application) -> None:
            probe.start()

        async def stop_probe(app: web.Application) -> None:
            probe.stop()

        app.on_startup.append(start_probe)
        app.on_cleanup.append(stop_probe)

    namespaces.add_routes(app)
    resource_groups.add_routes(app)
    entry_filters.add_routes(app)
    topics.add_routes(app)
    policies.add_routes(app)
    policies_quota.add_routes(app)
    storage_policies.add_routes(app)
    properties_routes.add_routes(app)
    shadow_routes.add_routes(app)
    schema_policies.add_routes(app)
    schemas.add_routes(app)
    compaction.add_routes(app)
    topic_ops.add_routes(app)
    inspect_routes.add_routes(app)
    namespace_ops.add_routes(app)
    permissions.add_routes(app)
    delayed_routes.add_routes(app)
    scheduled_routes.add_routes(app)
    nonpersistent_routes.add_routes(app)
    transactions_routes.add_routes(app)
    app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup)
    broker_config.add_routes(app)   # before brokers' {cluster}
    broker_ops.add_routes(app)      # likewise
    brokers.add_routes(app)
    namespace_ops.add_bundle_delete_route(app)   # last: the DELETE no other route takes
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/", metrics)
    if service.config.web_socket_service_enabled:
        websocket.add_routes(app, websocket.WebSocketService(service, authentication,
                                                             authorization))
    return app
