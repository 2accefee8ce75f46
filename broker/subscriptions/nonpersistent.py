"""Subscriptions of non-persistent topics: at-most-once dispatch, a message dropped when no
consumer can take it now.

Theory of operation
-------------------
A :class:`NonPersistentSubscription` belongs to one
:class:`broker.topics.nonpersistent.NonPersistentTopic`; it has no cursor, no backlog, no
redelivery and no delayed delivery, as Pulsar's NonPersistentSubscription and its
NonPersistentDispatcher* classes. The topic hands it every published entry once
(:meth:`NonPersistentSubscription.dispatch`), in publish order, and it either sends the entry
to one consumer at once or drops it, counting the dropped messages (``msgDropRate``):

* Exclusive / Failover: the active consumer (Failover: the first by priority level then name,
  or ``partition % consumers`` on a partition, told with ACTIVE_CONSUMER_CHANGE) takes it when it
  has permits and its connection is writable.
* Shared: the next consumer round-robin that has permits.
* Key_Shared: the consumer owning the entry's sticky-key hash (the selectors of
  :mod:`broker.subscriptions.selectors`); if that one has no permits, the entry is dropped
  (Pulsar's NonPersistentStickyKeyDispatcherMultipleConsumers).

A batch entry costs ``num_messages_in_batch`` permits and is sent whole once a consumer has
any permit. Message ids are Pulsar's non-persistent ones, ``0:0``; acks are accepted and
counted but change nothing; no pending acks are kept (``unackedMessages`` stays 0). A
``deliver_at_time`` is ignored: the message is dispatched at once, as Pulsar does on a
non-persistent topic. A subscription lives while it has consumers (the topic forgets it when
the last one leaves).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from broker.metrics.rates import RateMeter
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.limits import NO_CONSUMER_LIMITS, ConsumerLimits
from broker.subscriptions.selectors import KeySharedSelector
from protocol import pulsar_pb as pb
from protocol.errors import ConsumerBusyError, MetadataError, NotAllowedError, ServiceNotReadyError
from protocol.sub_types import SubType
from storage.positions import Position

__all__ = ["NON_PERSISTENT_ID", "NonPersistentSubscription", "RefusedResets", "SubscriptionOwner"]

#: Pulsar's message id of every message of a non-persistent topic (receipts and dispatch).
NON_PERSISTENT_ID = Position(0, 0)
SEEK_NOT_SUPPORTED = "Seek command on non-persistent topic is not supported"


class RefusedResets:
    """``NonPersistentSubscription.resets``: there is no cursor to move, so every seek is
    refused with Pulsar's text (the counterpart of :class:`broker.subscriptions.resets.CursorResets`)."""

    async def reset_cursor(self, position: tuple[int, int] | Position) -> None:
        raise NotAllowedError(SEEK_NOT_SUPPORTED)

    async def reset_cursor_to_timestamp(self, timestamp_ms: int) -> None:
        raise NotAllowedError(SEEK_NOT_SUPPORTED)


class SiblingSubscriptions(Protocol):
    """The topic's subscriptions, as one of them sees them."""

    def forget_subscription(self, sub: NonPersistentSubscription) -> None: ...

    def consumer_count(self) -> int:
        """Consumers attached to all the topic's subscriptions (``maxConsumersPerTopic``)."""
        ...


class SubscriptionOwner(Protocol):
    """What a non-persistent subscription asks of its topic."""

    @property
    def partition_index(self) -> int: ...

    @property
    def subscriptions(self) -> SiblingSubscriptions: ...

    def new_key_shared_selector(self, sticky: bool) -> KeySharedSelector: ...


class NonPersistentSubscription:
    """A named subscription on one non-persistent topic (module docstring)."""

    durable = False

    def __init__(self, topic: SubscriptionOwner, name: str,
                 properties: dict[str, str] | None = None) -> None:
        self.topic = topic
        self.name = name
        self.subscription_properties: dict[str, str] = dict(properties or {})
        self.consumers: list[Consumer] = []
        self.sub_type: SubType | None = None
        self.key_shared_mode: int | None = None
        self.read_compacted = False
        self.closed = False
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_ack_counter = 0
        self.msg_drop_counter = 0
        self._next = 0  # Shared round-robin index
        self._selector: KeySharedSelector | None = None
        self._active: Consumer | None = None
        self._rates = RateMeter()
        self.resets = RefusedResets()

    # ------------------------------------------------------------------ the dispatcher face

    @property
    def dispatcher(self) -> NonPersistentSubscription:
        """ConsumerSide asks the dispatcher to run after FLOW: nothing waits here to be read."""
        return self

    def schedule(self) -> None:
        pass

    # ------------------------------------------------------------------ consumers

    async def add_consumer(self, consumer: Consumer,
                           limits: ConsumerLimits = NO_CONSUMER_LIMITS) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"Subscription {self.name} is closed")
        limits.check(self.topic.subscriptions.consumer_count, len(self.consumers))
        if self.consumers:
            if consumer.sub_type != self.sub_type:
                raise ConsumerBusyError("Subscription is of different type")
            if consumer.sub_type == SubType.Exclusive:
                raise ConsumerBusyError("Exclusive consumer is already connected")
            if consumer.sub_type == SubType.Key_Shared and consumer.key_shared_mode != self.key_shared_mode:
                raise ConsumerBusyError("Subscription is of different type (Key_Shared mode)")
        if consumer.sub_type == SubType.Key_Shared:
            if not self.consumers or self._selector is None:
                self._selector = self.topic.new_key_shared_selector(
                    consumer.key_shared_mode == pb.STICKY)
            self._selector.add(consumer)  # ConsumerAssignError: bad STICKY range, none left
        self.sub_type = consumer.sub_type
        self.key_shared_mode = consumer.key_shared_mode
        self.consumers.append(consumer)

    def after_subscribe(self, consumer: Consumer) -> None:
        if self.sub_type == SubType.Failover:
            self._elect()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self._selector is not None:
            self._selector.remove(consumer)
        if self._active is consumer:
            self._active = None
        if not self.consumers:
            self.topic.subscriptions.forget_subscription(self)
        elif self.sub_type == SubType.Failover:
            self._elect()

    def _elect(self) -> None:
        """Failover: pick the active consumer and tell every consumer whether it is."""
        if not self.consumers:
            self._active = None
            return
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.name))
        index = self.topic.partition_index
        self._active = ordered[index % len(ordered)] if index >= 0 else ordered[0]
        for c in self.consumers:
            c.notify_active(c is self._active)

    async def unsubscribe(self, consumer: Consumer, *, force: bool = False) -> None:
        others = [c for c in self.consumers if c is not consumer]
        if others and not force:
            raise MetadataError("Unconnected or shared consumer attempting to unsubscribe")
        for other in others:
            other.disconnect()
            other.side.forget(other)
            self.remove_consumer(other)
        self.remove_consumer(consumer)

    def disconnect_consumers(self) -> None:
        """CLOSE_CONSUMER to every consumer (topic deleted or closed)."""
        self.closed = True
        for consumer in list(self.consumers):
            consumer.disconnect()
            consumer.side.forget(consumer)
            self.remove_consumer(consumer)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, entry: bytes, messages: int, sticky_hash: int) -> None:
        """Send *entry* to the consumer that may take it now, or drop it (module docstring)."""
        consumer = self._pick(sticky_hash)
        if consumer is None:
            self.msg_drop_counter += messages
            return
        consumer.send(NON_PERSISTENT_ID, entry, messages=messages, sticky_hash=sticky_hash,
                      revision=0)
        consumer.take_pending(NON_PERSISTENT_ID)  # at-most-once: nothing awaits an ack
        consumer.flush()
        self.msg_out_counter += messages
        self.bytes_out_counter += len(entry)

    def _pick(self, sticky_hash: int) -> Consumer | None:
        consumers = self.consumers
        if not consumers:
            return None
        sub_type = self.sub_type
        if sub_type == SubType.Shared:
            n = len(consumers)
            for i in range(n):
                c = consumers[(self._next + i) % n]
                if _can_take(c):
                    self._next = (self._next + i + 1) % n
                    return c
            return None
        if sub_type == SubType.Key_Shared:
            owner = self._selector.select(sticky_hash) if self._selector is not None else None
            return owner if owner is not None and _can_take(owner) else None
        active = self._active if sub_type == SubType.Failover else consumers[0]
        return active if active is not None and _can_take(active) else None

    # ------------------------------------------------------------------ acks, seeks

    def acknowledge(self, consumer: Consumer,
                    ids: list[tuple[Position, list[int] | None]], *, cumulative: bool) -> None:
        """Accepted and counted; a non-persistent subscription keeps no ack state."""
        self.msg_ack_counter += len(ids)

    def acknowledge_entries(self, consumer: Consumer, positions: list[Position]) -> None:
        """As :meth:`acknowledge`: counted, nothing kept."""
        self.msg_ack_counter += len(positions)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing is kept to redeliver (at-most-once)."""


    # ------------------------------------------------------------------ stats

    def _counter_values(self) -> tuple[float, ...]:
        return (self.msg_out_counter, self.bytes_out_counter, self.msg_drop_counter)

    def sample_rates(self, now: float) -> None:
        self._rates.sample(now, self._counter_values())
        for c in self.consumers:
            c.sample_rates(now)

    def drop_rate(self, now: float) -> float:
        return float(self._rates.rates(now, self._counter_values())[2])

    def stats(self) -> dict[str, Any]:
        """Pulsar's NonPersistentSubscriptionStats shape."""
        now = asyncio.get_running_loop().time()
        rate_out, thr_out, drop_rate = self._rates.rates(now, self._counter_values())
        active = self._active if self.sub_type == SubType.Failover else (
            self.consumers[0] if self.sub_type == SubType.Exclusive and self.consumers else None)
        return {
            "msgRateOut": rate_out,
            "msgThroughputOut": thr_out,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "msgRateRedeliver": 0.0,
            "chunkedMessageRate": 0.0,
            "msgBacklog": 0,
            "backlogSize": 0,
            "msgBacklogNoDelayed": 0,
            "blockedSubscriptionOnUnackedMsgs": False,
            "msgDelayed": 0,
            "unackedMessages": 0,
            "type": SubType(self.sub_type).name if self.sub_type is not None else "None",
            "activeConsumerName": active.name if active is not None else None,
            "msgRateExpired": 0.0,
            "totalMsgExpired": 0,
            "lastExpireTimestamp": 0,
            "consumers": [c.stats(now) for c in self.consumers],
            "isDurable": False,
            "isReplicated": False,
            "msgDropRate": drop_rate,
            "subscriptionProperties": dict(self.subscription_properties),
            "consumersAfterMarkDeletePosition": {},
        }


def _can_take(consumer: Consumer) -> bool:
    return consumer.permits > 0 and not consumer.closed and consumer.writable
