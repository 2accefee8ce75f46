"""Subscriptions: a cursor, the consumers attached to it, and the dispatcher between them.

Theory of operation
-------------------
A :class:`Subscription` is opened by the topic (:meth:`Subscription.open`): durable ones own a
storage ``ManagedCursor`` (acks persisted), readers (``durable=False``) a
:class:`broker.subscriptions.dispatchers.cursors.MemoryCursor` with the same interface that lives as long as
the reader. The dispatcher is created for the
subscription type of the first consumer and replaced only when every consumer has left and one
of another type arrives (then the cursor is rewound to the first unacknowledged entry).

Every cursor position reset -- seek, admin reset-cursor, skip, skip by ids, clear-backlog, a
type switch, the rewind when a first consumer arrives on an emptied Shared/Key_Shared
dispatcher -- is run by ``self.resets`` (:class:`broker.subscriptions.resets.CursorResets`) as
one revision of ``self.revisions`` (:class:`broker.subscriptions.revision.RevisionController`,
PIP-269); callers use ``sub.resets`` directly (a non-persistent subscription's ``resets``
refuses every seek). A subscribe waits for a running
revision to end before it is admitted. Opening a subscription (topic load) is not a reset: no
read can be in flight on a new subscription, so it does not bump the revision.

Acks arrive from :class:`broker.net.consumers.ConsumerSide`: individual (with batch ``ack_set``:
a set bit is a message still to deliver, kept in memory in ``batch_acks`` and sent back on
redelivery), or cumulative. Delayed delivery (:class:`broker.delayed.delivery.DelayedDelivery`,
made from the topic's tracker factory and policy) is handed to each Shared or Key_Shared
dispatcher the subscription creates, which drives it; the topic pushes policy changes through
:meth:`Subscription.on_policy_changed`. Its tracker is built on the first delayed entry, or on
load when the cursor holds bucket snapshots.

The type outlives the consumers: a durable subscription keeps it in a cursor property
(``SUBSCRIPTION_TYPE_PROPERTY``, saved before the subscribe is answered) when a consumer attaches and takes it
back on load, so what depends on it (skip by message ids refused on Exclusive/Failover, which
subscriptions a cancel concerns) answers the same before and after an unload or a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.delivery import DelayedDelivery, TrackerFactory
from broker.delayed.policy import DelayPolicy
from broker.delayed.tracker import DelayedDeliveryTracker
from broker.metrics.rates import RateMeter
from broker.metrics.sources import BucketIndexFigures
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatch_rate import NO_DISPATCH_RATE, TopicDispatch
from broker.subscriptions.dispatchers import (
    Dispatcher,
    KeySharedDispatcher,
    SharedDispatcher,
    SingleActiveDispatcher,
)
from broker.subscriptions.dispatchers.base import round_after_ack, round_now
from broker.subscriptions.dispatchers.cursors import (
    MemoryCursor,
    before,
    normalize_target,
    reader_mark_delete,
    tail_position,
    wire_position,
)
from broker.subscriptions.expiry import ExpiryCounters
from broker.subscriptions.last_active import LAST_ACTIVE_PROPERTY, mark_active
from broker.subscriptions.limits import NO_CONSUMER_LIMITS, ConsumerLimits
from broker.subscriptions.resets import CursorResets
from broker.subscriptions.revision import RevisionController
from broker.subscriptions.selectors import KeySharedSelector
from broker.transactions.dispatch_view import DispatchView
from protocol import pulsar_pb as pb
from protocol.errors import (
    ConsumerBusyError,
    MetadataError,
    ServiceNotReadyError,
)
from protocol.sub_types import SubType
from storage.cursor import ManagedCursor
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = [
    "BUCKET_PROPERTY_PREFIX", "LAST_ACTIVE_PROPERTY", "SUBSCRIPTION_PROPERTY_PREFIX", "SUBSCRIPTION_TYPE_PROPERTY",
    "MemoryCursor", "Subscription",
    "TopicContext", "tail_position", "wire_position",
]

log = logging.getLogger("horae.subscription")

BUCKET_PROPERTY_PREFIX = "#pulsar.internal.delayed.bucket"
#: The cursor property that keeps a durable subscription's type (SubType name) across loads.
SUBSCRIPTION_TYPE_PROPERTY = "#horae.internal.subscription.type"
#: Prefix of the cursor properties that keep the subscription's own properties (SUBSCRIBE
#: ``subscription_properties``, Pulsar's cursor properties), so they survive a restart.
SUBSCRIPTION_PROPERTY_PREFIX = "#horae.internal.subscription.property."


class SiblingSubscriptions(Protocol):
    """The topic's subscriptions, as one of them sees them
    (:class:`broker.topics.topic_subscriptions.TopicSubscriptions`)."""

    def remove_subscription(self, sub: Subscription) -> None: ...

    async def delete_subscription(self, name: str, *, force: bool = False) -> None: ...

    def consumer_count(self) -> int:
        """Consumers attached to all the topic's subscriptions (``maxConsumersPerTopic``)."""
        ...

    def update_caching(self) -> None:
        """A subscription's consumers came or went: whether new entries are cached follows."""
        ...


class CompactionHorizon(Protocol):
    """What a read_compacted subscription asks of the topic's compaction."""

    def compacted_out(self, pos: Position) -> bool: ...


class SubscriptionProperties:
    """A subscription's own properties (SUBSCRIBE ``subscription_properties``, the admin
    API's), kept in its cursor's properties under :data:`SUBSCRIPTION_PROPERTY_PREFIX` so a
    durable one's survive a restart."""

    def __init__(self, cursor: ManagedCursor | MemoryCursor) -> None:
        self._cursor = cursor

    def current(self) -> dict[str, str]:
        """The subscription's own properties (stats ``subscriptionProperties``)."""
        n = len(SUBSCRIPTION_PROPERTY_PREFIX)
        return {key[n:]: value for key, value in self._cursor.properties.items()
                if key.startswith(SUBSCRIPTION_PROPERTY_PREFIX)}

    def replace(self, properties: Mapping[str, str]) -> None:
        """Replace the subscription's own properties (admin update, Pulsar's whole-map set)."""
        cursor = self._cursor
        for key in list(cursor.properties):
            if key.startswith(SUBSCRIPTION_PROPERTY_PREFIX):
                cursor.remove_property(key)
        for key, value in properties.items():
            cursor.set_property(SUBSCRIPTION_PROPERTY_PREFIX + key, value)


class DeliverySettings(Protocol):
    """What a subscription is built with: its topic's delayed-delivery policy, tracker
    factory and read-ahead, the Key_Shared selector kind and the failover delay."""

    def delay_policy(self) -> DelayPolicy: ...

    def tracker_factory(self, cursor: ManagedCursor | None) -> TrackerFactory:
        """How this subscription builds its delayed-delivery tracker (*cursor*: a durable
        one's, for bucket snapshots)."""
        ...

    def new_key_shared_selector(self, sticky: bool) -> KeySharedSelector:
        """A Key_Shared selector built with the broker's settings."""
        ...

    @property
    def failover_delay_s(self) -> float:
        """``activeConsumerFailoverDelayTimeMillis`` in seconds."""
        ...

    @property
    def read_ahead_ms(self) -> int:
        """``delayedDeliveryReadAheadMillis`` (0: no read-ahead)."""
        ...


class TopicContext(Protocol):
    """What a subscription may ask of the topic that owns it (implemented by
    :class:`broker.topics.topic.Topic`): its ledger, partition, what subscriptions are built with
    (``delivery``), its compaction horizon, and its subscriptions (to forget or delete this one)."""

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def partition_index(self) -> int: ...

    @property
    def terminated(self) -> bool: ...

    @property
    def delivery(self) -> DeliverySettings:
        """What this subscription is built with (``broker.topics.delivery.TopicDelivery``)."""
        ...

    @property
    def subscriptions(self) -> SiblingSubscriptions:
        """The topic's subscriptions: this one removes or deletes itself there."""
        ...

    def touch(self) -> None:
        """Counters of the topic may have moved (its rate meters are sampled while it is active)."""
        ...

    @property
    def compaction(self) -> CompactionHorizon: ...

    @property
    def topic_dispatch(self) -> TopicDispatch:
        """The topic's ``dispatchRate``, shared by its subscriptions."""
        ...

    #: The topic's full name.
    full: str

    def transaction_view(self, subscription: str) -> DispatchView | None:
        """What this subscription's dispatcher checks for transactions (None: nothing)."""
        ...


class Subscription:
    """A named subscription on one topic (or one partition of a partitioned topic)."""

    def __init__(self, topic: TopicContext, name: str, cursor: ManagedCursor | MemoryCursor, *,
                 durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.ledger = topic.ledger
        self.sub_type: SubType | None = None
        self.key_shared_mode: int | None = None
        self.consumers: list[Consumer] = []
        self.dispatcher: Dispatcher | None = None
        delivery = topic.delivery
        self.delayed = DelayedDelivery(
            delivery.tracker_factory(cursor if isinstance(cursor, ManagedCursor) else None),
            delivery.delay_policy(), read_ahead_ms=delivery.read_ahead_ms)
        self.redelivery_counts: dict[Position, int] = {}
        self.batch_acks: dict[Position, int] = {}
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_ack_counter = 0
        self.msg_redeliver_counter = 0
        self._rates = RateMeter()
        self.read_compacted = False  # skip what compaction superseded (set on SUBSCRIBE)
        self.max_unacked_messages = 0  # maxUnackedMessagesPerSubscription (set on SUBSCRIBE)
        self.dispatch_rate = NO_DISPATCH_RATE  # subscriptionDispatchRate (set on SUBSCRIBE)
        self.closed = False
        self.revisions = RevisionController(cursor)
        self.resets = CursorResets(self)
        self.expiry = ExpiryCounters()
        self.partition_index = topic.partition_index
        self.topic_dispatch = topic.topic_dispatch  # the topic's dispatchRate, shared
        #: new reads paused by dispatcherPauseOnAckStatePersistent, as the last dispatch
        #: round found it (:mod:`broker.subscriptions.ack_state_pause`)
        self.paused_on_ack_state = False
        #: The subscription's own properties (admin get/update, stats).
        self.properties = SubscriptionProperties(cursor)

    # ------------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        topic: TopicContext,
        name: str,
        *,
        durable: bool = True,
        initial_position: str = "latest",
        start_message_id: tuple[int, int] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Subscription:
        """*properties*: the subscription's own properties, kept only when it is created here
        (Pulsar opens the cursor with them; an existing one keeps its own)."""
        ledger = topic.ledger
        cursor: ManagedCursor | MemoryCursor
        existed = False
        if durable:
            existed = name in ledger.cursors
            cursor = await ledger.open_cursor(
                name, initial_position="earliest" if initial_position == "earliest" else "latest"
            )
            if start_message_id is not None and not existed:
                # Admin create-subscription at a message id: that entry is the first to read.
                lid, eid = wire_position(*start_message_id)
                cursor.reset(normalize_target(ledger, lid, eid))
        else:
            cursor = MemoryCursor(
                ledger, name, reader_mark_delete(ledger, start_message_id, initial_position)
            )
        if durable:
            # Only acks survive a restart: everything unacknowledged is read again (Pulsar
            # recovers a cursor's read position as the entry after its mark-delete position).
            cursor.read_position = ledger.next_position(cursor.mark_delete_position)
        if properties and not existed:
            for key, value in properties.items():
                cursor.set_property(SUBSCRIPTION_PROPERTY_PREFIX + key, value)
        sub = cls(topic, name, cursor, durable=durable)
        if durable:
            sub.sub_type = _stored_type(name, cursor.properties)
        if durable and any(k.startswith(BUCKET_PROPERTY_PREFIX) for k in cursor.properties):
            # Bucket snapshots from a previous run: recover them before anything is dispatched.
            await sub.delayed.recover()
        return sub

    @property
    def blocked_on_unacked(self) -> bool:
        """Dispatch is held by ``maxUnackedMessagesPerSubscription`` (stats, metrics)."""
        dispatcher = self.dispatcher
        return dispatcher is not None and dispatcher.blocked_on_unacked

    def disconnect_consumers(self) -> None:
        """CLOSE_CONSUMER to every consumer (topic unload/delete): clients re-subscribe."""
        for consumer in list(self.consumers):
            consumer.disconnect()
            consumer.side.forget(consumer)
            self.remove_consumer(consumer)

    async def close(self, *, disconnect: bool = False) -> None:
        """Stop dispatching and release the tracker (topic unload, delete, reader gone)."""
        self.closed = True
        if disconnect:
            self.disconnect_consumers()
        if self.consumers:
            self.consumers.clear()
            self.topic.subscriptions.update_caching()
        if self.dispatcher is not None:
            await self.dispatcher.close()
        await self.delayed.release()

    def on_new_entries(self) -> None:
        """New entries became durable (the topic's notification, inside the store's hand-back
        of the group commit) or the limits changed: a round, made at once when none is under
        way."""
        if self.dispatcher is not None and self.consumers:
            round_now(self.dispatcher)

    # ------------------------------------------------------------------ delayed delivery

    def on_policy_changed(self, policy: DelayPolicy) -> None:
        """The topic's delayed-delivery policy changed: *policy* is the one now in force."""
        self.delayed.set_policy(policy)
        if self.dispatcher is not None and self.consumers:
            self.dispatcher.schedule()

    @property
    def delayed_tracker(self) -> DelayedDeliveryTracker | None:
        """The delayed-delivery tracker once built (its figures for the metrics)."""
        return self.delayed.tracker

    @property
    def msg_delayed(self) -> int:
        return len(self.delayed)

    @property
    def bucket_index(self) -> BucketIndexFigures | None:
        """The tracker when it is a bucket tracker (its figures for the metrics), else None."""
        tracker = self.delayed_tracker
        return tracker if isinstance(tracker, BucketDelayedDeliveryTracker) else None

    # ------------------------------------------------------------------ consumers

    async def add_consumer(self, consumer: Consumer,
                           limits: ConsumerLimits = NO_CONSUMER_LIMITS) -> None:
        """Attach a consumer; raises ConsumerBusy / ConsumerAssignError like Pulsar.

        A subscribe waits for a running reset to end (it is admitted against the state after
        it); the attach itself runs in the loop step that ends the type switch or rewind it may
        need, so no other subscribe or read sees the subscription in between. The admission
        (state, *limits*, type) is checked again in that step."""
        await self.revisions.wait_idle()
        self._check_admission(consumer, limits)
        dispatcher = self.dispatcher
        if dispatcher is None:
            self.dispatcher = self._new_dispatcher(consumer)
        elif not self.consumers and self._needs_new_dispatcher(consumer):
            await self.resets.switch_dispatcher(self._new_dispatcher(consumer))
            self._check_admission(consumer, limits)  # another subscribe may have won meanwhile
        elif not self.consumers and self._needs_rewind(dispatcher):
            await self.resets.rewind()
            self._check_admission(consumer, limits)
        dispatcher = self.dispatcher
        assert dispatcher is not None
        if isinstance(dispatcher, KeySharedDispatcher):
            dispatcher.check(consumer)
        self.sub_type = consumer.sub_type
        self.key_shared_mode = consumer.key_shared_mode
        self.consumers.append(consumer)
        if len(self.consumers) == 1:
            self.topic.subscriptions.update_caching()
        dispatcher.add_consumer(consumer)
        cursor = self.cursor
        mark_active(cursor)
        if (isinstance(cursor, ManagedCursor)
                and cursor.properties.get(SUBSCRIPTION_TYPE_PROPERTY) != consumer.sub_type.name):
            cursor.set_property(SUBSCRIPTION_TYPE_PROPERTY, consumer.sub_type.name)
            # Saved before the subscribe is answered, as Pulsar stores a new subscription
            # before its SUCCESS: a kill -9 right after must not forget the type (the admin
            # skip and cancel checks read it). Only a new or changed type pays for it.
            try:
                await cursor.flush()
            except Exception as exc:    # the rate-limited save tries again
                log.warning("subscription %s: saving its type failed: %s", self.name, exc)

    def _check_admission(self, consumer: Consumer, limits: ConsumerLimits) -> None:
        if self.closed:
            # The topic is being unloaded or deleted: the client retries (ServiceNotReady).
            raise ServiceNotReadyError(f"Subscription {self.name} is closed")
        limits.check(self.topic.subscriptions.consumer_count, len(self.consumers))
        if not self.consumers:
            return
        if consumer.sub_type != self.sub_type:
            raise ConsumerBusyError("Subscription is of different type")
        if consumer.sub_type == SubType.Exclusive:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        if consumer.sub_type == SubType.Key_Shared and consumer.key_shared_mode != self.key_shared_mode:
            raise ConsumerBusyError("Subscription is of different type (Key_Shared mode)")

    def _needs_new_dispatcher(self, consumer: Consumer) -> bool:
        d = self.dispatcher
        if d is None or d.sub_type != consumer.sub_type:
            return True
        return isinstance(d, KeySharedDispatcher) and d.mode != consumer.key_shared_mode

    def _new_dispatcher(self, consumer: Consumer) -> Dispatcher:
        t = consumer.sub_type
        if t == SubType.Shared:
            return SharedDispatcher(self, self.delayed)
        if t == SubType.Key_Shared:
            mode = consumer.key_shared_mode or 0
            return KeySharedDispatcher(self, self.delayed, mode,
                                       self.topic.delivery.new_key_shared_selector(mode == pb.STICKY))
        return SingleActiveDispatcher(self, t, self.topic.delivery.failover_delay_s)

    def _needs_rewind(self, dispatcher: Dispatcher) -> bool:
        """Pulsar's multi-consumer dispatcher rewinds when a consumer arrives on an empty
        consumer list; Horae does it only when there is something to rewind."""
        if not isinstance(dispatcher, (SharedDispatcher, KeySharedDispatcher)):
            return False
        cursor = self.cursor
        return (bool(dispatcher.replay)
                or cursor.read_position != self.ledger.next_position(cursor.mark_delete_position))

    def after_subscribe(self, consumer: Consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.after_subscribe(consumer)
        self.check_end_of_topic()

    def check_end_of_topic(self) -> None:
        """Pulsar's end of topic: once the topic is terminated and this subscription has
        nothing left to acknowledge, its consumers are told they reached the end."""
        if self.topic.terminated and self.consumers and self.cursor.backlog == 0:
            for consumer in self.consumers:
                consumer.reached_end_of_topic()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach (close, unsubscribe, connection gone): its unacked messages are redelivered."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if not self.consumers:
            self.topic.subscriptions.update_caching()
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        mark_active(self.cursor)   # saved with the cursor's next save
        if not self.durable and not self.consumers and not self.resets.resetting:
            # A reader's subscription lives as long as its reader.
            self.topic.subscriptions.remove_subscription(self)
            asyncio.get_running_loop().create_task(self.close())

    async def unsubscribe(self, consumer: Consumer, *, force: bool = False) -> None:
        """UNSUBSCRIBE from *consumer*: refused while others are attached, unless *force*,
        which disconnects them first (Pulsar's ``doUnsubscribe(consumer, forcefully)``)."""
        others = [c for c in self.consumers if c is not consumer]
        if others and not force:
            raise MetadataError("Unconnected or shared consumer attempting to unsubscribe")
        for other in others:
            other.disconnect()
            other.side.forget(other)
            self.remove_consumer(other)
        self.remove_consumer(consumer)
        if self.durable:
            await self.topic.subscriptions.delete_subscription(self.name)
        else:
            self.topic.subscriptions.remove_subscription(self)
            await self.close()

    # ------------------------------------------------------------------ acks / redelivery

    def acknowledge(
        self, consumer: Consumer, ids: list[tuple[Position, list[int] | None]], *, cumulative: bool
    ) -> None:
        if not ids:
            return
        cursor = self.cursor
        acked: list[Position] = []
        last = self.ledger.last_confirmed
        if last is None:
            return
        if cumulative:
            pos, ack_set = ids[-1]
            if pos > last:  # Pulsar's asyncMarkDelete: "Invalid mark deleted position"
                log.debug("%s: cumulative ack of %s beyond the last entry %s ignored",
                          self.name, pos, last)
                return
            partial = ack_set is not None and _merge_ack_set(self, consumer, pos, ack_set)
            upto = before(pos) if partial else pos
            if upto > cursor.mark_delete_position:
                cursor.mark_delete(upto)
            acked = [p for p in consumer.pending if p <= upto]
            if self.batch_acks:
                for p in [p for p in self.batch_acks if p <= upto]:
                    del self.batch_acks[p]
        else:
            if not self.batch_acks:   # the usual ACK: whole entries, no batch index kept
                acked = [pos for pos, ack_set in ids if ack_set is None and pos <= last]
            if len(acked) != len(ids):   # some ids ignored, or acks by batch index
                acked = []
                for pos, ack_set in ids:
                    if pos > last:
                        continue  # no such entry (yet): ignored, as storage's cursor does
                    if ack_set is not None and _merge_ack_set(self, consumer, pos, ack_set):
                        continue
                    self.batch_acks.pop(pos, None)
                    acked.append(pos)
            cursor.delete(acked)
        _after_acks(self, acked)

    def acknowledge_entries(self, consumer: Consumer, positions: list[Position]) -> None:
        """An individual ACK of whole entries (no batch index): :meth:`acknowledge` without a
        step per id while no entry is acknowledged by batch index. *positions* becomes the
        subscription's (kept by the cursor's and dispatcher's books as they see fit)."""
        if self.batch_acks:   # whole-entry acks drop those entries' kept batch bits
            self.acknowledge(consumer, [(pos, None) for pos in positions], cumulative=False)
            return
        last = self.ledger.last_confirmed
        if last is None or not positions:
            return
        # ids past the last entry are ignored, as storage's cursor does
        acked = positions if max(positions) <= last else [p for p in positions if p <= last]
        self.cursor.delete(acked)
        _after_acks(self, acked)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: an empty list means all of the consumer's."""
        if self.dispatcher is not None:
            self.dispatcher.hand_back(consumer, positions or None, count_redelivery=True)

    # ------------------------------------------------------------------ compaction

    def compacted_out(self, pos: Position) -> bool:
        """A read_compacted subscription skips *pos*: compaction superseded it."""
        return self.read_compacted and self.topic.compaction.compacted_out(pos)

    # ------------------------------------------------------------------ transactions

    def transaction_view(self) -> DispatchView | None:
        return self.topic.transaction_view(self.name)

    # ------------------------------------------------------------------ stats

    def _counter_values(self) -> tuple[float, ...]:
        return (self.msg_out_counter, self.bytes_out_counter,
                sum(c.msg_redeliver_counter for c in self.consumers))

    def touch(self) -> None:
        """Something moved (a dispatch, an ack): the topic's rates need sampling again."""
        self.topic.touch()

    def resume_rates(self, since: float) -> None:
        """Rate sampling paused while the subscription stood still (its consumers too)."""
        self._rates.resume(since)
        for c in self.consumers:
            c.resume_rates(since)

    def sample_rates(self, now: float) -> None:
        """Take a rate sample (the service's once-a-second tick, through the topic); reading
        the stats never does."""
        self._rates.sample(now, self._counter_values())
        for c in self.consumers:
            c.sample_rates(now)

    def rates(self, now: float) -> tuple[float, float, float]:
        """(msgRateOut, msgThroughputOut, msgRateRedeliver) per second at loop time *now*."""
        r = self._rates.rates(now, self._counter_values())
        return r[0], r[1], r[2]

    def redeliver_rate(self) -> float:
        """Messages sent again per second after a negative ack or a redelivery request,
        summed over the consumers (``msgRateRedeliver``; sampled while the topic is active)."""
        return self.rates(asyncio.get_running_loop().time())[2]


def _stored_type(name: str, properties: dict[str, str]) -> SubType | None:
    """The type a durable subscription's cursor keeps (SUBSCRIPTION_TYPE_PROPERTY), if any."""
    value = properties.get(SUBSCRIPTION_TYPE_PROPERTY)
    if value is None:
        return None
    try:
        return SubType[value]
    except KeyError:
        log.warning("subscription %s: unknown stored type %r ignored", name, value)
        return None


def _after_acks(sub: Subscription, acked: list[Position]) -> None:
    """What follows an ACK's change to the cursor: activity, counters, the dispatcher's
    books and the round the acks may make worthwhile, the end-of-topic notice."""
    mark_active(sub.cursor)   # saved with the ack state, by the same save
    sub.msg_ack_counter += len(acked)
    sub.topic.touch()
    dispatcher = sub.dispatcher
    if dispatcher is not None:
        dispatcher.on_acked(acked)
        if round_after_ack(dispatcher):
            dispatcher.schedule()  # acks may unblock Key_Shared hashes, a blocked read
    sub.check_end_of_topic()


def _merge_ack_set(sub: Subscription, consumer: Consumer, pos: Position, ack_set: list[int]
                   ) -> bool:
    """Batch-index ack: keep the still-unacked bits; True while some remain."""
    bits = 0
    for i, word in enumerate(ack_set):
        bits |= (word & 0xFFFFFFFFFFFFFFFF) << (64 * i)
    pending = consumer.pending.get(pos)
    size = pending[0] if pending is not None else max(1, 64 * len(ack_set))
    current = sub.batch_acks.get(pos, (1 << size) - 1)
    remaining = current & bits & ((1 << size) - 1)
    if remaining == 0:
        return False
    sub.batch_acks[pos] = remaining
    return True
