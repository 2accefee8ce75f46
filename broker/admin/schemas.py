"""``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...``: the schema registry over REST.

Theory of operation: Pulsar's SchemasResource paths and bodies, served from the broker's
:class:`broker.topics.schemas.SchemaRegistry`:

- ``GET .../schema`` (latest) and ``GET .../schema/{version}``: ``{"version", "type",
  "timestamp", "data", "properties"}``; 404 "Schema not found" when there is none;
- ``GET .../schemas``: ``{"getSchemaResponses": [...]}``, every live version;
- ``POST .../schema`` with ``{"type", "schema", "properties"}``: registers it under the
  strategy in force, ``{"version": {"version": n}}``; 409 with the reason when incompatible;
- ``POST .../compatibility``: ``{"compatibility", "schemaCompatibilityStrategy"}`` (Pulsar's
  IsCompatibilityResponse as Jackson writes it: its getter is ``isCompatibility()``) without
  registering;
- ``DELETE .../schema``: ``{"version": n}`` (the deletion marker's version).

``data``/``schema`` is the schema definition as text (UTF-8), as Pulsar shows it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.responses import admin_of, json_response
from broker.admin.service import AdminService, topic_name
from broker.topics.names import TopicName
from broker.topics.schema_compat import SchemaIncompatible, check_compatible
from broker.topics.schemas import TYPE_BY_NAME, SchemaEntry, SchemaRegistry, schema_id

__all__ = ["add_routes"]

BASE = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
SCHEMA_NOT_FOUND = "Schema not found"


async def _target(request: web.Request) -> tuple[AdminService, SchemaRegistry, TopicName, str]:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    return admin, admin.schemas, tn, schema_id(tn.full)


def _doc(entry: SchemaEntry) -> dict[str, Any]:
    return {"version": entry.version, "type": entry.type_name, "timestamp": entry.timestamp,
            "data": entry.data.decode("utf-8", errors="replace"),
            "properties": entry.properties}


async def get_latest(request: web.Request) -> web.Response:
    _, registry, _, sid = await _target(request)
    entry = await registry.latest(sid)
    if entry is None:
        raise E.not_found(SCHEMA_NOT_FOUND)
    return json_response(_doc(entry))


async def get_version(request: web.Request) -> web.Response:
    _, registry, _, sid = await _target(request)
    try:
        version = int(request.match_info["version"])
    except ValueError:
        raise E.bad_request("Invalid schema version") from None
    entry = await registry.get(sid, version)
    if entry is None:
        raise E.not_found(SCHEMA_NOT_FOUND)
    return json_response(_doc(entry))


async def get_all(request: web.Request) -> web.Response:
    _, registry, _, sid = await _target(request)
    live = await registry.live(sid)
    if not live:
        raise E.not_found(SCHEMA_NOT_FOUND)
    return json_response({"getSchemaResponses": [_doc(e) for e in live]})


def _payload(body: object) -> tuple[str, bytes, dict[str, str]]:
    if not isinstance(body, dict):
        raise E.bad_request("Invalid schema payload: expected a JSON object")
    type_name = str(body.get("type", "NONE")).upper()
    if type_name not in TYPE_BY_NAME:
        raise E.bad_request(f"Invalid schema type: {body.get('type')}")
    schema = body.get("schema", "")
    if not isinstance(schema, str):
        raise E.bad_request("Invalid schema payload: 'schema' must be a string")
    props = body.get("properties") or {}
    if not isinstance(props, dict):
        raise E.bad_request("Invalid schema payload: 'properties' must be an object")
    return type_name, schema.encode("utf-8"), {str(k): str(v) for k, v in props.items()}


async def post_schema(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    admin, registry, tn, sid = await _target(request)
    type_name, data, props = _payload(body)
    strategy = admin.policies.schema_compatibility(tn)
    try:
        version = await registry.put_if_absent(sid, type_name, data, props, strategy)
    except SchemaIncompatible as exc:
        raise E.conflict(str(exc)) from None
    return json_response({"version": {"version": version}})


async def post_compatibility(request: web.Request) -> web.Response:
    body = bodies.load_json(await request.read())
    admin, registry, tn, sid = await _target(request)
    type_name, data, _ = _payload(body)
    strategy = admin.policies.schema_compatibility(tn)
    live = await registry.live(sid)
    against = live if strategy.endswith("_TRANSITIVE") else live[-1:]
    compatible = True
    for entry in against:
        try:
            check_compatible(entry.type_name, entry.data, type_name, data, strategy)
        except SchemaIncompatible:
            compatible = False
    # 202 Accepted, as Pulsar's SchemasResource answers a compatibility check
    return json_response({"compatibility": compatible, "schemaCompatibilityStrategy": strategy},
                         status=202)


async def delete_schema(request: web.Request) -> web.Response:
    _, registry, _, sid = await _target(request)
    version = await registry.delete(sid)
    if version is None:
        raise E.not_found(SCHEMA_NOT_FOUND)
    return json_response({"version": version})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(BASE + "/schema", get_latest)
    r.add_post(BASE + "/schema", post_schema)
    r.add_delete(BASE + "/schema", delete_schema)
    r.add_get(BASE + "/schema/{version}", get_version)
    r.add_get(BASE + "/schemas", get_all)
    r.add_post(BASE + "/compatibility", post_compatibility)
