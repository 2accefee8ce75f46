"""Non-persistent topics: in memory, at-most-once, as Pulsar's NonPersistentTopic.

Theory of operation
-------------------
A :class:`NonPersistentTopic` has no ledger, no cursor and nothing on disk: a published entry
is handed to every subscription at once (:meth:`broker.subscriptions.nonpersistent.
NonPersistentSubscription.dispatch`: sent to a consumer with permits, or dropped and counted
in ``msgDropRate``) and the SEND_RECEIPT follows in the same call, with Pulsar's
non-persistent message id ``0:0``. A restart loses everything, as in Pulsar.

It is the same :class:`broker.topics.producer.PublishTarget` a persistent topic is, so the
connection's :class:`broker.topics.producer.Producer` serves its SENDs unchanged: an appended
run reports itself "durable" synchronously (:meth:`append_run`), and the producer's drain writes
the receipts right away. There is no deduplication (:class:`_NoDeduplication`: a re-send is
published again, PRODUCER_SUCCESS says ``last_sequence_id = -1``), no delayed-delivery guard (a
``deliver_at_time`` is delivered at once) and no termination. Access modes are those of
persistent topics (:class:`broker.topics.access_modes.ProducerAccess`).

:class:`NonPersistentTopics` is the broker's registry of them (owned by
:class:`broker.topics.service.BrokerService`): a topic is created on first use, within an
existing namespace, and lives until it is deleted or the broker stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS, RateMeter
from broker.subscriptions.nonpersistent import NON_PERSISTENT_ID, NonPersistentSubscription
from broker.subscriptions.selectors import KeySharedSelector, new_selector
from broker.topics.access_modes import Admission, ProducerAccess, ProducerAdmission
from broker.topics.dedup import SequenceState
from broker.topics.names import TopicName
from broker.topics.producer import Producer, ProducerRequest, ProducerTransport
from broker.topics.publish_bounds import NO_BOUNDS, SendBounds
from broker.topics.publish_rate import PublishRateLimiter
from broker.topics.subscribe_rate import SubscribeRateLimiter
from protocol import commands as C
from protocol.errors import (
    NotAllowedError,
    ServiceNotReadyError,
)
from protocol.metadata import check_publish_metadata, parse_metadata, sticky_key_hash
from protocol.sub_types import SubType
from storage.positions import Position
from storage.segment_file import DurableSink

__all__ = ["NonPersistentTopic", "NonPersistentTopics"]

log = logging.getLogger("horae.nonpersistent")


class _NoDeduplication:
    """Pulsar keeps no sequence state on a non-persistent topic: every SEND is published."""

    def resend(self, state: SequenceState, entry: bytes, sequence_id: int,
               key: int) -> tuple[asyncio.Future[Position] | None, int | None]:
        return None, key


class NonPersistentSubscriptions(dict[str, NonPersistentSubscription]):
    """A non-persistent topic's subscriptions by name: created on first use, forgotten when
    deleted (nothing is stored)."""

    def __init__(self, topic: NonPersistentTopic) -> None:
        super().__init__()
        self._topic = topic

    async def get_or_create_subscription(self, name: str, *, durable: bool = True,
                                         initial_position: str = "latest",
                                         start_message_id: tuple[int, int] | None = None,
                                         sub_type: int = 0,
                                         properties: dict[str, str] | None = None,
                                         max_subscriptions: int = 0,
                                         ) -> NonPersistentSubscription:
        topic = self._topic
        if topic.closed:
            raise ServiceNotReadyError(f"Topic {topic.full} is being closed")
        sub = self.get(name)
        if sub is None:
            if 0 < max_subscriptions <= len(self):
                raise NotAllowedError(
                    f"Exceed the maximum number of subscriptions of the topic: {topic.full}")
            sub = self[name] = NonPersistentSubscription(topic, name, properties)
        return sub

    def consumer_count(self) -> int:
        """Consumers attached to all its subscriptions (``maxConsumersPerTopic``)."""
        return sum(len(sub.consumers) for sub in self.values())

    def forget_subscription(self, sub: NonPersistentSubscription) -> None:
        if self.get(sub.name) is sub:
            del self[sub.name]

    def delete_subscription(self, name: str, *, force: bool = False) -> None:
        sub = self.get(name)
        if sub is None:
            raise NotAllowedError(f"Subscription {name} not found")
        if sub.consumers and not force:
            raise NotAllowedError("Subscription has active connected consumers")
        sub.disconnect_consumers()
        self.forget_subscription(sub)


class NonPersistentTopic:
    """One non-persistent topic (or partition); see the module docstring."""

    def __init__(self, name: TopicName, loop: asyncio.AbstractEventLoop, *,
                 key_shared_consistent_hashing: bool = True) -> None:
        self.name = name
        self.key_shared_consistent_hashing = key_shared_consistent_hashing
        self.full = name.full
        self.loop = loop
        self.subscriptions = NonPersistentSubscriptions(self)
        self.admission = ProducerAdmission(self.full, self.producer_success,
                                           lambda: not self.closed)
        self.dedup = _NoDeduplication()
        self.publish_latency_buckets = [0] * (len(PUBLISH_LATENCY_BUCKETS_MS) + 1)
        self.publish_rate = PublishRateLimiter()  # its rate is set at each producer creation
        self.subscribe_rate = SubscribeRateLimiter()  # its rate is set at each SUBSCRIBE
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_added_counter = 0
        self.msg_drop_counter = 0  # messages published while the topic had no subscription
        self._rates = RateMeter()

    @property
    def partition_index(self) -> int:
        return self.name.partition_index

    def dedup_enabled(self) -> bool:
        return False

    # ------------------------------------------------------------------ publish (PublishTarget)

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]:
        if self.closed:
            raise ServiceNotReadyError(f"Topic {self.full} is being closed")
        # the persistent topic's checks (no chunks here: clients chunk persistent topics only)
        _, messages, _ = check_publish_metadata(entry)
        return entry, messages, False

    def send_bounds(self) -> SendBounds:
        """Every SEND takes :meth:`check_publish` (the generic metadata check)."""
        return NO_BOUNDS

    def append_run(self, entries: list[bytes], sink: DurableSink,
                   messages: Sequence[int] = ()) -> None:
        """Dispatch each entry, then report each one "durable" at ``0:0`` (receipts at once)."""
        for entry in entries:
            md = parse_metadata(entry)  # check_publish parsed it already: cannot fail
            self._deliver(entry, md.num_messages_in_batch
                          if md.HasField("num_messages_in_batch") else 1)
        for _ in entries:
            sink.entries_durable(NON_PERSISTENT_ID.ledger_id, NON_PERSISTENT_ID.entry_id, 1)

    def _deliver(self, entry: bytes, messages: int) -> None:
        self.entries_added_counter += 1
        subs = self.subscriptions
        if not subs:
            self.msg_drop_counter += messages
            return
        sticky = 0
        if any(s.sub_type == SubType.Key_Shared for s in subs.values()):  # needs the key's hash
            md = parse_metadata(entry)
            key = md.ordering_key if md.HasField("ordering_key") else \
                md.partition_key.encode() if md.HasField("partition_key") else b""
            sticky = sticky_key_hash(key)
        for sub in list(subs.values()):
            sub.dispatch(entry, messages, sticky)

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None:
        self.msg_in_counter += messages
        self.bytes_in_counter += size

    def on_persistence_failure(self, exc: object) -> None:
        log.error("unexpected publish failure on %s: %s", self.full, exc)

    def publish_refused(self, reason: str, refused: int) -> None:
        log.warning("%d sends refused on %s (%s)", refused, self.full, reason)

    # ------------------------------------------------------------------ producers

    @property
    def producers(self) -> dict[str, Producer]:
        """The attached producers by name (owned by ``self.admission``)."""
        return self.admission.producers

    @property
    def access(self) -> ProducerAccess:
        return self.admission.access

    async def attach_producer(self, transport: ProducerTransport, request: ProducerRequest, *,
                              max_producers: int = 0) -> tuple[Producer, bytes, bool]:
        """Attach by access mode, as :meth:`broker.topics.topic.Topic.attach_producer` (no
        sequence state: nothing is deduplicated here)."""
        producer = Producer(transport, self, request.producer_id, request.name,
                            request.access_mode, request.user_provided_name, request.metadata,
                            request.epoch)
        if self.closed:
            raise ServiceNotReadyError(f"Topic {self.full} is being closed")
        admission = self.admission.add(producer, request.topic_epoch, max_producers)
        if admission is Admission.QUEUE:
            self.admission.queue(producer, request.request_id, request.schema_version)
            return producer, C.encode_producer_success(
                request.request_id, producer.name, -1, request.schema_version,
                ready=False), False
        return producer, self.producer_success(producer, request.request_id,
                                               request.schema_version), True

    def producer_success(self, producer: Producer, request_id: int,
                         schema_version: bytes | None) -> bytes:
        """PRODUCER_SUCCESS of a producer holding the topic (no deduplication: sequence -1)."""
        return self.access.producer_success(request_id, producer, -1, schema_version)

    # ------------------------------------------------------------------ subscriptions

    def new_key_shared_selector(self, sticky: bool) -> KeySharedSelector:
        """A Key_Shared selector with the broker's settings."""
        return new_selector(sticky, consistent_hashing=self.key_shared_consistent_hashing)

    # ------------------------------------------------------------------ lifecycle, stats

    def close(self) -> None:
        """Disconnect every producer and consumer (delete, broker shutdown)."""
        self.closed = True
        for p in list(self.producers.values()):
            p.disconnect()
        for sub in list(self.subscriptions.values()):
            sub.disconnect_consumers()
        self.subscriptions.clear()

    def _counter_values(self) -> tuple[float, ...]:
        return (self.msg_in_counter, self.bytes_in_counter,
                sum(s.msg_out_counter for s in self.subscriptions.values()),
                sum(s.bytes_out_counter for s in self.subscriptions.values()),
                self.msg_drop_counter)

    def sample_rates(self, now: float) -> None:
        self._rates.sample(now, self._counter_values())
        for sub in self.subscriptions.values():
            sub.sample_rates(now)
        self.admission.sample_rates(now)

    def stats(self) -> dict[str, Any]:
        """Pulsar's NonPersistentTopicStats shape."""
        now = self.loop.time()
        rate_in, thr_in, rate_out, thr_out, drop = self._rates.rates(now, self._counter_values())
        publishers = []
        for p in self.producers.values():
            p_rate, p_thr = self.admission.producer_rates(p, now)
            publishers.append({**p.stats(p_rate, p_thr), "msgDropRate": 0.0})
        subs = {name: s.stats() for name, s in self.subscriptions.items()}
        drop_total = drop + sum(s["msgDropRate"] for s in subs.values())
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": thr_in,
            "msgRateOut": rate_out,
            "msgThroughputOut": thr_out,
            "bytesInCounter": self.bytes_in_counter,
            "msgInCounter": self.msg_in_counter,
            "bytesOutCounter": sum(s.bytes_out_counter for s in self.subscriptions.values()),
            "msgOutCounter": sum(s.msg_out_counter for s in self.subscriptions.values()),
            "averageMsgSize": self.bytes_in_counter / self.msg_in_counter
            if self.msg_in_counter else 0.0,
            "msgChunkPublished": False,
            "storageSize": 0,
            "backlogSize": 0,
            "earliestMsgPublishTimeInBacklogs": 0,
            "offloadedStorageSize": 0,
            "waitingPublishers": self.admission.waiting,
            "msgDropRate": drop_total,
            "publishers": publishers,
            "subscriptions": subs,
            "replication": {},
            "deduplicationStatus": "Disabled",
            "topicEpoch": self.access.topic_epoch,
            "nonContiguousDeletedMessagesRanges": 0,
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        }

    def __repr__(self) -> str:
        return f"<NonPersistentTopic {self.full}>"


class NonPersistentTopics:
    """The broker's non-persistent topics by full name (owned by the BrokerService)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *,
                 key_shared_consistent_hashing: bool = True) -> None:
        self.loop = loop
        self.key_shared_consistent_hashing = key_shared_consistent_hashing
        self.topics: dict[str, NonPersistentTopic] = {}

    def get(self, name: TopicName) -> NonPersistentTopic | None:
        return self.topics.get(name.full)

    def get_or_create(self, name: TopicName) -> NonPersistentTopic:
        topic = self.topics.get(name.full)
        if topic is None:
            topic = self.topics[name.full] = NonPersistentTopic(
                name, self.loop, key_shared_consistent_hashing=self.key_shared_consistent_hashing)
        return topic

    def delete(self, full: str) -> bool:
        topic = self.topics.pop(full, None)
        if topic is None:
            return False
        topic.close()
        return True

    def sample_rates(self, now: float) -> None:
        for topic in list(self.topics.values()):
            topic.sample_rates(now)

    def close(self) -> None:
        for topic in list(self.topics.values()):
            topic.close()
        self.topics.clear()
