"""A namespace's entry filters: Pulsar's ``.../namespaces/{t}/{ns}/entryFilters``.

Theory of operation: Pulsar's entry filters are broker plugins that choose, per entry, whether
a subscription gets it; a namespace names the ones it wants. Horae loads no plugins, so it
answers as a Pulsar broker without entry filters does: ``GET`` returns the names a create body
stored (``{"entryFilterNames": ...}``, an empty 200 while unset), ``POST`` refuses every name
with 400 ``Entry filter 'x' not found`` (and blank names with Pulsar's 400 text) since none
exists, and ``DELETE`` removes what a create body stored. The stored names filter nothing.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespace_create import NS_ENTRY_FILTERS
from broker.admin.namespaces import NAMESPACE
from broker.admin.responses import json_response, namespace_of, no_content

__all__ = ["add_routes"]

PATH = NAMESPACE + "/entryFilters"
BLANK = "entryFilterNames can't be empty. To remove entry filters use the remove method."


async def get_filters(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    return json_response(admin.policy_store.records.namespace_value(ns, NS_ENTRY_FILTERS))


async def set_filters(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    names = body.get("entryFilterNames") if isinstance(body, dict) else body
    if names is not None and not isinstance(names, str):
        raise E.bad_request("Invalid entryFilters: expected {\"entryFilterNames\": \"...\"}")
    listed = [n.strip() for n in (names or "").split(",") if n.strip()]
    if not listed:
        raise E.bad_request(BLANK)
    await namespace_of(request)
    raise E.bad_request(f"Entry filter '{listed[0]}' not found")   # no entry filter exists


async def remove_filters(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    await admin.policy_store.records.remove_namespace_field(ns, NS_ENTRY_FILTERS)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(PATH, get_filters)
    r.add_post(PATH, set_filters)
    r.add_delete(PATH, remove_filters)
