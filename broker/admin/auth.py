"""REST authentication and authorization: one aiohttp middleware in front of every route.

Theory of operation
-------------------
:func:`auth_middleware` runs after routing (``request.match_info`` is resolved) and before the
handler:

1. Authentication (``authenticationEnabled``): the request's ``Authorization: Bearer``/``Basic``
   header, ``X-Pulsar-Auth-Method-Name`` or verified client certificate (HTTPS listener) gives
   the role (:meth:`AuthenticationService.authenticate_http_async`, bcrypt off the loop).
   Refused: 401 with one ``WWW-Authenticate`` header per offered scheme and
   ``{"reason": ...}``. ``/status.html`` is never authenticated, ``/metrics`` is exempt
   unless ``authenticateMetricsEndpoint``, as in
   Pulsar; ``/ws/...`` (the WebSocket API) authenticates in its own handlers. The role is kept on the request (:func:`request_role`).
2. Authorization (``authorizationEnabled``), by path, Pulsar's rules:

   ============================================================  ===============================
   path                                                           needs
   ============================================================  ===============================
   ``/lookup/v2/topic/{domain}/{t}/{ns}/{topic}``                 lookup (produce or consume)
   ``GET /admin/v2/{persistent|non-persistent}/.../partitions``   lookup (clients read metadata)
   ``GET .../{topic}/stats`` (and internal, partitioned)          lookup (produce or consume)
   subscription operations on a topic (peek, skip, expire,        consume (and the subscription's
   reset cursor, create/delete/list subscriptions, backlog         roles, if it has some), or
   size, message by id/time, last message id, analyze backlog)    tenant admin; refused 401
   ``GET /admin/v2/{persistent|...}/{t}/{ns}[/partitioned]``,     produce or consume on the
   ``GET .../namespaces/{t}/{ns}/topics``                          namespace, or tenant admin
   ``POST .../namespaces/{t}/{ns}[/{b}]/unsubscribe/{s}``,        consume on the namespace, or
   ``.../clearBacklog[/{s}]``                                      tenant admin
   ``PUT .../namespaces/{t}/{ns}[/{b}]/unload``,                  super-user
   ``.../namespaces/{t}/{ns}/persistence/bookieAffinity``
   other ``/admin/v2/{persistent|non-persistent}/{t}/...``        tenant admin of ``t``
   ``/admin/v2/namespaces/{t}/...``                              tenant admin of ``t``
   ``GET /admin/v2/tenants/{t}``                                  tenant admin of ``t``
   other ``/admin/v2/tenants...``, ``/admin/v2/brokers/...``,     super-user
   changes under ``/admin/v2/clusters``
   ``GET /admin/v2/clusters...``, ``/admin/v2/brokers/version``   any authenticated role
   ``GET /admin/v3/transactions/...`` (transaction stats)         any authenticated role (Pulsar's
                                                                  Transactions resource checks none)
   ``/admin/v2/schemas/{t}/{ns}/{topic}/...``: GET, POST          lookup; produce to register
   ``compatibility`` and ``version``; POST ``schema``; DELETE    (POST ``schema``); tenant admin
                                                                  of ``t`` to delete
   ============================================================  ===============================

   Refused: 403 ``{"reason": ...}`` with Pulsar's text; a refused topic lookup (the first two
   rows) or topic operation 401, as Pulsar answers its topic operations
   (:mod:`broker.admin.topic_operations` names them, as Pulsar's ``TopicOperation``); a
   tenant-admin check (namespace and topic routes) on a tenant that does not exist 404 "Tenant
   does not exist", as Pulsar looks the tenant up before it refuses.

The services are handed in by :func:`broker.admin.app.create_app`; with both disabled the
middleware only records the anonymous role.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.admin.brokers import STATUS_PAGE
from broker.admin.errors import TENANT_NOT_FOUND, json_error
from broker.admin.topic_operations import Operation, namespace_operation, topic_operation
from broker.security.authentication import (
    AUTH_METHOD_HEADER,
    AuthenticatedRole,
    AuthenticationService,
)
from broker.security.authorization import AuthAction, AuthorizationService
from broker.security.errors import AuthenticationError, AuthorizationError

log = logging.getLogger("horae.admin.auth")

__all__ = ["RestSecurity", "auth_middleware", "request_role"]

_ROLE_KEY = web.RequestKey("horae_role", AuthenticatedRole)
#: Paths whose handlers authenticate and authorize themselves (:mod:`broker.websocket.routes`:
#: the ``token`` query parameter, Pulsar's 401/403 texts before the upgrade).
SELF_AUTHENTICATED_PREFIX = "/ws/"
_TOPIC_DOMAINS = frozenset({"persistent", "non-persistent"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RestSecurity:
    """The authentication and authorization services the REST middleware uses."""

    def __init__(self, authentication: AuthenticationService, authorization: AuthorizationService,
                 *, authenticate_metrics: bool = False) -> None:
        self.authentication = authentication
        self.authorization = authorization
        self.authenticate_metrics = authenticate_metrics


SECURITY_KEY = web.AppKey("horae_security", RestSecurity)


def request_role(request: web.Request) -> str:
    """The authenticated role of *request* ("" when authentication is off and no anonymous role)."""
    role = request.get(_ROLE_KEY)
    return role.role if role is not None else ""


def _peer_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert(binary_form=True)
    return bytes(cert) if cert else None


def _unauthorized(security: RestSecurity, reason: str) -> web.Response:
    response = json_error(401, reason)
    for value in security.authentication.www_authenticate():
        response.headers.add("WWW-Authenticate", value)
    return response


def _topic_of(parts: list[str], start: int) -> str | None:
    """``domain://t/ns/topic`` from path parts ``[..., domain, t, ns, topic, ...]`` at *start*."""
    if len(parts) < start + 4 or parts[start] not in _TOPIC_DOMAINS:
        return None
    domain, tenant, namespace, topic = parts[start:start + 4]
    return f"{domain}://{tenant}/{namespace}/{topic}"


class TopicLookupRefused(AuthorizationError):
    """A refused lookup of a topic (``/lookup/v2``, partitioned metadata): Pulsar answers these
    topic operations 401, not 403 (``validateTopicOperation``); clients report that status."""


def _require_lookup(authz: AuthorizationService, topic: str, role: str, *,
                    partitioned_metadata: bool = False) -> None:
    try:
        authz.require_lookup(topic, role, partitioned_metadata=partitioned_metadata)
    except AuthorizationError as exc:
        raise TopicLookupRefused(str(exc)) from None


class TenantMissing(AuthorizationError):
    """A tenant-admin check on a tenant that does not exist: Pulsar's
    ``validateAdminAccessForTenant`` answers 404 "Tenant does not exist" before any role check."""


def _require_tenant_admin(authz: AuthorizationService, tenant: str, role: str) -> None:
    if not authz.is_tenant_admin(tenant, role) and not authz.tenant_exists(tenant):
        raise TenantMissing(TENANT_NOT_FOUND)
    authz.require_tenant_admin(tenant, role)


def _require_topic_operation(authz: AuthorizationService, topic: str, role: str,
                             op: Operation) -> None:
    allowed = (authz.can_lookup(topic, role) if op.needs == "lookup"
               else authz.can_consume(topic, role, op.subscription))
    if not allowed:
        raise TopicLookupRefused(f"Unauthorized to validateTopicOperation for operation "
                                 f"[{op.name}] on topic [{topic}]")


def _require_namespace_operation(authz: AuthorizationService, tenant: str, namespace: str,
                                 role: str, op: Operation) -> None:
    if authz.is_tenant_admin(tenant, role):
        return
    full = f"{tenant}/{namespace}"
    actions = (AuthAction.CONSUME,) if op.needs == "consume" else (AuthAction.PRODUCE,
                                                                   AuthAction.CONSUME)
    if not any(authz.has_namespace_permission(full, role, action) for action in actions):
        raise AuthorizationError(f"Unauthorized to validateNamespaceOperation for operation "
                                 f"[{op.name}] on namespace [{full}]")


def check_access(authz: AuthorizationService, role: str, method: str, path: str) -> None:
    """Raise :class:`AuthorizationError` unless *role* may do *method* on *path* (see the table)."""
    if not authz.enabled or authz.is_super_user(role):
        return
    parts = [p for p in path.split("/") if p]
    if parts[:3] == ["lookup", "v2", "topic"]:
        topic = _topic_of(parts, 3)
        if topic is not None:
            _require_lookup(authz, topic, role)
            return
    if parts[:3] == ["admin", "v3", "transactions"] and method == "GET":
        return
    if parts[:2] != ["admin", "v2"] or len(parts) < 3:
        authz.require_super_user(role)
        return
    area = parts[2]
    if area in _TOPIC_DOMAINS:
        topic = _topic_of(parts, 2)
        if topic is not None and method == "GET" and parts[6:] == ["partitions"]:
            _require_lookup(authz, topic, role, partitioned_metadata=True)
            return
        if method == "GET" and (len(parts) == 5 or parts[5:] == ["partitioned"]):
            _require_namespace_operation(authz, parts[3], parts[4], role,
                                         Operation("GET_TOPICS", "lookup"))
            return
        op = topic_operation(method, parts[6:]) if topic is not None else None
        if topic is not None and op is not None:
            if not authz.tenant_exists(parts[3]):
                # Pulsar's allowTopicOperation asks isSuperUserOrAdmin first, which answers
                # 404 for a tenant that does not exist
                raise TenantMissing(TENANT_NOT_FOUND)
            _require_topic_operation(authz, topic, role, op)
            return
        if len(parts) >= 4:
            _require_tenant_admin(authz, parts[3], role)
            return
    elif area == "namespaces" and ((method == "PUT" and len(parts) in (6, 7)
                                    and parts[-1] == "unload")
                                   or parts[5:] == ["persistence", "bookieAffinity"]):
        # Pulsar's namespace (and bundle) unload and bookie affinity group: super-users
        authz.require_super_user(role)
        return
    elif area == "namespaces" and len(parts) >= 5 and \
            (op := namespace_operation(method, parts[5:])) is not None:
        _require_namespace_operation(authz, parts[3], parts[4], role, op)
        return
    elif (area == "namespaces" and len(parts) >= 4) or (area == "tenants" and len(parts) == 4 and method == "GET"):
        _require_tenant_admin(authz, parts[3], role)
        return
    elif (area == "clusters" and method == "GET") or parts[2:] == ["brokers", "version"]:
        return
    elif area == "schemas" and len(parts) >= 7:
        # Pulsar's SchemasResource: reads (and a compatibility or version check) need lookup,
        # registering needs produce, deleting a tenant admin; a tenant admin may do all three.
        topic = f"persistent://{parts[3]}/{parts[4]}/{parts[5]}"
        if method == "DELETE":
            authz.require_tenant_admin(parts[3], role)
        elif method == "POST" and parts[6] == "schema":
            authz.require_produce(topic, role)
        else:
            authz.require_lookup(topic, role)
        return
    authz.require_super_user(role)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    security = request.app[SECURITY_KEY]
    authn = security.authentication
    path = request.path.rstrip("/")
    if path == STATUS_PAGE or (path == "/metrics" and not security.authenticate_metrics):
        return await handler(request)
    if path.startswith(SELF_AUTHENTICATED_PREFIX):
        return await handler(request)  # the WebSocket API authenticates as Pulsar's does
    try:
        role = await authn.authenticate_http_async(request.headers, _peer_certificate(request))
    except AuthenticationError as exc:
        line = authn.refusal_line(exc, request.headers.get(AUTH_METHOD_HEADER))
        if line is not None:
            log.warning("authentication of %s (%s %s) %s", request.remote, request.method,
                        request.path[:200], line)
        return _unauthorized(security, exc.detail)
    request[_ROLE_KEY] = role
    try:
        check_access(security.authorization, role.role, request.method, request.path)
    except TopicLookupRefused as exc:
        return json_error(401, str(exc))
    except TenantMissing as exc:
        return json_error(404, str(exc))
    except AuthorizationError as exc:
        return json_error(403, str(exc))
    return await handler(request)
