"""Namespace and topic properties: string maps an operator attaches, kept with what they describe.

Theory of operation: Pulsar's paths and answers (``NamespacesBase.internalSetProperties`` ...,
``PersistentTopicsBase.internalGetPropertiesAsync`` ...):

- namespace: ``PUT|GET|DELETE /admin/v2/namespaces/{t}/{ns}/properties`` (PUT merges the
  given keys, DELETE clears them all; GET of none is ``{}``) and
  ``PUT .../property/{key}/{value}``, ``GET|DELETE .../property/{key}`` (the value as text,
  empty when absent; DELETE answers the removed value);
- topic: ``GET|PUT|DELETE /admin/v2/persistent/{t}/{ns}/{topic}/properties`` (PUT merges,
  an empty map changes nothing; ``DELETE ...?key=k`` removes one key). A partitioned topic
  keeps its own map (a partition has its own, empty unless set on it); a partitioned topic
  created without properties answers no body, a non-partitioned one ``{}``. Properties also
  come with the creation body (:func:`properties_of_create`).

Both are stored in the policy records (field ``properties`` of the namespace's and of the
topic's record), so they are durable before the answer, survive restarts and go when the
namespace or topic is deleted. Values that are JSON numbers or booleans are kept as their
text, as Pulsar's Jackson reads them into a ``Map<String, String>``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response, namespace_of, no_content
from broker.admin.service import AdminService, topic_name
from broker.topics.names import TopicName
from broker.topics.policy_records import PolicyRecords

__all__ = ["PROPERTIES", "add_routes", "parse_properties", "properties_of_create"]

PROPERTIES = "properties"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_properties(body: object) -> dict[str, str]:
    """A ``Map<String, String>`` body (``null``: empty); 400 for anything else."""
    if body is None:
        return {}
    if not isinstance(body, dict) or not all(
            isinstance(v, (str, int, float, bool)) for v in body.values()):
        raise E.bad_request("Invalid properties: expected an object of strings")
    return {str(k): _text(v) for k, v in body.items()}


def properties_of_create(body: object, *, partitioned: bool = False) -> dict[str, str]:
    """The properties a create body carries: a non-partitioned topic's body is the map
    itself, a partitioned one's a PartitionedTopicMetadata with ``properties`` (or just the
    partition count, then none)."""
    if partitioned:
        return parse_properties(body.get(PROPERTIES)) if isinstance(body, dict) else {}
    return parse_properties(body)


def _records(admin: AdminService) -> PolicyRecords:
    return admin.policy_store.records


def _ns_map(admin: AdminService, ns: str) -> dict[str, str]:
    return dict(_records(admin).namespace_value(ns, PROPERTIES) or {})


async def _set_ns_map(admin: AdminService, ns: str, values: dict[str, str]) -> None:
    if values:
        await _records(admin).set_namespace_field(ns, PROPERTIES, values)
    else:
        await _records(admin).remove_namespace_field(ns, PROPERTIES)


async def get_ns_properties(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    return json_response(_ns_map(admin, ns))


async def set_ns_properties(request: web.Request) -> web.Response:
    given = parse_properties(bodies.load_json(await request.read()))
    admin, ns = await namespace_of(request)
    await _set_ns_map(admin, ns, {**_ns_map(admin, ns), **given})
    return no_content()


async def clear_ns_properties(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    await _set_ns_map(admin, ns, {})
    return no_content()


def _text_response(value: str | None) -> web.Response:
    return web.Response(status=200) if value is None else web.Response(text=value)


async def get_ns_property(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    return _text_response(_ns_map(admin, ns).get(request.match_info["key"]))


async def set_ns_property(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    key, value = request.match_info["key"], request.match_info["value"]
    await _set_ns_map(admin, ns, {**_ns_map(admin, ns), key: value})
    return no_content()


async def remove_ns_property(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    values = _ns_map(admin, ns)
    old = values.pop(request.match_info["key"], None)
    if old is not None:
        await _set_ns_map(admin, ns, values)
    return _text_response(old)


# --- topics ------------------------------------------------------------------------------------
async def _topic(request: web.Request) -> tuple[AdminService, TopicName, int]:
    """The topic (404 ``Topic {name} not found`` when neither it nor a partitioned topic of
    that name exists) and its partition count."""
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    partitions = await admin.topics.partition_count(tn)
    if partitions == 0 and not await admin.topics.exists(tn):
        raise E.not_found(f"Topic {tn.full} not found")
    return admin, tn, partitions


def _topic_map(admin: AdminService, tn: TopicName) -> dict[str, str] | None:
    value: Any = _records(admin).topic(tn.full).get(PROPERTIES)
    return None if value is None else dict(value)


async def store_topic_properties(admin: AdminService, tn: TopicName,
                                 values: dict[str, str]) -> None:
    """Keep *values* as the properties of the topic *tn* (created just now or existing)."""
    await _records(admin).set_topic_field(tn.full, PROPERTIES, values)


async def get_topic_properties(request: web.Request) -> web.Response:
    admin, tn, partitions = await _topic(request)
    values = _topic_map(admin, tn)
    if values is None and partitions == 0:
        values = {}
    return json_response(values)


async def update_topic_properties(request: web.Request) -> web.Response:
    given = parse_properties(bodies.load_json(await request.read()))
    admin, tn, _ = await _topic(request)
    if given:
        await store_topic_properties(admin, tn, {**(_topic_map(admin, tn) or {}), **given})
    return no_content()


async def remove_topic_property(request: web.Request) -> web.Response:
    admin, tn, _ = await _topic(request)
    values = _topic_map(admin, tn)
    key = request.query.get("key")
    if values is not None and key is not None and key in values:
        del values[key]
        await store_topic_properties(admin, tn, values)
    return no_content()


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(NAMESPACE + "/properties", get_ns_properties)
    r.add_put(NAMESPACE + "/properties", set_ns_properties)
    r.add_delete(NAMESPACE + "/properties", clear_ns_properties)
    r.add_get(NAMESPACE + "/property/{key}", get_ns_property)
    r.add_put(NAMESPACE + "/property/{key}/{value}", set_ns_property)
    r.add_delete(NAMESPACE + "/property/{key}", remove_ns_property)
    r.add_get(TOPIC + "/properties", get_topic_properties)
    r.add_put(TOPIC + "/properties", update_topic_properties)
    r.add_delete(TOPIC + "/properties", remove_topic_property)
