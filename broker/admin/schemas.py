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
- ``POST .../version`` with a schema payload: ``{"version": n}`` of the live version with that
  definition, ``-1`` when none has it;
- ``DELETE .../schema``: ``{"version": n}`` (the deletion marker's version).

``data``/``schema`` is the schema definition as text (UTF-8), as Pulsar shows it. A KEY_VALUE
schema is stored as the clients send it (Pulsar's KeyValueSchemaInfo: a big-endian int32 length
and the key schema, then the same for the value; their types in the ``key.schema.type`` /
``value.schema.type`` properties) and shown as Pulsar's SchemasResource shows it:
``{"key": ..., "value": ...}`` with each JSON-typed side parsed and a primitive side ``""``
(the C++ client's HTTP lookup reads exactly that); a KEY_VALUE upload in that form is stored in
the binary one.
"""

from __future__ import annotations

import json
import struct
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


#: Pulsar's SchemaType.isPrimitiveType: a key or value of these types shows as "".
_PRIMITIVE = frozenset({
    "NONE", "BYTES", "STRING", "BOOLEAN", "INT8", "INT16", "INT32", "INT64", "FLOAT", "DOUBLE",
    "DATE", "TIME", "TIMESTAMP", "INSTANT", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME"})
_LENGTH = struct.Struct(">i")


def _key_value_sides(data: bytes) -> tuple[bytes, bytes] | None:
    """The key and value schemas of a stored KEY_VALUE schema; None if it is not that layout."""
    sides = []
    at = 0
    for _ in range(2):
        if at + 4 > len(data):
            return None
        (length,) = _LENGTH.unpack_from(data, at)
        at += 4
        if length < 0:  # -1: none
            sides.append(b"")
            continue
        if at + length > len(data):
            return None
        sides.append(data[at:at + length])
        at += length
    return (sides[0], sides[1]) if at == len(data) else None


def _key_value_text(data: bytes, properties: dict[str, str]) -> str:
    """A stored KEY_VALUE schema as Pulsar's REST shows it (convertKeyValueSchemaInfoDataToString)."""
    sides = _key_value_sides(data)
    if sides is None:
        return data.decode("utf-8", errors="replace")
    shown: dict[str, Any] = {}
    for name, side in zip(("key", "value"), sides, strict=True):
        if properties.get(f"{name}.schema.type", "BYTES") in _PRIMITIVE:
            shown[name] = ""
            continue
        text = side.decode("utf-8", errors="replace")
        try:
            shown[name] = json.loads(text)
        except ValueError:
            shown[name] = text
    return json.dumps(shown, separators=(",", ":"))


def _key_value_data(schema: str) -> bytes:
    """An uploaded KEY_VALUE ``schema`` (``{"key": ..., "value": ...}``) as stored (Pulsar's
    convertKeyValueDataStringToSchemaInfoSchema: each side's JSON, ``""`` for none)."""
    try:
        doc = json.loads(schema)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "key" not in doc or "value" not in doc:
        raise E.bad_request('Invalid KEY_VALUE schema: expected {"key": ..., "value": ...}')
    out = bytearray()
    for side in (doc["key"], doc["value"]):
        raw = b"" if side == "" else json.dumps(side, separators=(",", ":")).encode("utf-8")
        out += _LENGTH.pack(len(raw)) + raw
    return bytes(out)


def _doc(entry: SchemaEntry) -> dict[str, Any]:
    data = (_key_value_text(entry.data, entry.properties) if entry.type_name == "KEY_VALUE"
            else entry.data.decode("utf-8", errors="replace"))
    return {"version": entry.version, "type": entry.type_name, "timestamp": entry.timestamp,
            "data": data, "properties": entry.properties}


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
    data = _key_value_data(schema) if type_name == "KEY_VALUE" else schema.encode("utf-8")
    return type_name, data, {str(k): str(v) for k, v in props.items()}


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


async def post_version(request: web.Request) -> web.Response:
    """Pulsar's getVersionBySchema: the live version with this type and definition,
    ``{"version": -1}`` when there is none."""
    body = bodies.load_json(await request.read())
    _, registry, _, sid = await _target(request)
    type_name, data, _ = _payload(body)
    for entry in await registry.live(sid):
        if entry.type_name == type_name and entry.data == data:
            return json_response({"version": entry.version})
    return json_response({"version": -1})


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
    r.add_post(BASE + "/version", post_version)
