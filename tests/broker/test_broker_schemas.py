"""Schema registry: versions, compatibility strategies, GET_SCHEMA / GET_OR_CREATE_SCHEMA and REST."""

from __future__ import annotations

import json
import struct
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from broker_rawclient import RawClient
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from broker.topics.schema_compat import SchemaIncompatible, can_read, check_compatible
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
NS = "/admin/v2/namespaces/public/default"


class Point(Record):
    x = Integer()
    y = Integer()


class BadPoint(Record):
    x = String()
    y = Integer()


class UserV1(Record):
    name = String()
    age = Integer()


class UserV2(Record):
    name = String()
    age = Integer(required=True)


def _http(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    return status, json.loads(payload) if payload else None


def _version(raw: bytes) -> int:
    return int(struct.unpack(">q", raw)[0])


# --- compatibility rules (pure) -----------------------------------------------------------
def test_avro_resolution_rules() -> None:
    rec = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    wider = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    assert can_read(wider, rec) is None  # int promotes to long
    assert can_read(rec, wider) is not None  # long does not narrow to int
    extra = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}
    assert can_read(rec, extra) is None  # the writer's extra field is skipped
    reason = can_read(extra, rec)
    assert reason is not None and "'b' has no default" in reason
    defaulted = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}]}
    assert can_read(defaulted, rec) is None


def test_strategies_and_type_mismatch() -> None:
    v1 = json.dumps(UserV1.schema()).encode()
    v2 = json.dumps(UserV2.schema()).encode()
    check_compatible("AVRO", v1, "AVRO", v2, "FORWARD")
    with pytest.raises(SchemaIncompatible) as backward:
        check_compatible("AVRO", v1, "AVRO", v2, "BACKWARD")
    assert "BACKWARD" in str(backward.value)
    with pytest.raises(SchemaIncompatible) as mismatch:
        check_compatible("JSON", v1, "STRING", b"", "FULL")
    assert str(mismatch.value) == "Incompatible schema: exists schema type JSON, new schema type STRING"
    check_compatible("JSON", v1, "STRING", b"", "ALWAYS_COMPATIBLE")


# --- the official client ------------------------------------------------------------------
def test_first_schema_is_version_zero_and_messages_carry_it(client: Any) -> None:
    topic = "persistent://public/default/sch-version"
    producer = client.create_producer(topic, schema=AvroSchema(Point))
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Point))
    producer.send(Point(x=1, y=2))
    msg = consumer.receive(5000)
    assert msg.schema_version().encode() == b"\x00" * 8
    assert msg.value() == Point(x=1, y=2)


def test_incompatible_producer_and_consumers_are_refused(client: Any) -> None:
    topic = "persistent://public/default/sch-incompatible"
    client.create_producer(topic, schema=JsonSchema(Point))
    for schema in (JsonSchema(BadPoint), StringSchema(), AvroSchema(Point)):
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(topic, "s", schema=schema)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(BadPoint))
    consumer = client.subscribe(topic, "s", schema=JsonSchema(Point))
    consumer.close()


def test_namespace_strategy_allows_evolution_and_readers_decode_old_versions(
        broker: Any, client: Any) -> None:
    status, _ = _http(broker.web_url, "PUT", f"{NS}/schemaCompatibilityStrategy", "FORWARD")
    assert status == 204
    topic = "persistent://public/default/sch-evolve"
    p1 = client.create_producer(topic, schema=AvroSchema(UserV1))
    consumer = client.subscribe(topic, "s", schema=AvroSchema(UserV1))
    p2 = client.create_producer(topic, schema=AvroSchema(UserV2))
    p1.send(UserV1(name="a", age=1))
    p2.send(UserV2(name="b", age=2))
    first, second = consumer.receive(5000), consumer.receive(5000)
    assert (first.value().name, second.value().name) == ("a", "b")
    assert _version(second.schema_version().encode()) == 1
    status, doc = _http(broker.web_url, "GET", "/admin/v2/schemas/public/default/sch-evolve/schemas")
    assert status == 200 and [d["version"] for d in doc["getSchemaResponses"]] == [0, 1]


# --- the wire -----------------------------------------------------------------------------
def test_get_schema_by_version_and_get_or_create(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/sch-wire"
    client.create_producer(topic, schema=StringSchema())
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        cmd = T(type=T.GET_SCHEMA)
        cmd.getSchema.request_id = 5
        cmd.getSchema.topic = topic
        cmd.getSchema.schema_version = struct.pack(">q", 0)
        got = raw.request(C.encode_command(cmd)).getSchemaResponse
        cmd.getSchema.schema_version = struct.pack(">q", 9)
        missing = raw.request(C.encode_command(cmd)).getSchemaResponse
        create = T(type=T.GET_OR_CREATE_SCHEMA)
        create.getOrCreateSchema.request_id = 6
        create.getOrCreateSchema.topic = topic
        create.getOrCreateSchema.schema.name = "x"
        create.getOrCreateSchema.schema.schema_data = json.dumps(Point.schema()).encode()
        create.getOrCreateSchema.schema.type = pb.Schema.Avro
        refused = raw.request(C.encode_command(create)).getOrCreateSchemaResponse
    assert got.schema.type == pb.Schema.String and _version(got.schema_version) == 0
    assert missing.error_code == ServerError.TopicNotFound
    assert missing.error_message == "Topic not found or no-schema"
    assert refused.error_code == ServerError.IncompatibleSchema


# --- REST ---------------------------------------------------------------------------------
def test_rest_post_get_delete(broker: Any) -> None:
    base = "/admin/v2/schemas/public/default/sch-rest"
    assert _http(broker.web_url, "GET", base + "/schema")[0] == 404
    definition = json.dumps(Point.schema())
    status, posted = _http(broker.web_url, "POST", base + "/schema",
                           {"type": "AVRO", "schema": definition, "properties": {"k": "v"}})
    assert status == 200 and posted == {"version": {"version": 0}}
    status, doc = _http(broker.web_url, "GET", base + "/schema")
    assert status == 200
    assert (doc["version"], doc["type"], doc["data"], doc["properties"]) == \
        (0, "AVRO", definition, {"k": "v"})
    bad = json.dumps(BadPoint.schema())
    status, conflict = _http(broker.web_url, "POST", base + "/schema",
                             {"type": "AVRO", "schema": bad})
    assert status == 409 and "Incompatible schema" in conflict["reason"]
    status, check = _http(broker.web_url, "POST", base + "/compatibility",
                          {"type": "AVRO", "schema": bad})
    assert status == 202  # Accepted, as Pulsar answers a compatibility check
    assert check == {"compatibility": False, "schemaCompatibilityStrategy": "FULL"}
    assert _http(broker.web_url, "DELETE", base + "/schema") == (200, {"version": 1})
    assert _http(broker.web_url, "GET", base + "/schema")[0] == 404
    # After a deletion a new line starts, unchecked against the deleted one.
    status, again = _http(broker.web_url, "POST", base + "/schema", {"type": "AVRO", "schema": bad})
    assert status == 200 and again == {"version": {"version": 2}}


def test_key_value_schemas_show_over_rest_as_pulsar_shows_them(broker: Any) -> None:
    """A producer's KEY_VALUE schema is [len][key][len][value] with the sides' types in its
    properties; Pulsar's REST shows it as {"key": <JSON schema or "">, "value": ...}, which the
    C++ client's HTTP lookup parses (it waits forever on anything else)."""
    topic = "persistent://public/default/sch-kv"
    point = json.dumps(Point.schema()).encode()
    stored = struct.pack(">i", len(point)) + point + struct.pack(">i", 0)
    props = {"key.schema.type": "JSON", "value.schema.type": "STRING", "kv.encoding.type": "INLINE"}
    assert _http(broker.web_url, "PUT", "/admin/v2/persistent/public/default/sch-kv")[0] == 204
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        create = T(type=T.GET_OR_CREATE_SCHEMA)
        create.getOrCreateSchema.request_id = 7
        create.getOrCreateSchema.topic = topic
        create.getOrCreateSchema.schema.name = "kv"
        create.getOrCreateSchema.schema.schema_data = stored
        create.getOrCreateSchema.schema.type = pb.Schema.KeyValue
        for k, v in props.items():
            create.getOrCreateSchema.schema.properties.add(key=k, value=v)
        assert not raw.request(C.encode_command(create)).getOrCreateSchemaResponse.HasField(
            "error_code")
    status, doc = _http(broker.web_url, "GET", "/admin/v2/schemas/public/default/sch-kv/schema")
    assert status == 200 and doc["type"] == "KEY_VALUE" and doc["properties"] == props
    assert json.loads(doc["data"]) == {"key": Point.schema(), "value": ""}

    # An upload in the shown form is stored in the clients' form (a producer with it matches).
    base = "/admin/v2/schemas/public/default/sch-kv-rest"
    status, _ = _http(broker.web_url, "POST", base + "/schema",
                      {"type": "KEY_VALUE", "schema": doc["data"], "properties": props})
    assert status == 200
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        cmd = T(type=T.GET_SCHEMA)
        cmd.getSchema.request_id = 8
        cmd.getSchema.topic = "persistent://public/default/sch-kv-rest"
        got = raw.request(C.encode_command(cmd)).getSchemaResponse
    key_len = struct.unpack(">i", got.schema.schema_data[:4])[0]
    assert json.loads(got.schema.schema_data[4:4 + key_len]) == Point.schema()
    assert got.schema.schema_data[4 + key_len:] == struct.pack(">i", 0)
    assert _http(broker.web_url, "GET", base + "/schema")[1]["data"] == doc["data"]
    status, bad = _http(broker.web_url, "POST", base + "-bad/schema",
                        {"type": "KEY_VALUE", "schema": "not json"})
    assert status == 400 and "KEY_VALUE" in bad["reason"]


def test_versions_from_before_a_deletion_are_gone_as_in_pulsar(broker: Any) -> None:
    """Pulsar's getSchema(id, version) looks only among the versions since the last deletion,
    so a consumer decoding a message of a deleted schema gets an error (the Go suite's
    TestProducerWithSchemaAndConsumerSchemaNotFound)."""
    base = "/admin/v2/schemas/public/default/sch-deleted"
    definition = json.dumps(Point.schema())
    assert _http(broker.web_url, "POST", base + "/schema",
                 {"type": "AVRO", "schema": definition})[0] == 200
    assert _http(broker.web_url, "GET", base + "/schema/0")[0] == 200
    assert _http(broker.web_url, "DELETE", base + "/schema")[0] == 200
    assert _http(broker.web_url, "GET", base + "/schema/0")[0] == 404
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        cmd = T(type=T.GET_SCHEMA)
        cmd.getSchema.request_id = 9
        cmd.getSchema.topic = "persistent://public/default/sch-deleted"
        cmd.getSchema.schema_version = struct.pack(">q", 0)
        gone = raw.request(C.encode_command(cmd)).getSchemaResponse
    assert gone.error_code == ServerError.TopicNotFound
    assert _http(broker.web_url, "POST", base + "/schema",
                 {"type": "AVRO", "schema": definition}) == (200, {"version": {"version": 2}})
    assert _http(broker.web_url, "GET", base + "/schema/2")[0] == 200
    assert _http(broker.web_url, "GET", base + "/schema/0")[0] == 404


def test_version_of_a_schema_definition(broker: Any) -> None:
    base = "/admin/v2/schemas/public/default/sch-version-of"
    point = {"type": "AVRO", "schema": json.dumps(Point.schema())}
    assert _http(broker.web_url, "POST", base + "/version", point) == (200, {"version": -1})
    assert _http(broker.web_url, "POST", base + "/schema", point)[0] == 200
    assert _http(broker.web_url, "POST", base + "/version", point) == (200, {"version": 0})
    other = {"type": "AVRO", "schema": json.dumps(UserV1.schema())}
    assert _http(broker.web_url, "POST", base + "/version", other) == (200, {"version": -1})
    as_json = {**point, "type": "JSON"}  # the same text under another type is another schema
    assert _http(broker.web_url, "POST", base + "/version", as_json) == (200, {"version": -1})
