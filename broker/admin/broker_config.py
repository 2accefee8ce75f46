"""Pulsar's broker configuration routes: dynamic settings, runtime and internal configuration,
version.

Theory of operation: Pulsar's ``BrokersBase`` paths, bodies and statuses over
:class:`broker.admin.service.AdminBroker` (the settings themselves are
:mod:`broker.dynamic_config`'s):

- ``GET /admin/v2/brokers/configuration``: the names of the settings that may change at run
  time (a JSON list).
- ``GET .../configuration/values``: the stored overrides ``{key: text}``.
- ``GET .../configuration/runtime``: every setting's value in force ``{key: text}``.
- ``POST .../configuration/{key}/{value}``: store and apply an override, 200 with no body (the
  value may hold ``/``, URL-encoded). A key that is not dynamic is 412 "Can't update
  non-dynamic configuration".
- ``DELETE .../configuration/{key}``: drop an override, 200; 412 "Can't delete non-dynamic
  configuration".
- ``GET /admin/v2/brokers/internal-configuration``: Pulsar's InternalConfigurationData.
- ``GET /admin/v2/brokers/version``: the broker's version, as text.

All are super-user operations but ``version``, which any authenticated role may read
(:mod:`broker.admin.auth`). :func:`add_routes` runs before :mod:`broker.admin.brokers` so these
names are never read as a cluster name.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response
from broker.dynamic_config import DynamicConfigError

__all__ = ["add_routes"]

BROKERS = "/admin/v2/brokers"
CONFIGURATION = BROKERS + "/configuration"


async def dynamic_names(request: web.Request) -> web.Response:
    return json_response(admin_of(request).broker.dynamic_names())


async def dynamic_values(request: web.Request) -> web.Response:
    return json_response(admin_of(request).broker.dynamic_overrides())


async def runtime(request: web.Request) -> web.Response:
    return json_response(admin_of(request).broker.runtime_config())


def _segment(request: web.Request, name: str) -> str:
    """A path segment, decoded once by the router (an encoded ``/`` stays inside the value)."""
    return request.match_info[name]


async def update_dynamic(request: web.Request) -> web.Response:
    key, value = _segment(request, "key"), _segment(request, "value")
    try:
        await admin_of(request).broker.update_dynamic(key, value)
    except DynamicConfigError as exc:
        raise E.precondition_failed(str(exc)) from None
    return web.Response(status=200)


async def delete_dynamic(request: web.Request) -> web.Response:
    try:
        await admin_of(request).broker.delete_dynamic(_segment(request, "key"))
    except DynamicConfigError as exc:
        raise E.precondition_failed(str(exc)) from None
    return web.Response(status=200)


async def internal_configuration(request: web.Request) -> web.Response:
    return json_response(admin_of(request).broker.internal_config())


async def version(request: web.Request) -> web.Response:
    return web.Response(text=admin_of(request).broker.version(), content_type="text/plain")


def add_routes(app: web.Application) -> None:
    r = app.router
    for path in (CONFIGURATION, CONFIGURATION + "/"):
        r.add_get(path, dynamic_names)
    r.add_get(CONFIGURATION + "/values", dynamic_values)
    r.add_get(CONFIGURATION + "/runtime", runtime)
    r.add_post(CONFIGURATION + "/{key}/{value:.+}", update_dynamic)
    r.add_delete(CONFIGURATION + "/{key}", delete_dynamic)
    r.add_get(BROKERS + "/internal-configuration", internal_configuration)
    r.add_get(BROKERS + "/version", version)
