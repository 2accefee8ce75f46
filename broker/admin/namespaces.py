"""Tenants, namespaces and delayed-delivery policies (namespace and topic level).

Theory of operation: tenants and namespaces live in the service (metadata store). Create and
delete check existence and emptiness here, first, so the status and reason are Pulsar's:
404 "Tenant does not exist" / "Namespace does not exist", 409 "Tenant already exists" /
"Namespace already exists" / "The tenant still has active namespaces" / "Cannot delete non
empty namespace". Delayed-delivery policies are validated by
``broker.delayed.policy.validate_policy_body`` (ValueError -> 412 with its reason) and stored
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
from broker.admin.facade import AdminFacade, topic_full_name
from broker.admin.responses import facade_of, json_response, no_content
from broker.admin.topics import TOPIC
from broker.delayed.policy import DelayPolicy, resolve_policy
from broker.topics.names import TopicName
from broker.topics.policies import NS_MAX_PRODUCERS

TENANTS = "/admin/v2/tenants"
TENANT = TENANTS + "/{tenant}"
NAMESPACES = "/admin/v2/namespaces/{tenant}"
NAMESPACE = NAMESPACES + "/{namespace}"


def _cluster(facade: AdminFacade) -> str:
    return facade.service.config.cluster_name


# --- clusters / tenants -------------------------------------------------------------------
async def list_clusters(request: web.Request) -> web.Response:
    return json_response([_cluster(facade_of(request))])


async def list_tenants(request: web.Request) -> web.Response:
    return json_response(await facade_of(request).tenants())


async def get_tenant(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant = request.match_info["tenant"]
    await facade.require_tenant(tenant)
    info = await facade.service.tenancy.get_tenant(tenant)
    if info is None:
        info = {"adminRoles": [], "allowedClusters": [_cluster(facade)]}
    return json_response(info)


async def create_tenant(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant = request.match_info["tenant"]
    body = bodies.load_json(await request.read())
    if body is not None and not isinstance(body, dict):
        raise E.bad_request("Invalid tenant info: expected a JSON object")
    if tenant in await facade.service.tenancy.list_tenants():
        raise E.conflict(E.TENANT_EXISTS)
    info = {"adminRoles": [], "allowedClusters": [_cluster(facade)], **(body or {})}
    try:
        await facade.service.tenancy.create_tenant(tenant, info)
    except TypeError:
        await facade.service.tenancy.create_tenant(tenant)   # a service that keeps no tenant info
    return no_content()


async def delete_tenant(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant = request.match_info["tenant"]
    await facade.require_tenant(tenant)
    if await facade.service.tenancy.list_namespaces(tenant):
        raise E.conflict(E.TENANT_NOT_EMPTY)
    await facade.service.delete_tenant(tenant)
    return no_content()


# --- namespaces ---------------------------------------------------------------------------
async def list_namespaces(request: web.Request) -> web.Response:
    return json_response(await facade_of(request).namespaces(request.match_info["tenant"]))


async def create_namespace(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    body = bodies.load_json(await request.read())
    await facade.require_tenant(tenant)
    if await facade.namespace_exists(tenant, ns):
        raise E.conflict(E.NAMESPACE_EXISTS)
    policies = namespace_policies_body(body)
    max_producers = _max_producers_of(policies)
    await facade.service.tenancy.create_namespace(f"{tenant}/{ns}", policies)
    if max_producers is not None:
        await facade.service.policies.set_namespace_field(
            f"{tenant}/{ns}", NS_MAX_PRODUCERS, max_producers)
    return no_content()


def _max_producers_of(policies: dict[str, Any]) -> int | None:
    """The create body's ``max_producers_per_topic`` (a limit the topics enforce), if set."""
    value = policies.get(NS_MAX_PRODUCERS)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise E.precondition_failed("maxProducersPerTopic must be 0 or more")
    return value


def namespace_policies_body(body: object) -> dict[str, Any]:
    """A create-namespace body (Pulsar ``Policies``); its ``auth_policies`` must parse (412)."""
    from broker.security.authorization import NamespaceAuth
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise E.bad_request("Invalid namespace policies: expected a JSON object")
    try:
        auth = NamespaceAuth.from_policies(body)
    except ValueError as exc:
        raise E.precondition_failed(str(exc)) from None
    return {**body, "auth_policies": auth.auth_policies.to_json()}


async def delete_namespace(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await facade.require_namespace(tenant, ns)
    if await facade.service.list_topics(f"{tenant}/{ns}") or \
            await facade.list_partitioned(tenant, ns):
        raise E.conflict(E.NAMESPACE_NOT_EMPTY)
    await facade.service.delete_namespace(f"{tenant}/{ns}")
    return no_content()


# --- delayed-delivery policies ------------------------------------------------------------
def _validate(body: object) -> dict[str, Any]:
    from broker.delayed.policy import validate_policy_body
    try:
        return validate_policy_body(body)
    except ValueError as exc:
        raise E.precondition_failed(str(exc) or "Invalid delayed delivery policy") from None


def policy_to_body(policy: DelayPolicy) -> dict[str, Any]:
    """A resolved DelayPolicy as the REST body (Pulsar's DelayedDeliveryPolicies + fixed)."""
    return {"active": policy.active, "tickTime": policy.tick_time_ms,
            "maxDeliveryDelayInMillis": policy.max_delay_ms,
            "fixedDeliveryDelayInMillis": policy.fixed_delay_ms}


async def _applied(facade: AdminFacade, ns_key: str, topic_key: str | None) -> dict[str, Any]:
    """The policy in force, resolved as the broker does (``PolicyStore.delay_policy``; a
    partition without a body of its own runs under its partitioned topic's)."""
    if topic_key is None:
        return policy_to_body(resolve_policy(facade.service.config,
                                             await facade.get_policy("namespace", ns_key), None))
    return policy_to_body(facade.service.policies.delay_policy(TopicName.parse(topic_key)))


def _applied_flag(request: web.Request) -> bool:
    return request.query.get("applied", "false").lower() in ("1", "true")


async def get_ns_delayed(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await facade.require_namespace(tenant, ns)
    key = f"{tenant}/{ns}"
    if _applied_flag(request):
        return json_response(await _applied(facade, key, None))
    return json_response(await facade.get_policy("namespace", key))


async def set_ns_delayed(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    body = bodies.load_json(await request.read())
    await facade.require_namespace(tenant, ns)
    await facade.set_policy("namespace", f"{tenant}/{ns}", _validate(body))
    return no_content()


async def remove_ns_delayed(request: web.Request) -> web.Response:
    facade = facade_of(request)
    tenant, ns = request.match_info["tenant"], request.match_info["namespace"]
    await facade.require_namespace(tenant, ns)
    await facade.remove_policy("namespace", f"{tenant}/{ns}")
    return no_content()


async def _topic_key(request: web.Request) -> tuple[AdminFacade, str, str]:
    facade = facade_of(request)
    m = request.match_info
    await facade.require_namespace(m["tenant"], m["namespace"])
    full = topic_full_name(m["tenant"], m["namespace"], m["topic"])
    await facade.require_topic_or_partitioned(full)
    return facade, f"{m['tenant']}/{m['namespace']}", full


async def get_topic_delayed(request: web.Request) -> web.Response:
    facade, ns_key, full = await _topic_key(request)
    if _applied_flag(request):
        return json_response(await _applied(facade, ns_key, full))
    return json_response(await facade.get_policy("topic", full))


async def set_topic_delayed(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    facade, _, full = await _topic_key(request)
    await facade.set_policy("topic", full, _validate(body))
    return no_content()


async def remove_topic_delayed(request: web.Request) -> web.Response:
    facade, _, full = await _topic_key(request)
    await facade.remove_policy("topic", full)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/admin/v2/clusters", list_clusters)
    r.add_get(TENANTS, list_tenants)
    r.add_get(TENANT, get_tenant)
    r.add_put(TENANT, create_tenant)
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
