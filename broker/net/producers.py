"""PRODUCER and CLOSE_PRODUCER on one connection: load the topic, attach, answer.

Theory of operation
-------------------
:func:`handle_producer` is called by :class:`broker.net.connection.ServerConnection` for every
PRODUCER: a retried creation is answered from the connection's registry, a concurrent one is
refused, the role must be allowed to produce (:class:`broker.net.handshake.Handshake`; refused:
ERROR AuthorizationError), then :func:`create_producer` runs as a request task. The topic is
loaded (or auto-created), the producer's schema is registered or checked
(:mod:`broker.net.schemas`), the producer's initial subscription is created when it names one
(``initial_subscription_name``, what the Java client's dead-letter producer sends for
``DeadLetterPolicy.initialSubscriptionName``: a durable subscription at the earliest position
on a persistent topic that lacks it, so nothing published before its first consumer is lost;
the role must be allowed to produce and to consume that subscription), then the topic attaches
the producer, the one way a producer joins a topic
(:meth:`broker.topics.topic.Topic.attach_producer`: its state, the name's sequence state
recovered *before* PRODUCER_SUCCESS tells the client where its sequence stands, access modes
by :mod:`broker.topics.access_modes`) and hands back the answer.
A WaitForExclusive producer that cannot have the topic yet is queued by the topic and
answered at once with ``producer_ready=false``; the topic answers again when it promotes it.

The connection's :class:`broker.net.producer_side.ProducerSide` owns its producer registries
(``producers``, ``waiting_producers``) and is the producers' transport; this module fills the
registries of the connection it is handed.
"""

from __future__ import annotations

from typing import Protocol

from broker.net.handshake import Handshake
from broker.net.producer_side import ProducerSide
from broker.net.schemas import producer_schema
from broker.net.view import ConnectionView
from broker.topics.names import TopicName
from broker.topics.producer import ProducerRequest
from broker.topics.service import BrokerService
from broker.topics.topic import Topic
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import MetadataError, RequestError, ServerError

__all__ = ["ProducerConnection", "create_initial_subscription", "create_producer",
           "handle_close_producer", "handle_producer"]


class ProducerConnection(ConnectionView, Protocol):
    """The connection a PRODUCER arrived on, with its producer side."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def handshake(self) -> Handshake: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def producer_side(self) -> ProducerSide: ...


def handle_producer(connection: ProducerConnection, m: pb.CommandProducer) -> None:
    """PRODUCER: registry answers, authorization, then :func:`create_producer` as a task."""
    pid = int(m.producer_id)
    existing = connection.producer_side.producers.get(pid)
    if existing is not None and existing.blocked:
        # Closed by the broker while storage is read-only; the client re-creates it.
        del connection.producer_side.producers[pid]
        existing = None
    if existing is not None:
        # The client retried a creation whose answer it missed: same answer again.
        connection.write(C.encode_producer_success(m.request_id, existing.name, -1))
        return
    if pid in connection.producer_side.producers_creating:
        connection.write(C.encode_error(m.request_id, ServerError.ServiceNotReady,
                                        "Producer is already being created on this connection"))
        return
    topic_name = TopicName.parse(m.topic).full
    connection.handshake.require_produce(topic_name)  # RequestError -> ERROR
    if m.initial_subscription_name:
        # creating it is subscribing on the client's behalf (Pulsar: TopicOperation.SUBSCRIBE)
        connection.handshake.require_consume(topic_name, m.initial_subscription_name)
    connection.producer_side.producers_creating.add(pid)

    async def run() -> None:
        try:
            await create_producer(connection, m)
        finally:
            connection.producer_side.producers_creating.discard(pid)

    connection.spawn(run(), m.request_id)


def handle_close_producer(connection: ProducerConnection, m: pb.CommandCloseProducer) -> None:
    producer = connection.producer_side.producers.pop(m.producer_id, None)
    waiting = connection.producer_side.waiting_producers.pop(m.producer_id, None)
    if waiting is not None:
        waiting.abandon()
    rid = m.request_id

    async def run() -> None:
        if producer is not None:
            await producer.close_gracefully()
        connection.write(C.encode_success(rid))

    connection.spawn(run(), rid)


async def create_producer(connection: ProducerConnection, m: pb.CommandProducer) -> None:
    """Handle PRODUCER: load (or auto-create) the topic, register or check the schema, create
    the initial subscription, then the topic attaches the producer
    (:meth:`broker.topics.topic.Topic.attach_producer`) and this answers."""
    service = connection.service
    name = TopicName.parse(m.topic)
    # Storage read-only (disk full): ProducerBlockedQuotaExceededException, on which the
    # client fails its pending sends (broker/topics/publish_refusals.py).
    service.publish_refusals.check_producer()
    topic = await service.get_any_topic(
        name.full, create=service.policies.auto_topic_creation(name).allowed)
    topic.publish_rate.rate = service.policies.limits.publish_rate(name)
    service.policies.resource_groups.attach(name.namespace, topic)
    if isinstance(topic, Topic):
        topic.max_message_size_policy = service.policies.limits.topic_max_message_size(name)
    max_producers = service.policies.limits.max_producers_per_topic(name)
    topic.admission.check_limit(max_producers)  # early, before the work; attaching decides
    user_provided = m.HasField("producer_name") and m.producer_name != ""
    encryption_required = service.policies.encryption_required(name)
    # Pulsar's check, with its broker-wide switch (never on system topics)
    if not m.encrypted and (encryption_required or (
            service.config.encryption_require_on_producer
            and not name.local_name.startswith("__"))):
        raise MetadataError(f"Encryption is required in {name.full}")
    if isinstance(topic, Topic):
        topic.encryption_required = encryption_required
    schema_version = await producer_schema(service, topic,
                                           m.schema if m.HasField("schema") else None)
    if m.initial_subscription_name and isinstance(topic, Topic):
        await create_initial_subscription(topic, m.initial_subscription_name)
    request = ProducerRequest(
        producer_id=int(m.producer_id), request_id=int(m.request_id),
        name=m.producer_name if user_provided else service.generate_producer_name(),
        user_provided_name=user_provided,
        access_mode=int(m.producer_access_mode) if m.HasField("producer_access_mode")
        else pb.Shared,
        metadata={kv.key: kv.value for kv in m.metadata}, epoch=int(m.epoch),
        topic_epoch=int(m.topic_epoch) if m.HasField("topic_epoch") else None,
        schema_version=schema_version)
    producer, answer, attached = await topic.attach_producer(connection.producer_side, request,
                                                             max_producers=max_producers)
    producer.encrypted = bool(m.encrypted)
    if not attached:
        connection.producer_side.waiting_producers[producer.producer_id] = producer
        connection.write(answer)
        return
    if connection.is_closed:
        producer.close()
        return
    connection.producer_side.producers[producer.producer_id] = producer
    connection.write(answer)


async def create_initial_subscription(topic: Topic, name: str) -> None:
    """The producer's initial subscription: durable, at the earliest position, made once.

    Refused as Pulsar refuses it: the subscription's error code, the message prefixed with
    "Failed to create the initial subscription: "."""
    if name in topic.subscriptions:
        return
    try:
        await topic.subscriptions.get_or_create_subscription(name, durable=True, initial_position="earliest")
    except RequestError as exc:
        raise RequestError(f"Failed to create the initial subscription: {exc.message}",
                           exc.code) from exc
