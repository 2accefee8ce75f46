"""Schemas on the wire: PRODUCER and SUBSCRIBE schemas, GET_SCHEMA and GET_OR_CREATE_SCHEMA.

Theory of operation
-------------------
Called by the connection (GET_SCHEMA, GET_OR_CREATE_SCHEMA, as request tasks), by
:func:`broker.net.producers.create_producer` and by the consumer side's SUBSCRIBE, with the
service's :class:`broker.topics.schemas.SchemaRegistry` and the strategy in force
(:meth:`broker.topics.policies.PolicyStore.schema_compatibility`). Registry refusals
(:class:`broker.topics.schema_compat.SchemaIncompatible`) become IncompatibleSchema errors with
the registry's reason.

GET_SCHEMA needs lookup permission on the topic (produce or consume) and GET_OR_CREATE_SCHEMA
produce permission (:class:`broker.net.handshake.Handshake`): a refusal is the command's own
response with ``AuthorizationError``, answered before anything is read or registered.

Pulsar's rules: a producer without a schema is accepted on any topic and gets no version,
unless schema validation is enforced (``isSchemaValidationEnforced`` or the namespace/topic
``schemaValidationEnforced`` policy) and the topic has a schema: IncompatibleSchema then; a producer with one gets the version of that schema, added if it
is new and compatible - unless schema auto-update is off (``isAllowAutoUpdateSchemaEnabled``,
the namespace's ``isAllowAutoUpdateSchema``): then only an already registered schema is
accepted, any other refused ("Schema not found and schema auto updating is disabled.").
A consumer with a schema adds it (by the same rule) only to an idle topic without schema
(no producer, no connected consumer, no data); otherwise it must be compatible with what is
registered ("Topic does not have schema to check" when nothing is).
"""

from __future__ import annotations

from typing import Protocol

from broker.net.handshake import Handshake
from broker.net.view import ConnectionView
from broker.topics.names import TopicName
from broker.topics.nonpersistent import NonPersistentTopic
from broker.topics.schemas import (
    SchemaIncompatible,
    decode_version,
    encode_version,
    schema_id,
    wire_fields,
)
from broker.topics.service import BrokerService
from broker.topics.shadows import root_source
from broker.topics.topic import Topic
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import IncompatibleSchemaError, RequestError, ServerError

__all__ = ["check_consumer_schema", "get_or_create_schema", "get_schema", "producer_schema"]

NO_SCHEMA = "Topic not found or no-schema"  # Pulsar's exact text
NO_SCHEMA_REFUSED = ("Producers cannot connect or send message without a schema to topics "
                     "with a schema")  # Pulsar's, with schema validation enforced
AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."  # Pulsar's


class SchemaConnection(ConnectionView, Protocol):
    """What the schema lookups need of their connection."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def handshake(self) -> Handshake: ...


def _schema_id(service: BrokerService, topic: str) -> str:
    """The schema key of *topic*: a shadow topic's is its source's (Pulsar's
    PersistentTopic.getSchemaId), so its consumers meet the source's schema."""
    source = root_source(service.policies.records, TopicName.parse(topic))
    return schema_id(source.full if source is not None else topic)


async def producer_schema(service: BrokerService, topic: Topic | NonPersistentTopic,
                          schema: pb.Schema | None) -> bytes | None:
    """The schema version to answer in PRODUCER_SUCCESS (None: a schema-less producer)."""
    if schema is None:
        if (service.policies.schema_validation_enforced(topic.name)
                and await service.schemas.latest(_schema_id(service, topic.full)) is not None):
            raise IncompatibleSchemaError(NO_SCHEMA_REFUSED)
        return None
    type_name, data, properties = wire_fields(schema)
    if not service.policies.allow_auto_update_schema(topic.name):
        found = await service.schemas.version_of(_schema_id(service, topic.full), type_name, data,
                                                 properties)
        if found is None:
            raise IncompatibleSchemaError(AUTO_UPDATE_DISABLED)
        return encode_version(found)
    strategy = service.policies.schema_compatibility(topic.name)
    try:
        version = await service.schemas.put_if_absent(_schema_id(service, topic.full), type_name, data,
                                                      properties, strategy)
    except SchemaIncompatible as exc:
        raise IncompatibleSchemaError(str(exc)) from None
    return encode_version(version)


def _idle(topic: Topic | NonPersistentTopic) -> bool:
    if topic.producers or (isinstance(topic, Topic) and topic.ledger.total_size_bytes):
        return False
    return not any(sub.consumers for sub in topic.subscriptions.values())


async def check_consumer_schema(service: BrokerService, topic: Topic | NonPersistentTopic,
                                schema: pb.Schema) -> None:
    """SUBSCRIBE with a schema: add it to an idle schema-less topic, else check it."""
    registry = service.schemas
    sid = _schema_id(service, topic.full)
    type_name, data, properties = wire_fields(schema)
    strategy = service.policies.schema_compatibility(topic.name)
    try:
        if await registry.latest(sid) is not None or not _idle(topic):
            await registry.check_consumer(sid, type_name, data, strategy)
        elif not service.policies.allow_auto_update_schema(topic.name):
            raise IncompatibleSchemaError(AUTO_UPDATE_DISABLED)  # nothing live to match
        else:
            await registry.put_if_absent(sid, type_name, data, properties, strategy)
    except SchemaIncompatible as exc:
        raise IncompatibleSchemaError(str(exc)) from None


async def get_schema(connection: SchemaConnection, m: pb.CommandGetSchema) -> None:
    rid = int(m.request_id)
    try:
        connection.handshake.require_get_schema(TopicName.parse(m.topic).full)
        sid = _schema_id(connection.service, m.topic)
    except RequestError as exc:
        connection.write(C.encode_get_schema_response(rid, error_code=exc.code,
                                                      error_message=exc.message))
        return
    version: int | None = None
    if m.HasField("schema_version"):
        version = decode_version(bytes(m.schema_version))
        if version is None:
            connection.write(C.encode_get_schema_response(
                rid, error_code=ServerError.TopicNotFound, error_message=NO_SCHEMA))
            return
    entry = await connection.service.schemas.get(sid, version)
    if entry is None:
        connection.write(C.encode_get_schema_response(
            rid, error_code=ServerError.TopicNotFound, error_message=NO_SCHEMA))
        return
    connection.write(C.encode_get_schema_response(
        rid, schema=entry.to_wire(sid.rsplit("/", 1)[-1]),
        schema_version=encode_version(entry.version)))


async def get_or_create_schema(connection: SchemaConnection,
                               m: pb.CommandGetOrCreateSchema) -> None:
    rid = int(m.request_id)
    try:
        name = TopicName.parse(m.topic)
        connection.handshake.require_get_or_create_schema(name.full)
        topic = await connection.service.get_any_topic(name.full, create=False)
        version = await producer_schema(connection.service, topic, m.schema)
    except RequestError as exc:
        connection.write(C.encode_get_or_create_schema_response(
            rid, error_code=exc.code, error_message=exc.message))
        return
    connection.write(C.encode_get_or_create_schema_response(rid, schema_version=version))
