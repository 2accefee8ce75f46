"""PRODUCER on one connection: load the topic, attach a producer, answer PRODUCER_SUCCESS.

Theory of operation
-------------------
Called by :class:`broker.net.connection.ServerConnection` (as a request task) for every
PRODUCER it does not answer from its registry. The topic is loaded (or auto-created), the
producer name's sequence state is recovered *before* PRODUCER_SUCCESS tells the client where
its sequence stands, then the topic decides on access (:meth:`broker.topics.topic.Topic.add_producer`).
A WaitForExclusive producer that cannot have the topic yet is queued by the topic and
answered at once with ``producer_ready=false``; the topic answers again when it promotes it.

The connection owns its producer registries (``producers``, ``waiting_producers``); this
module fills them only through the connection it is handed.
"""

from __future__ import annotations

from typing import Protocol

from broker.topics.names import TopicName
from broker.topics.producer import Producer, ProducerTransport
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ProducerBusyError

__all__ = ["ProducerConnection", "create_producer"]


class ProducerConnection(ProducerTransport, Protocol):
    """The connection a PRODUCER arrived on, with its producer registries."""

    @property
    def service(self) -> BrokerService: ...

    producers: dict[int, Producer]
    waiting_producers: dict[int, Producer]


async def create_producer(connection: ProducerConnection, m: pb.CommandProducer) -> None:
    """Handle PRODUCER: load (or auto-create) the topic, attach, answer PRODUCER_SUCCESS."""
    service = connection.service
    name = TopicName.parse(m.topic)
    # Storage read-only (disk full): ProducerBlockedQuotaExceededException, on which the
    # client fails its pending sends (broker/topics/publish_refusals.py).
    service.publish_refusals.check_producer()
    topic = await service.get_topic(name.full, create=service.config.allow_auto_topic_creation)
    user_provided = m.HasField("producer_name") and m.producer_name != ""
    pname = m.producer_name if user_provided else service.generate_producer_name()
    access_mode = int(m.producer_access_mode) if m.HasField("producer_access_mode") else pb.Shared
    metadata = {kv.key: kv.value for kv in m.metadata}
    # The sequence state of this name must be recovered before PRODUCER_SUCCESS tells the
    # client where its sequence stands (and before its re-sends arrive).
    await topic.dedup.prepare()
    producer = Producer(connection, topic, int(m.producer_id), pname, access_mode,
                        user_provided, metadata, int(m.epoch))
    topic.dedup.attach(producer)
    try:
        topic.add_producer(producer)
    except ProducerBusyError:
        if access_mode != pb.WaitForExclusive:
            raise
        topic.queue_exclusive_waiter(producer, int(m.request_id))
        connection.waiting_producers[producer.producer_id] = producer
        connection.write(C.encode_producer_success(m.request_id, pname, ready=False))
        return
    if connection.is_closed:
        producer.close()
        return
    connection.producers[producer.producer_id] = producer
    connection.write(C.encode_producer_success(m.request_id, pname,
                                               producer.seq_state.persisted))
