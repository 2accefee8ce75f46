"""Tenants, namespaces and delayed-delivery policies (namespace and topic level).

Theory of operation: tenants and namespaces live in the service (metadata store). Create and
delete check existence and emptiness here, first, so the status and reason are Pulsar's:
404 "Tenant does not exist" / "Namespace does not exist", 409 "Tenant already exists" /
"Namespace already exists" / "The tenant still has active namespaces" / "Cannot delete non
empty namespace". A create body (Pulsar ``Policies``) sets every policy of it Horae keeps,
each checked as its own route checks it before anything is created
(:mod:`broker.admin.namespace_create`). Delayed-delivery policies are validated by
``broker.delayed.policy.validate_policy_body`` (a wrongly typed field -> 400, another
ValueError -> 412, with its reason) and stored
through the service, which applies them to the next message. GET returns the stored policy
(``null`` when none is set) or, with ``?applied=true``, the effective one after precedence
(topic > namespace > broker config; a partition without its own policy reports its
partitioned topic's, which is what the broker enforces on it).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespace_create import policy_fields_of_create
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import AdminService, topic_name
from broker.admin.topics import TOPIC
from broker.delayed.policy import DelayPolicy
from broker.topics.names import TopicName

TENANTS = "/admin/v2/tenants"
TENANT = TENANTS + "/{tenant}"
NAMESPACES = "/admin/v2/namespaces/{tenant}"
NAMESPACE = NAMESPACES + "/{namespace}"


def _cluster(admin: AdminService) -> str:
    return admin.broker.cluster_name


# --- clusters / tenants -------------------------------------------------------------------
def check_tenant_info(info: object) -> dict[str, Any] | None:
    """A TenantInfo body's types, as Pulsar's JSON binding reads them (400): ``adminRoles`` and
    ``allowedClusters`` are arrays of strings (a bare string would make each of its letters a
    role)."""
    if info is None:
        return None
    if not isinstance(info, dict):
        raise E.bad_request("Invalid tenant info: expected a JSON object")
    for key in ("adminRoles", "allowedClusters"):
        value = info.get(key)
        if value is not None and not (isinstance(value, list)
                                      and all(isinstance(v, str) for v in value)):
            raise E.bad_request(f"Invalid tenant info: {key} must be an array of strings")
    return info


def require_known_clusters(admin: AdminService, info: dict[str, Any] | None) -> None:
    """A tenant's ``allowedClusters`` may name only this node's cluster (Pulsar: 412)."""
    allowed = (info or {}).get("allowedClusters")
    if isinstance(allowed, list) and any(name != _cluster(admin) for name in allowed):
        raise E.precondition_failed(E.CLUSTERS_NOT_FOUND)


async def list_clusters(request: web.Request) -> web.Response:
    return json_response([_cluster(admin_of(request))])


async def list_tenants(request: web.Request) -> web.Response:
    return json_response(await admin_of(request).tenants.tenants())


async def get_tenant(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant = request.match_info["tenant"]
    await admin.tenants.require_tenant(tenant)
    info = await admin.tenants.tenant_info(tenant)
    if info is None:
        info = {"adminRoles": [], "allowedClusters": [_cluster(admin)]}
    return json_response(info)


async def create_tenant(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant = request.match_info["tenant"]
    body = check_tenant_info(bodies.load_json(await request.read()))
    if await admin.tenants.tenant_exists(tenant):
        raise E.conflict(E.TENANT_EXISTS)
    require_known_clusters(admin, body)
    info = {"adminRoles": [], "allowedClusters": [_cluster(admin)], **(body or {})}
    await admin.tenants.create_tenant(tenant, info)
    return no_content()


async def update_tenant(request: web.Request) -> web.Response:
    """``POST /admin/v2/tenants/{t}``: Pulsar's updateTenant (the whole TenantInfo replaced)."""
    admin = admin_of(request)
    tenant = request.match_info["tenant"]
    body = check_tenant_info(bodies.load_json(await request.read()))
    if not await admin.tenants.tenant_exists(tenant):
        raise E.not_found(f"Tenant {tenant} not found")
    require_known_clusters(admin, body)
    info = {"adminRoles": [], "allowedClusters": [_cluster(admin)], **(body or {})}
    await admin.tenants.update_tenant(tenant, info)
    return no_content()


async def delete_tenant(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant = request.match_info["tenant"]
    await admin.tenants.require_tenant(tenant)
    if await admin.tenants.has_namespaces(tenant):
        raise E.conflict(E.TENANT_NOT_EMPTY)
    await admin.tenants.delete_tenant(tenant)
    return no_content()


# --- namespaces ---------------------------------------------------------------------------
async def list_namespaces(request: web.Request) -> web.Response:
    return json_response(await admin_of(request).tenants.namespaces(request.match_info["tenant"]))


async def create_namespace(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    body = bodies.load_json(await request.read())
    await admin.tenants.require_tenant(tenant)
    if await admin.tenants.namespace_exists(tenant, ns):
        raise E.conflict(E.NAMESPACE_EXISTS)
    policies = namespace_policies_body(body)
    fields = policy_fields_of_create(policies, _cluster(admin))
    delayed = policies.get("delayed_delivery_policies")
    delay = None if delayed is None else _validate(delayed)
    key = f"{tenant}/{ns}"
    await admin.tenants.create_namespace(key, policies)
    for field, value in fields.items():
        await admin.policy_store.records.set_namespace_field(key, field, value)
    if delay is not None:
        await admin.policies.set_delayed(key, delay)
    return no_content()


def namespace_policies_body(body: object) -> dict[str, Any]:
    """A create-namespace body (Pulsar ``Policies``); its ``auth_policies`` must parse (400)."""
    from broker.security.authorization import NamespaceAuth
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise E.bad_request("Invalid namespace policies: expected a JSON object")
    try:
        auth = NamespaceAuth.from_policies(body)
    except ValueError as exc:  # what Pulsar's JSON binding of Policies refuses: 400
        raise E.bad_request(str(exc)) from None
    return {**body, "auth_policies": auth.auth_policies.to_json()}


async def delete_namespace(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await admin.tenants.require_namespace(tenant, ns)
    if await admin.topics.stored_names(tenant, ns) or \
            await admin.topics.list_partitioned(tenant, ns):
        raise E.conflict(E.NAMESPACE_NOT_EMPTY)
    await admin.tenants.delete_namespace(f"{tenant}/{ns}")
    return no_content()


# --- delayed-delivery policies ------------------------------------------------------------
def _validate(body: object) -> dict[str, Any]:
    from broker.delayed.policy import PolicyTypeError, validate_policy_body
    try:
        return validate_policy_body(body)
    except PolicyTypeError as exc:
        raise E.bad_request(str(exc)) from None
    except ValueError as exc:
        raise E.precondition_failed(str(exc) or "Invalid delayed delivery policy") from None


def policy_to_body(policy: DelayPolicy) -> dict[str, Any]:
    """A resolved DelayPolicy as the REST body (Pulsar's DelayedDeliveryPolicies + fixed)."""
    return {"active": policy.active, "tickTime": policy.tick_time_ms,
            "maxDeliveryDelayInMillis": policy.max_delay_ms,
            "fixedDeliveryDelayInMillis": policy.fixed_delay_ms}




def _applied_flag(request: web.Request) -> bool:
    return request.query.get("applied", "false").lower() in ("1", "true")


async def get_ns_delayed(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await admin.tenants.require_namespace(tenant, ns)
    key = f"{tenant}/{ns}"
    if _applied_flag(request):
        return json_response(policy_to_body(admin.policies.applied_delay(key)))
    return json_response(admin.policies.delayed_body(key))


async def set_ns_delayed(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    body = bodies.load_json(await request.read())
    await admin.tenants.require_namespace(tenant, ns)
    await admin.policies.set_delayed(f"{tenant}/{ns}", _validate(body))
    return no_content()


async def remove_ns_delayed(request: web.Request) -> web.Response:
    admin = admin_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await admin.tenants.require_namespace(tenant, ns)
    await admin.policies.remove_delayed(f"{tenant}/{ns}")
    return no_content()


async def _topic_key(request: web.Request) -> tuple[AdminService, TopicName]:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    await admin.topics.require_topic_or_partitioned(tn)
    return admin, tn


async def get_topic_delayed(request: web.Request) -> web.Response:
    admin, tn = await _topic_key(request)
    if _applied_flag(request):
        return json_response(policy_to_body(admin.policies.applied_delay(tn)))
    return json_response(admin.policies.delayed_body(tn))


async def set_topic_delayed(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    admin, tn = await _topic_key(request)
    await admin.policies.set_delayed(tn, _validate(body))
    return no_content()


async def remove_topic_delayed(request: web.Request) -> web.Response:
    admin, tn = await _topic_key(request)
    await admin.policies.remove_delayed(tn)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/admin/v2/clusters", list_clusters)
    r.add_get(TENANTS, list_tenants)
    r.add_get(TENANT, get_tenant)
    r.add_put(TENANT, create_tenant)
    r.add_post(TENANT, update_tenant)
    r.add_delete(TENANT, delete_tenant)
    r.add_get(NAMESPACES, list_namespaces)
    r.add_put(NAMESPACE, create_namespace)
    r.add_delete(NAMESPACE, delete_namespace)
    for path, get, post, delete in (
        (NAMESPACE + "/delayedDelivery", get_ns_delayed, set_ns_delayed, remove_ns_delayed),
        (TOPIC + "/delayedDelivery", get_topic_delayed, set_topic_delayed, remove_topic_delayed),
    ):
        r.add_get(path, get)
        r.add_post(path, post)
        r.add_put(path, post)   # pulsar-admin uses POST; accept PUT as a convenience
        r.add_delete(path, delete)
