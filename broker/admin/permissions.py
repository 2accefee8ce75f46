"""Grants, tenant updates and cluster records: the REST routes authorization is configured with.

Theory of operation
-------------------
Pulsar's paths and bodies:

* ``GET /admin/v2/namespaces/{t}/{ns}/permissions`` -> ``{role: [actions]}``;
  ``POST .../permissions/{role}`` with a JSON list of actions (``["produce", "consume"]``)
  *replaces* the role's grant; ``DELETE .../permissions/{role}`` revokes it.
* ``GET /admin/v2/persistent/{t}/{ns}/{topic}/permissions`` -> the namespace grants merged with
  the topic's own; ``POST|DELETE .../permissions/{role}`` grant/revoke on the topic (a
  partitioned topic's grant covers its partitions).
* ``GET .../namespaces/{t}/{ns}/permissions/subscription`` -> ``{subscription: [roles]}``;
  ``POST .../permissions/subscription/{sub}`` with a JSON list of roles *replaces* the roles
  that may use that subscription; ``DELETE .../permissions/{sub}/{role}`` takes one role off
  (the last one lifts the restriction), as Pulsar's subscription permissions.
* ``POST /admin/v2/tenants/{t}`` updates a tenant's info (``adminRoles``, ``allowedClusters``).
* ``GET|PUT|POST /admin/v2/clusters/{cluster}``: the cluster record (``serviceUrl``,
  ``serviceUrlTls``, ``brokerServiceUrl``, ``brokerServiceUrlTls``); before any is stored the
  broker's own URLs are answered. Only this node's cluster exists.

Grants are kept in the namespace record's ``auth_policies`` (Pulsar's JSON shape) through the
admin service (:meth:`broker.admin.service.AdminTenants.set_auth_policies`); a bad action is 412
with a reason naming it. Who may call these is the middleware's business
(:mod:`broker.admin.auth`: tenant admin for grants, super-user for tenants and clusters).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespaces import NAMESPACE, TENANT, check_tenant_info, require_known_clusters
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import AdminService, topic_name
from broker.admin.topics import TOPIC
from broker.security.authorization import AuthAction, AuthPolicies
from broker.topics.names import TopicName

__all__ = ["add_routes", "parse_actions"]

CLUSTER = "/admin/v2/clusters/{cluster}"


def parse_actions(body: object) -> frozenset[AuthAction]:
    """A JSON list of Pulsar AuthAction names (400 for another JSON type, as Pulsar's binding
    answers); 412 naming an unknown action."""
    if not isinstance(body, list):
        raise E.bad_request("Permissions must be a JSON list of actions")
    out = set()
    for value in body:
        try:
            out.add(AuthAction(str(value)))
        except ValueError:
            raise E.precondition_failed(
                f"Unknown action {value!r}; use one of {[a.value for a in AuthAction]}") from None
    return frozenset(out)


async def _ns_auth(request: web.Request) -> tuple[AdminService, str, AuthPolicies]:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await admin.tenants.require_namespace(tenant, ns)
    key = f"{tenant}/{ns}"
    return admin, key, admin.tenants.auth_policies(key)


async def get_ns_permissions(request: web.Request) -> web.Response:
    _, _, auth = await _ns_auth(request)
    return json_response(auth.to_json()["namespace_auth"])


async def grant_ns_permission(request: web.Request) -> web.Response:
    actions = parse_actions(bodies.load_json(await request.read()))
    admin, key, auth = await _ns_auth(request)
    await admin.tenants.set_auth_policies(
        key, auth.grant_namespace(request.match_info["role"], actions))
    return no_content()


async def revoke_ns_permission(request: web.Request) -> web.Response:
    admin, key, auth = await _ns_auth(request)
    await admin.tenants.set_auth_policies(key, auth.revoke_namespace(request.match_info["role"]))
    return no_content()


async def get_subscription_permissions(request: web.Request) -> web.Response:
    _, _, auth = await _ns_auth(request)
    return json_response(auth.to_json()["subscription_auth_roles"])


async def grant_subscription_permission(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    if not isinstance(body, list) or not all(isinstance(r, str) for r in body):
        raise E.bad_request("Roles must be a JSON list of role names")
    admin, key, auth = await _ns_auth(request)
    await admin.tenants.set_auth_policies(
        key, auth.with_subscription_roles(request.match_info["subscription"], body))
    return no_content()


async def revoke_subscription_permission(request: web.Request) -> web.Response:
    admin, key, auth = await _ns_auth(request)
    m = request.match_info
    roles = auth.subscription_auth_roles.get(m["subscription"], frozenset())
    await admin.tenants.set_auth_policies(
        key, auth.with_subscription_roles(m["subscription"], roles - {m["role"]}))
    return no_content()


async def _topic_auth(request: web.Request) -> tuple[AdminService, str, TopicName, AuthPolicies]:
    admin, key, auth = await _ns_auth(request)
    m = request.match_info
    return admin, key, topic_name(m["tenant"], m["namespace"], m["topic"]), auth


async def get_topic_permissions(request: web.Request) -> web.Response:
    _, _, tn, auth = await _topic_auth(request)
    merged: dict[str, set[str]] = {r: set(a) for r, a in auth.namespace_auth.items()}
    for role, actions in auth.destination_auth.get(tn.full, {}).items():
        merged.setdefault(role, set()).update(actions)
    return json_response({r: sorted(a) for r, a in sorted(merged.items())})


async def grant_topic_permission(request: web.Request) -> web.Response:
    actions = parse_actions(bodies.load_json(await request.read()))
    admin, key, tn, auth = await _topic_auth(request)
    await admin.tenants.set_auth_policies(
        key, auth.grant_topic(tn.full, request.match_info["role"], actions))
    return no_content()


async def revoke_topic_permission(request: web.Request) -> web.Response:
    admin, key, tn, auth = await _topic_auth(request)
    role = request.match_info["role"]
    if role not in auth.destination_auth.get(tn.full, {}):
        raise E.precondition_failed(f"Permissions are not set at the topic level for {role}")
    await admin.tenants.set_auth_policies(key, auth.revoke_topic(tn.full, role))
    return no_content()


async def update_tenant(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant = request.match_info["tenant"]
    body = bodies.load_json(await request.read())
    if not isinstance(body, dict):
        raise E.bad_request("Invalid tenant info: expected a JSON object")
    check_tenant_info(body)
    await admin.tenants.require_tenant(tenant)
    require_known_clusters(admin, body)
    current = await admin.tenants.tenant_info(tenant) or {}
    await admin.tenants.update_tenant(tenant, {**current, **body})
    return no_content()


def _own_cluster(admin: AdminService, name: str) -> None:
    if name != admin.broker.cluster_name:
        raise E.not_found("Cluster does not exist")


async def get_cluster(request: web.Request) -> web.Response:
    admin = admin_of(request)
    name = request.match_info["cluster"]
    _own_cluster(admin, name)
    return json_response(await admin.tenants.cluster_record(name))


async def set_cluster(request: web.Request) -> web.Response:
    admin = admin_of(request)
    name = request.match_info["cluster"]
    _own_cluster(admin, name)
    body = bodies.load_json(await request.read())
    if not isinstance(body, dict):
        raise E.bad_request("Invalid cluster data: expected a JSON object")
    data: dict[str, Any] = {k: v for k, v in body.items() if isinstance(v, str | bool | int)}
    await admin.tenants.set_cluster_record(name, data)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(NAMESPACE + "/permissions", get_ns_permissions)
    r.add_get(NAMESPACE + "/permissions/subscription", get_subscription_permissions)
    r.add_post(NAMESPACE + "/permissions/subscription/{subscription}",
               grant_subscription_permission)
    r.add_delete(NAMESPACE + "/permissions/{subscription}/{role}",
                 revoke_subscription_permission)
    r.add_post(NAMESPACE + "/permissions/{role}", grant_ns_permission)
    r.add_delete(NAMESPACE + "/permissions/{role}", revoke_ns_permission)
    r.add_get(TOPIC + "/permissions", get_topic_permissions)
    r.add_post(TOPIC + "/permissions/{role}", grant_topic_permission)
    r.add_delete(TOPIC + "/permissions/{role}", revoke_topic_permission)
    r.add_post(TENANT, update_tenant)
    r.add_get(CLUSTER, get_cluster)
    r.add_put(CLUSTER, set_cluster)
    r.add_post(CLUSTER, set_cluster)
