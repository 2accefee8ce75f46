"""Resource groups: Pulsar's ``/admin/v2/resourcegroups`` and a namespace's ``resourcegroup``.

- ``GET /admin/v2/resourcegroups``: the groups' names.
- ``GET|PUT|DELETE /admin/v2/resourcegroups/{name}``: the ``ResourceGroup`` body
  (``publishRateInMsgs``, ``publishRateInBytes``, ``dispatchRateInMsgs``,
  ``dispatchRateInBytes``; ``-1`` is no limit). PUT creates the group, or updates the fields of
  an existing one that are given and not ``-1``, as Pulsar's read-modify-write does. A missing
  group is 404 ``ResourceGroup does not exist``; deleting a group a namespace is attached to is
  412 ``ResourceGroup is in use``.
- ``GET .../namespaces/{t}/{ns}/resourcegroup`` (the name as text; an empty 200 while unset),
  ``POST .../resourcegroup/{name}`` (412 ``ResourceGroup does not exist`` for an unknown group),
  ``DELETE .../resourcegroup``: the namespace's ``resource_group_name``.

All are durable before the answer (:mod:`broker.topics.resource_groups`, which also enforces the
quotas). The group routes are super-user only and the namespace's are a tenant admin's
(:mod:`broker.admin.auth`), as in Pulsar.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespaces import NAMESPACE
from broker.admin.responses import admin_of, json_response, namespace_of, no_content
from broker.admin.service import AdminService
from broker.topics.resource_groups import FIELDS, NS_RESOURCE_GROUP, ResourceGroups

__all__ = ["add_routes"]

GROUPS = "/admin/v2/resourcegroups"
GROUP = GROUPS + "/{name}"
MISSING = "ResourceGroup does not exist"


def _groups(admin: AdminService) -> ResourceGroups:
    return admin.policy_store.resource_groups


def parse_group(body: object) -> dict[str, int | None]:
    """The four rates of a ResourceGroup body (None where not given); unknown fields are
    ignored, as Pulsar's JSON reader does."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid ResourceGroup: expected a JSON object")
    parsed: dict[str, int | None] = {}
    for field in FIELDS:
        value = body.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise E.bad_request(f"Invalid ResourceGroup: {field} must be an integer")
        parsed[field] = value
    return parsed


async def list_groups(request: web.Request) -> web.Response:
    return json_response(_groups(admin_of(request)).names())


async def get_group(request: web.Request) -> web.Response:
    body = _groups(admin_of(request)).get(request.match_info["name"])
    if body is None:
        raise E.not_found(MISSING)
    return json_response(body)


async def put_group(request: web.Request) -> web.Response:
    parsed = parse_group(bodies.load_json(await request.read()))
    groups = _groups(admin_of(request))
    name = request.match_info["name"]
    current = groups.get(name)
    if current is None:
        body: dict[str, Any] = {k: v for k, v in parsed.items() if v is not None}
    else:
        body = dict(current)
        body.update({k: v for k, v in parsed.items() if v is not None and v != -1})
    await groups.put(name, body)
    return no_content()


async def delete_group(request: web.Request) -> web.Response:
    groups = _groups(admin_of(request))
    name = request.match_info["name"]
    if groups.namespaces_using(name):
        raise E.precondition_failed("ResourceGroup is in use")
    if groups.get(name) is None:
        raise E.not_found(MISSING)
    await groups.delete(name)
    return no_content()


async def get_ns_group(request: web.Request) -> web.Response:
    """The name as plain text, an empty 200 while unset, as Pulsar's (Jersey writes a String
    entity as it is)."""
    admin, ns = await namespace_of(request)
    value = admin.policy_store.records.namespace_value(ns, NS_RESOURCE_GROUP)
    return web.Response(status=200) if value is None else web.Response(text=str(value))


async def set_ns_group(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    name = request.match_info["name"]
    if _groups(admin).get(name) is None:
        raise E.precondition_failed(MISSING)
    await admin.policy_store.records.set_namespace_field(ns, NS_RESOURCE_GROUP, name)
    return no_content()


async def remove_ns_group(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    await admin.policy_store.records.remove_namespace_field(ns, NS_RESOURCE_GROUP)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(GROUPS, list_groups)
    r.add_get(GROUP, get_group)
    r.add_put(GROUP, put_group)
    r.add_delete(GROUP, delete_group)
    r.add_get(f"{NAMESPACE}/resourcegroup", get_ns_group)
    r.add_post(f"{NAMESPACE}/resourcegroup/{{name}}", set_ns_group)
    r.add_delete(f"{NAMESPACE}/resourcegroup", remove_ns_group)
