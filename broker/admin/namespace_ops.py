"""Namespace-wide operations of Pulsar's admin API: unload, clear-backlog, unsubscribe.

Theory of operation: Pulsar runs these over the topics its broker has loaded in the namespace
(its bundles' topics); one node owns the whole namespace as one bundle, so they run over the
namespace's loaded persistent topics (:meth:`broker.admin.service.AdminTopics.loaded_of_namespace`):

- ``PUT /admin/v2/namespaces/{t}/{ns}/unload``: every loaded topic is unloaded (clients
  reconnect, each topic opens a new ledger). 204.
- ``POST .../clearBacklog``: every subscription of every loaded topic skips to the end;
  ``POST .../clearBacklog/{subscription}``: that subscription only, where it exists. 204.
- ``POST .../unsubscribe/{subscription}``: the subscription is deleted from every loaded topic
  that has it; 412 "Subscription has active connected consumers" (nothing deleted) while one
  has consumers. 204.

The bundle forms (``.../{bundle}/unload`` and so on) accept the namespace's one bundle,
``0x00000000_0xffffffff``; another range is refused as Pulsar refuses a range that is not one
of the namespace's bundles: 412 "Cannot find bundle {ns}/{range} in the bundles list" when no
bundle starts at its lower bound, 412 "Invalid upper boundary for bundle {ns}/{range}. Expected
upper boundary of {ns}/0x00000000_0xffffffff" when its upper bound is not the bundle's.
404 "Namespace does not exist" for an unknown namespace.
"""

from __future__ import annotations

import re

from aiohttp import web

from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import AdminService
from broker.topics.topic import Topic

__all__ = ["FULL_BUNDLE", "add_bundle_delete_route", "add_routes"]

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
#: The one bundle of a namespace on one node: the whole hash range.
FULL_BUNDLE = "0x00000000_0xffffffff"
_BUNDLE_RANGE = re.compile(r"0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}")
_FULL_UPPER = 0xFFFFFFFF


def _require_bundle(namespace: str, bundle: str) -> None:
    """Pulsar's check of a bundle range against the namespace's bundles (compared as numbers)."""
    lower, upper = (int(bound, 16) for bound in bundle.split("_"))
    if lower != 0:
        raise E.precondition_failed(
            f"Cannot find bundle {namespace}/{bundle} in the bundles list")
    if upper != _FULL_UPPER:
        raise E.precondition_failed(
            f"Invalid upper boundary for bundle {namespace}/{bundle}. Expected upper boundary "
            f"of {namespace}/{FULL_BUNDLE}")


async def _loaded(request: web.Request) -> tuple[AdminService, list[Topic]]:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    bundle = m.get("bundle")
    if bundle is not None:
        _require_bundle(f"{m['tenant']}/{m['namespace']}", bundle)
    return admin, admin.topics.loaded_of_namespace(m["tenant"], m["namespace"])


async def unload(request: web.Request) -> web.Response:
    admin, topics = await _loaded(request)
    for topic in topics:
        await admin.topics.unload(topic)
    return no_content()


async def clear_backlog(request: web.Request) -> web.Response:
    _, topics = await _loaded(request)
    name = request.match_info.get("subscription")
    for topic in topics:
        for sub_name, sub in list(topic.subscriptions.items()):
            if name is None or sub_name == name:
                await sub.resets.skip_all()
    return no_content()


async def unsubscribe(request: web.Request) -> web.Response:
    _, topics = await _loaded(request)
    name = request.match_info["subscription"]
    holders = [t for t in topics if name in t.subscriptions]
    if any(t.subscriptions[name].consumers for t in holders):
        raise E.precondition_failed(E.SUBSCRIPTION_BUSY)
    for topic in holders:
        if name in topic.subscriptions:
            await topic.subscriptions.delete_subscription(name)
    return no_content()


async def delete_bundle(request: web.Request) -> web.Response:
    """``DELETE .../namespaces/{t}/{ns}/{bundle}``: Pulsar's bundle deletion, the route every
    other one-segment DELETE of a namespace falls to. A name that is not a bundle range is
    412 ``Invalid bundle range: X``, as Pulsar answers it; a Horae namespace is one bundle, so
    another range is refused as Pulsar refuses a range not in its bundles list, and the whole
    range is refused (delete the namespace)."""
    admin = admin_of(request)
    m = request.match_info
    bundle = m["bundle"]
    if _BUNDLE_RANGE.fullmatch(bundle) is None:
        raise E.precondition_failed(f"Invalid bundle range: {bundle}")
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    _require_bundle(f"{m['tenant']}/{m['namespace']}", bundle)
    raise E.precondition_failed("A namespace has one bundle here: delete the namespace instead")


async def bundles(request: web.Request) -> web.Response:
    """``GET .../namespaces/{t}/{ns}/bundles``: Pulsar's BundlesData of the one bundle."""
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    low, high = FULL_BUNDLE.split("_")
    return json_response({"boundaries": [low, high], "numBundles": 1})


async def topic_bundle(request: web.Request) -> web.Response:
    """``GET /lookup/v2/topic/{domain}/{t}/{ns}/{topic}/bundle``: the bundle range a topic
    is in (text)."""
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    return web.Response(text=FULL_BUNDLE)


def add_bundle_delete_route(app: web.Application) -> None:
    """Registered after every other route, so only a DELETE no other route takes reaches it."""
    app.router.add_delete(NAMESPACE + "/{bundle}", delete_bundle)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(NAMESPACE + "/bundles", bundles)
    r.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", topic_bundle)
    for base in (NAMESPACE, NAMESPACE + "/{bundle:0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}}"):
        r.add_put(base + "/unload", unload)
        r.add_post(base + "/clearBacklog", clear_backlog)
        r.add_post(base + "/clearBacklog/{subscription}", clear_backlog)
        r.add_post(base + "/unsubscribe/{subscription}", unsubscribe)
