"""The schema registry: every topic's schema versions, durable in the metadata store.

Theory of operation
-------------------
One :class:`SchemaRegistry` per broker, owned by the service (``service.schemas``); the
binary commands (PRODUCER, SUBSCRIBE, GET_SCHEMA, GET_OR_CREATE_SCHEMA) and the admin API
(``/admin/v2/schemas/...``) go through it.

Schemas are keyed as Pulsar keys them (:func:`schema_id`): ``tenant/ns/topic`` with no
domain and no partition suffix, so the partitions of a topic share one history. A history is
a list of :class:`SchemaEntry`; an entry's version is its index, sent on the wire as an
8-byte big-endian long (Pulsar's LongSchemaVersion: version 0 is ``00 .. 00``). A deletion
appends a *deleted* entry; versions after it start a new line that is not checked against
the older ones (Pulsar's behaviour after ``DELETE .../schema``). The whole history is one
metadata record (kind ``"schema"``), written before the new version is answered; a
per-schema lock serializes concurrent additions so two producers cannot both create
"version n".

Adding (:meth:`put_if_absent`, producers and GET_OR_CREATE_SCHEMA): a schema equal to one
of the live versions (same type, definition and properties) gets that version back;
otherwise it is checked against the latest live version (the ``*_TRANSITIVE`` strategies:
against every live version) under the strategy in force (namespace/topic
``schemaCompatibilityStrategy``, broker default FULL) and appended. Consumers
(:meth:`check_consumer`) never add to a topic that has a schema: BACKWARD against the
latest for BACKWARD/FORWARD/FULL/FORWARD_TRANSITIVE, the strategy against all otherwise, as
Pulsar's ``checkConsumerCompatibility``.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from broker.topics.names import TopicName
from broker.topics.schema_compat import SchemaIncompatible, check_compatible
from protocol import pulsar_pb as pb
from storage.metadata import MetadataStore

__all__ = ["KIND", "TYPE_BY_NAME", "TYPE_NAMES", "SchemaEntry", "SchemaIncompatible",
           "SchemaRegistry", "decode_version", "encode_version", "schema_id", "wire_fields"]

KIND = "schema"

#: Wire Schema.Type -> Pulsar's SchemaType name (REST and error texts).
TYPE_NAMES: dict[int, str] = {
    0: "NONE",  # Schema.Type.None (a Python keyword as an attribute)
    pb.Schema.String: "STRING", pb.Schema.Json: "JSON", pb.Schema.Protobuf: "PROTOBUF",
    pb.Schema.Avro: "AVRO", pb.Schema.Bool: "BOOLEAN", pb.Schema.Int8: "INT8",
    pb.Schema.Int16: "INT16", pb.Schema.Int32: "INT32", pb.Schema.Int64: "INT64",
    pb.Schema.Float: "FLOAT", pb.Schema.Double: "DOUBLE", pb.Schema.Date: "DATE",
    pb.Schema.Time: "TIME", pb.Schema.Timestamp: "TIMESTAMP", pb.Schema.KeyValue: "KEY_VALUE",
    pb.Schema.Instant: "INSTANT", pb.Schema.LocalDate: "LOCAL_DATE",
    pb.Schema.LocalTime: "LOCAL_TIME", pb.Schema.LocalDateTime: "LOCAL_DATE_TIME",
    pb.Schema.ProtobufNative: "PROTOBUF_NATIVE",
}
TYPE_BY_NAME: dict[str, int] = {name: code for code, name in TYPE_NAMES.items()}
TYPE_BY_NAME["BYTES"] = TYPE_BY_NAME["NONE"]

_VERSION = struct.Struct(">q")


def encode_version(version: int) -> bytes:
    return _VERSION.pack(version)


def decode_version(raw: bytes) -> int | None:
    """A wire schema version (8-byte big-endian long), None when it is not one."""
    if len(raw) != _VERSION.size:
        return None
    return int(_VERSION.unpack(raw)[0])


def schema_id(topic: str) -> str:
    """Pulsar's schema key of a topic: ``tenant/ns/local`` without domain or partition."""
    tn = TopicName.parse(topic)
    parent = TopicName.parse(tn.partitioned_parent)
    return f"{parent.namespace}/{parent.local_name}"


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    version: int
    type_name: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0
    deleted: bool = False

    def same_schema(self, type_name: str, data: bytes, properties: dict[str, str]) -> bool:
        return (not self.deleted and self.type_name == type_name and self.data == data
                and self.properties == properties)

    def to_wire(self, name: str) -> pb.Schema:
        schema = pb.Schema(name=name, schema_data=self.data,
                           type=TYPE_BY_NAME.get(self.type_name, 0))  # type: ignore[arg-type]
        for k, v in sorted(self.properties.items()):
            schema.properties.add(key=k, value=v)
        return schema

    def to_record(self) -> dict[str, Any]:
        return {"type": self.type_name, "data": base64.b64encode(self.data).decode(),
                "properties": self.properties, "timestamp": self.timestamp,
                "deleted": self.deleted}

    @staticmethod
    def from_record(version: int, rec: dict[str, Any]) -> SchemaEntry:
        return SchemaEntry(version, str(rec["type"]), base64.b64decode(rec["data"]),
                           dict(rec.get("properties") or {}), int(rec.get("timestamp", 0)),
                           bool(rec.get("deleted", False)))


def wire_fields(schema: pb.Schema) -> tuple[str, bytes, dict[str, str]]:
    """(type name, definition, properties) of a wire Schema."""
    return (TYPE_NAMES.get(int(schema.type), "NONE"), bytes(schema.schema_data),
            {kv.key: kv.value for kv in schema.properties})


class SchemaRegistry:
    """Schema histories by schema id (see the module docstring)."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._md = metadata
        self._cache: dict[str, list[SchemaEntry]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def history(self, sid: str) -> list[SchemaEntry]:
        cached = self._cache.get(sid)
        if cached is not None:
            return cached
        rec = await self._md.get(KIND, sid)
        entries = [SchemaEntry.from_record(i, r) for i, r in enumerate((rec or {}).get(
            "versions", []))]
        self._cache[sid] = entries
        return entries

    async def _save(self, sid: str, entries: list[SchemaEntry]) -> None:
        await self._md.put(KIND, sid, {"versions": [e.to_record() for e in entries]})
        self._cache[sid] = entries

    @staticmethod
    def _live(entries: list[SchemaEntry]) -> list[SchemaEntry]:
        """The versions since the last deletion (none when the latest is a deletion)."""
        for i in range(len(entries) - 1, -1, -1):
            if entries[i].deleted:
                return entries[i + 1:]
        return entries

    async def live(self, sid: str) -> list[SchemaEntry]:
        """The versions since the last deletion, oldest first."""
        return self._live(await self.history(sid))

    async def latest(self, sid: str) -> SchemaEntry | None:
        live = self._live(await self.history(sid))
        return live[-1] if live else None

    async def get(self, sid: str, version: int | None = None) -> SchemaEntry | None:
        """The latest live version, or *version* if it is live: a version from before the last
        deletion is gone, as in Pulsar's getSchema(id, version), which looks only among the
        versions since the last deletion (None when unknown or deleted)."""
        if version is None:
            return await self.latest(sid)
        for entry in self._live(await self.history(sid)):
            if entry.version == version:
                return entry
        return None

    async def version_of(self, sid: str, type_name: str, data: bytes,
                         properties: dict[str, str]) -> int | None:
        """The live version holding exactly this schema (None: not registered)."""
        for entry in self._live(await self.history(sid)):
            if entry.same_schema(type_name, data, properties):
                return entry.version
        return None

    async def put_if_absent(self, sid: str, type_name: str, data: bytes,
                            properties: dict[str, str], strategy: str) -> int:
        """The version of this schema, added when new and compatible; raises
        SchemaIncompatible."""
        lock = self._locks.setdefault(sid, asyncio.Lock())
        async with lock:
            entries = await self.history(sid)
            live = self._live(entries)
            for entry in live:
                if entry.same_schema(type_name, data, properties):
                    return entry.version
            against = live if strategy.endswith("_TRANSITIVE") else live[-1:]
            for entry in against:
                check_compatible(entry.type_name, entry.data, type_name, data, strategy)
            new = SchemaEntry(len(entries), type_name, data, properties,
                              int(time.time() * 1000))
            await self._save(sid, [*entries, new])
            return new.version

    async def check_consumer(self, sid: str, type_name: str, data: bytes,
                             strategy: str) -> None:
        """A consumer's schema on a topic that has one: raises SchemaIncompatible."""
        if strategy == "ALWAYS_COMPATIBLE":
            return
        live = self._live(await self.history(sid))
        if not live:
            raise SchemaIncompatible("Topic does not have schema to check")
        if any(e.same_schema(type_name, data, e.properties) for e in live):
            return
        if strategy in ("BACKWARD", "FORWARD", "FULL", "FORWARD_TRANSITIVE"):
            check_compatible(live[-1].type_name, live[-1].data, type_name, data, "BACKWARD")
            return
        for entry in live:
            check_compatible(entry.type_name, entry.data, type_name, data, strategy)

    async def delete(self, sid: str) -> int | None:
        """Mark the schema deleted (a new version); None when there is no live schema."""
        lock = self._locks.setdefault(sid, asyncio.Lock())
        async with lock:
            entries = await self.history(sid)
            if not self._live(entries):
                return None
            marker = SchemaEntry(len(entries), "NONE", b"", {}, int(time.time() * 1000),
                                 deleted=True)
            await self._save(sid, [*entries, marker])
            return marker.version

    async def drop(self, sid: str) -> None:
        """Forget the whole history (the topic was deleted)."""
        self._cache.pop(sid, None)
        await self._md.delete(KIND, sid)

