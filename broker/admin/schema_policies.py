"""Namespace schema auto-update, encryption and subscription-auth policies over REST.

Theory of operation: Pulsar's paths and answers (v2 ``Namespaces`` / ``NamespacesBase``):

- ``GET|POST /admin/v2/namespaces/{t}/{ns}/isAllowAutoUpdateSchema`` (body ``true``/``false``):
  may a producer register a schema the topic does not have yet? GET of an unset value answers
  the broker's ``isAllowAutoUpdateSchemaEnabled`` (default true). When it is false a producer
  (or GET_OR_CREATE_SCHEMA) bringing an unregistered schema is refused with IncompatibleSchema
  ``Schema not found and schema auto updating is disabled.`` (:mod:`broker.net.schemas`);
- ``GET|PUT .../schemaAutoUpdateCompatibilityStrategy`` (a JSON string, one of Pulsar's
  SchemaAutoUpdateCompatibilityStrategy names; GET of an unset value answers no body, as
  Pulsar's null): the deprecated form of the compatibility strategy, used while the
  namespace's ``schemaCompatibilityStrategy`` is UNDEFINED
  (:meth:`broker.topics.policies.PolicyStore.schema_compatibility`).

- ``GET|POST .../encryptionRequired`` (``true``/``false``, unset ``false``): a producer that
  does not declare itself encrypted (PRODUCER ``encrypted``) is refused with MetadataError
  ``Encryption is required in persistent://t/ns/x`` (:mod:`broker.net.producers`).

- ``GET|POST .../subscriptionAuthMode`` (a JSON string, ``None`` or ``Prefix``; ``null``
  is ``None``): with ``Prefix`` a role that is not a super-user or tenant admin may only use
  subscriptions named with its role as prefix (enforced by
  :meth:`broker.security.authorization.AuthorizationService.subscription_refusal`). Kept in
  the namespace's record beside its grants.

None has a DELETE route in Pulsar (the path then falls to the bundle-deletion route). All
are fields of the namespace's policy record: durable before the answer, gone with the
namespace.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import json_response, namespace_of, no_content
from broker.topics import policies as P

__all__ = ["AUTO_UPDATE_STRATEGIES", "add_routes"]

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"

#: Pulsar's SchemaAutoUpdateCompatibilityStrategy names
AUTO_UPDATE_STRATEGIES = ("AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible",
                          "BackwardTransitive", "ForwardTransitive", "FullTransitive")


async def get_allow_auto_update(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    value = admin.policy_store.records.namespace_value(ns, P.NS_ALLOW_AUTO_UPDATE_SCHEMA)
    if value is None:
        return json_response(admin.policy_store.config.is_allow_auto_update_schema_enabled)
    return json_response(bool(value))


async def set_allow_auto_update(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    if not isinstance(body, bool):
        raise E.bad_request("Invalid value: expected true or false")
    admin, ns = await namespace_of(request)
    await admin.policy_store.records.set_namespace_field(ns, P.NS_ALLOW_AUTO_UPDATE_SCHEMA, body)
    return no_content()


async def get_auto_update_strategy(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    value = admin.policy_store.records.namespace_value(ns, P.NS_SCHEMA_AUTO_UPDATE_STRATEGY)
    return no_content() if value is None else json_response(value)


async def set_auto_update_strategy(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    if body is not None and body not in AUTO_UPDATE_STRATEGIES:
        raise E.bad_request(f"Invalid schema auto update compatibility strategy: {body!r}")
    admin, ns = await namespace_of(request)
    records = admin.policy_store.records
    if body is None:
        await records.remove_namespace_field(ns, P.NS_SCHEMA_AUTO_UPDATE_STRATEGY)
    else:
        await records.set_namespace_field(ns, P.NS_SCHEMA_AUTO_UPDATE_STRATEGY, body)
    return no_content()


async def get_encryption_required(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    value = admin.policy_store.records.namespace_value(ns, P.NS_ENCRYPTION_REQUIRED)
    return json_response(bool(value))


async def set_encryption_required(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    if not isinstance(body, bool):
        raise E.bad_request("Invalid value: expected true or false")
    admin, ns = await namespace_of(request)
    await admin.policy_store.records.set_namespace_field(ns, P.NS_ENCRYPTION_REQUIRED, body)
    return no_content()


async def get_subscription_auth_mode(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    return json_response(admin.tenants.subscription_auth_mode(ns))


async def set_subscription_auth_mode(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    if body is not None and body not in ("None", "Prefix"):
        raise E.bad_request(f"Invalid subscription auth mode: {body!r}")
    admin, ns = await namespace_of(request)
    await admin.tenants.set_subscription_auth_mode(ns, "None" if body is None else str(body))
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(f"{NAMESPACE}/isAllowAutoUpdateSchema", get_allow_auto_update)
    r.add_post(f"{NAMESPACE}/isAllowAutoUpdateSchema", set_allow_auto_update)
    r.add_get(f"{NAMESPACE}/schemaAutoUpdateCompatibilityStrategy", get_auto_update_strategy)
    r.add_put(f"{NAMESPACE}/schemaAutoUpdateCompatibilityStrategy", set_auto_update_strategy)
    r.add_get(f"{NAMESPACE}/encryptionRequired", get_encryption_required)
    r.add_post(f"{NAMESPACE}/encryptionRequired", set_encryption_required)
    r.add_get(f"{NAMESPACE}/subscriptionAuthMode", get_subscription_auth_mode)
    r.add_post(f"{NAMESPACE}/subscriptionAuthMode", set_subscription_auth_mode)
