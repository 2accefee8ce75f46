"""The consumer half of one client connection: SUBSCRIBE, FLOW, ACK, SEEK and friends.

Theory of operation
-------------------
The connection (core) decodes frames and calls one handler per consumer command; this class owns
the connection's consumers by ``consumer_id`` and forwards to their subscriptions. Handlers
answer with SUCCESS / ACK_RESPONSE / GET_LAST_MESSAGE_ID_RESPONSE / CONSUMER_STATS_RESPONSE
themselves; a :class:`protocol.errors.RequestError` raised from an async handler becomes ERROR
with the request id (done generically by the connection).

Wire facts that matter (reference sections 2.6/2.7): ids are uint64 on the wire, so Pulsar's
``-1`` arrives as ``2**64 - 1`` (see :func:`broker.subscriptions.subscription.wire_position`); ACK carries a
*repeated* message_id; ACK_RESPONSE goes out only when the ACK had a request_id; a seek closes
every consumer of the subscription (CLOSE_CONSUMER) before SUCCESS, as the Java broker does, so
clients re-subscribe and send fresh FLOW permits; GET_LAST_MESSAGE_ID answers ``(-1, -1)``
for a topic with no entries, as Pulsar does, which the client reads as "nothing available".
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.metrics.rates import iso_ms
from broker.net.handshake import Handshake
from broker.net.schemas import check_consumer_schema
from broker.net.sliced import SLICE_IDS, SlicedCommands, SlicedWork
from broker.net.txn_requests import acknowledge_in_transaction
from broker.net.view import ConnectionView
from broker.subscriptions.consumer import Consumer, HashRange
from broker.subscriptions.limits import ConsumerLimits
from broker.subscriptions.nonpersistent import NonPersistentSubscription
from broker.subscriptions.subscription import Subscription, tail_position, wire_position
from broker.topics.dedup import DEDUP_CURSOR
from broker.topics.names import TopicName
from broker.topics.policies import ack_state_ranges_limit
from broker.topics.service import BrokerService
from broker.topics.storage_errors import StorageOp, storage_failure
from protocol import pulsar_pb as pb
from protocol.commands import (
    encode_ack_response,
    encode_consumer_stats_response,
    encode_get_last_message_id_response,
    encode_success,
)
from protocol.errors import (
    MetadataError,
    NotAllowedError,
    ProducerBusyError,
    RequestError,
    ServerError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
)
from protocol.metadata import parse_entry
from protocol.send_accel import ack_positions
from protocol.sub_types import SubType
from storage.appends_in_flight import AppendsInFlight
from storage.errors import StorageError
from storage.positions import Position

__all__ = ["ConsumerSide"]

#: Pulsar's geo-replication cursors' prefix: no consumer may take such a name.
REPLICATOR_PREFIX = "pulsar.repl"

log = logging.getLogger("horae.net.consumers")

AnySubscription = Subscription | NonPersistentSubscription

_U64 = (1 << 64) - 1
_I64 = 1 << 63
#: builds an ACK's positions without the Python ``__new__`` of the NamedTuple (up to 1,000 each)
_new = tuple.__new__


#: The most ids an ACK may carry to be read in C at once: a client's whole group
#: (``ackGroupingMaxSize``), ~0.2 ms of work. A bigger one is read id by id, slice by slice
#: (:mod:`broker.net.sliced`), so it never holds the loop for longer than a slice.
ENTRY_POSITIONS_MAX = 1000


def _entry_positions(cmd: pb.CommandAck) -> list[Position] | None:
    """An individual ACK's ids as positions, read in C from the command's bytes, when every
    one names a whole entry (the usual ACK: no batch index, no id at or past 2**63) and there
    are at most :data:`ENTRY_POSITIONS_MAX`; None otherwise, or without the C twin: the ids
    are then read one by one (:meth:`ConsumerSide._apply_ack`), the reference the C reading
    is compared with."""
    if ack_positions is None or cmd.ack_type == pb.CommandAck.Cumulative \
            or len(cmd.message_id) > ENTRY_POSITIONS_MAX:
        return None
    return ack_positions(Position, cmd.SerializeToString())


@dataclass(frozen=True, slots=True)
class Attached:
    """One consumer of this connection and the subscription it is attached to."""

    consumer: Consumer
    subscription: AnySubscription


class ConsumerConnection(ConnectionView, Protocol):
    """What the consumer side needs of its connection (:class:`broker.net.connection.ServerConnection`)."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def protocol_version(self) -> int: ...

    @property
    def client_version(self) -> str: ...

    @property
    def handshake(self) -> Handshake:
        """Its role (transactions check who may use one)."""
        ...

    @property
    def writes_paused(self) -> bool: ...

    def writelines(self, parts: list[bytes]) -> None:
        """Write complete frames given as consecutive buffers (see broker.net.output)."""
    @property
    def receives_broker_entry_metadata(self) -> bool:
        """MESSAGE frames keep the broker entry metadata of stored entries (else stripped)."""
        ...

    def hold_reading(self, held: bool) -> None:
        """Stop (True) or resume (False) reading the socket, for the consumer side's reason."""
        ...


class ConsumerSide:
    """Per-connection registry of consumers and the handlers of consumer commands."""

    def __init__(self, connection: ConsumerConnection) -> None:
        self.connection = connection
        # consumer id -> the consumer and the subscription it is attached to (the consumer
        # holds no reference up): one record, so the two never disagree
        self._attached: dict[int, Attached] = {}
        self._subscribing: set[int] = set()
        self._closed = False
        # big ACK / REDELIVER frames, applied in slices and in order
        self._sliced = SlicedCommands(self._hold_reading)

    # ------------------------------------------------------------------ ConsumerTransport

    @property
    def protocol_version(self) -> int:
        return self.connection.protocol_version

    @property
    def remote_address(self) -> str:
        return self.connection.remote_address

    @property
    def client_version(self) -> str:
        return self.connection.client_version

    @property
    def writes_paused(self) -> bool:
        return self.connection.writes_paused

    def write(self, data: bytes) -> None:
        self.connection.write(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.connection.writelines(parts)

    def forget(self, consumer: Consumer) -> None:
        """The broker closed this consumer (seek/reset/topic gone): drop it from the registry."""
        attached = self._attached.get(consumer.consumer_id)
        if attached is not None and attached.consumer is consumer:
            del self._attached[consumer.consumer_id]
        consumer.closed = True

    def attach(self, consumer: Consumer, subscription: AnySubscription) -> None:
        """Register *consumer* (attached to *subscription*) under its id on this connection."""
        self._attached[consumer.consumer_id] = Attached(consumer, subscription)

    # ------------------------------------------------------------------ SUBSCRIBE

    async def handle_subscribe(self, cmd: pb.CommandSubscribe) -> None:
        cid = cmd.consumer_id
        if cid in self._attached:
            # The client retried a subscribe that already succeeded: answer it again.
            self.connection.write(encode_success(cmd.request_id))
            return
        if cid in self._subscribing:
            raise ServiceNotReadyError("Consumer is already present on the connection")
        self._subscribing.add(cid)
        try:
            await self._subscribe(cmd)
        finally:
            self._subscribing.discard(cid)

    async def _subscribe(self, cmd: pb.CommandSubscribe) -> None:
        tn = TopicName.parse(cmd.topic)
        # Pulsar refuses these names with its NamingException's code, ProducerBusy
        if not cmd.subscription.strip():
            raise ProducerBusyError("Empty subscription name")
        if cmd.subscription == DEDUP_CURSOR or cmd.subscription.startswith(REPLICATOR_PREFIX):
            raise ProducerBusyError("Subscription with reserved subscription name attempted")
        read_compacted = bool(cmd.read_compacted)
        if read_compacted and (not tn.is_persistent or cmd.subType not in (
                pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover)):
            raise NotAllowedError("Read compacted can only be used with exclusive or failover "
                                  "persistent subscriptions")
        service = self.connection.service
        # A client asks not to create the topic with force_topic_creation=false (default true).
        create = cmd.force_topic_creation and service.policies.auto_topic_creation(tn).allowed
        topic = await service.get_any_topic(tn.full, create=create)
        if not cmd.subscription.strip():
            # Pulsar's topic refuses a blank name with a NamingException, sent as ProducerBusy;
            # the C++ client reads that code on a subscribe as "SubscriptionName cannot be empty".
            raise ProducerBusyError("Empty subscription name")
        limiter = topic.subscribe_rate
        limiter.rate = service.policies.limits.subscribe_rate(tn)
        limiter.admit((self.remote_address, cmd.consumer_name, cmd.consumer_id),
                      time.monotonic())
        sub_type = SubType(cmd.subType)
        if sub_type.name not in service.policies.subscription_types_enabled(tn):
            raise NotAllowedError(f"Topic[{{{tn.full}}}] doesn't support {sub_type.name} sub type!")
        if cmd.HasField("schema"):
            await check_consumer_schema(self.connection.service, topic, cmd.schema)
        durable = cmd.durable if cmd.HasField("durable") else True
        start = (
            (cmd.start_message_id.ledgerId, cmd.start_message_id.entryId)
            if cmd.HasField("start_message_id") else None
        )
        initial = "earliest" if cmd.initialPosition == pb.CommandSubscribe.Earliest else "latest"
        if (durable and tn.is_persistent and cmd.subscription not in topic.subscriptions
                and not service.policies.allow_auto_subscription_creation(tn)):
            raise SubscriptionNotFoundError(f"Subscription {cmd.subscription} does not exist")
        sub: AnySubscription = await topic.subscriptions.get_or_create_subscription(
            cmd.subscription, durable=durable, initial_position=initial,
            start_message_id=start,
            properties={kv.key: kv.value for kv in cmd.subscription_properties},
            max_subscriptions=service.policies.limits.max_subscriptions_per_topic(tn),
        )
        rollback_s = int(cmd.start_message_rollback_duration_sec)
        if rollback_s > 0 and isinstance(sub, Subscription):
            await _roll_back(sub, rollback_s)
        if read_compacted or not sub.consumers:
            sub.read_compacted = read_compacted
        mode: int | None = None
        ranges: tuple[HashRange, ...] = ()
        out_of_order = False
        if sub_type == SubType.Key_Shared:
            mode = int(pb.AUTO_SPLIT)
            if cmd.HasField("keySharedMeta"):
                meta = cmd.keySharedMeta
                mode = int(meta.keySharedMode)
                ranges = tuple(HashRange(r.start, r.end) for r in meta.hashRanges)
                out_of_order = bool(meta.allowOutOfOrderDelivery)
        partition = tn.partition_index if tn.partition_index >= 0 else None
        consumer = Consumer(
            self,
            cmd.consumer_id,
            name=cmd.consumer_name or uuid.uuid4().hex[:5],
            sub_type=sub_type,
            priority_level=cmd.priority_level,
            key_shared_mode=mode,
            hash_ranges=ranges,
            allow_out_of_order=out_of_order,
            metadata={kv.key: kv.value for kv in cmd.metadata},
            partition=partition,
            broker_metadata=self.connection.receives_broker_entry_metadata,
            max_unacked_messages=service.policies.limits.max_unacked_messages_per_consumer(tn),
        )
        policies = service.policies
        if isinstance(sub, Subscription):
            sub.max_unacked_messages = policies.limits.max_unacked_messages_per_subscription(tn)
            sub.dispatch_rate = policies.limits.subscription_dispatch_rate(tn)
            sub.topic_dispatch.rate = policies.limits.topic_dispatch_rate(tn)
            sub.topic_dispatch.ack_state_ranges_limit = ack_state_ranges_limit(
                policies.records, policies.config, tn)
            group = policies.resource_groups.of_namespace(tn.namespace)
            sub.topic_dispatch.join(None if group is None else group.dispatch)
        # The limits (topic over namespace over broker.conf) are decided when the consumer is
        # appended, after every await of the subscribe (broker/subscriptions/limits.py).
        await sub.add_consumer(consumer, ConsumerLimits(
            policies.limits.max_consumers_per_topic(tn),
            policies.limits.max_consumers_per_subscription(tn)))
        if self._closed:
            sub.remove_consumer(consumer)
            return
        self.attach(consumer, sub)
        self.connection.write(encode_success(cmd.request_id))
        sub.after_subscribe(consumer)

    # ------------------------------------------------------------------ FLOW / ACK / REDELIVER

    def _hold_reading(self, held: bool) -> None:
        self.connection.hold_reading(held)

    def handle_flow(self, cmd: pb.CommandFlow) -> None:
        attached = self._attached.get(cmd.consumer_id)
        if attached is None:
            return
        consumer = attached.consumer
        consumer.permits += cmd.messagePermits
        consumer.last_flow_ms = _now_ms()
        dispatcher = attached.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.schedule()

    def handle_ack(self, cmd: pb.CommandAck) -> None:
        """Apply an ACK, then answer it (ACK_RESPONSE when it has a request id). One of more
        than :data:`SLICE_IDS` ids, or one arriving while such work is queued, is applied in
        slices (:mod:`broker.net.sliced`): its answer still follows all of it."""
        txns = self.connection.service.transactions
        # (0, 0) is no transaction: ids start at sequence 1, and some clients set both to 0
        if txns is not None and (cmd.txnid_least_bits or cmd.txnid_most_bits):
            attached = self._attached.get(cmd.consumer_id)
            if attached is not None:
                attached.consumer.last_acked_ms = _now_ms()
                acknowledge_in_transaction(self.connection, txns, cmd, attached.subscription,
                                           cmd.message_id)
                return
        if self._sliced.busy or len(cmd.message_id) > SLICE_IDS:
            self._sliced.run(self._ack_slices(cmd))
            return
        if self._apply_ack(cmd, cmd.message_id, _entry_positions(cmd)) \
                and cmd.HasField("request_id"):
            self.connection.write(encode_ack_response(cmd.consumer_id, cmd.request_id))

    def _ack_slices(self, cmd: pb.CommandAck) -> SlicedWork:
        ids = cmd.message_id
        if cmd.ack_type == pb.CommandAck.Cumulative:
            ids = ids[-1:]  # only the last counts (Subscription.acknowledge): no slices
        positions = _entry_positions(cmd)
        for start in range(0, max(1, len(ids)), SLICE_IDS):
            try:
                if not self._apply_ack(cmd, ids[start:start + SLICE_IDS],
                                       positions[start:start + SLICE_IDS]
                                       if positions is not None else None):
                    return
            except RequestError as exc:
                if cmd.HasField("request_id"):
                    self.connection.write(encode_ack_response(
                        cmd.consumer_id, cmd.request_id, error=exc.code, message=exc.message))
                return
            yield self._appends_behind(cmd.consumer_id)
        if cmd.HasField("request_id"):
            self.connection.write(encode_ack_response(cmd.consumer_id, cmd.request_id))

    def _apply_ack(self, cmd: pb.CommandAck, message_ids: Sequence[pb.MessageIdData],
                   positions: list[Position] | None = None) -> bool:
        """Acknowledge *message_ids* (all or a slice of ``cmd.message_id``) for the ACK's
        consumer, or their *positions* when :func:`_entry_positions` read them; False
        (answered ConsumerNotFound) when that consumer is not attached."""
        attached = self._attached.get(cmd.consumer_id)
        if attached is None:
            if cmd.HasField("request_id"):
                self.connection.write(encode_ack_response(
                    cmd.consumer_id, cmd.request_id, error=ServerError.ConsumerNotFound,
                    message="Consumer not found"))
            return False
        if positions is not None:
            consumer = attached.consumer
            consumer.msg_ack_counter += len(positions)
            consumer.last_acked_ms = _now_ms()
            attached.subscription.acknowledge_entries(consumer, positions)
            return True
        ids: list[tuple[Position, list[int] | None]] = []
        for m in message_ids:  # hot path: one ACK carries up to 1000 ids
            lid, eid = m.ledgerId, m.entryId
            if lid >= _I64 or eid >= _I64:
                lid, eid = wire_position(lid, eid)
            ack_set = m.ack_set
            ids.append((_new(Position, (lid, eid)), list(ack_set) if ack_set else None))
        consumer = attached.consumer
        consumer.msg_ack_counter += len(ids)
        consumer.last_acked_ms = _now_ms()
        attached.subscription.acknowledge(
            consumer, ids, cumulative=cmd.ack_type == pb.CommandAck.Cumulative)
        return True

    def handle_redeliver(self, cmd: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES, after the ACKs queued before it; one of more than
        :data:`SLICE_IDS` ids is handed back in slices."""
        if self._sliced.busy or len(cmd.message_ids) > SLICE_IDS:
            self._sliced.run(self._redeliver_slices(cmd))
            return
        self._redeliver(cmd.consumer_id, cmd.message_ids, everything=True)

    def _redeliver_slices(self, cmd: pb.CommandRedeliverUnacknowledgedMessages) -> SlicedWork:
        ids = cmd.message_ids
        for start in range(0, max(1, len(ids)), SLICE_IDS):
            if not self._redeliver(cmd.consumer_id, ids[start:start + SLICE_IDS],
                                   everything=start == 0):
                return
            yield self._appends_behind(cmd.consumer_id)

    def _appends_behind(self, consumer_id: int) -> AppendsInFlight | None:
        """The store's appends in flight behind *consumer_id*'s subscription, which a big
        command's next slice lets through first (:mod:`broker.net.sliced`); None when it is
        not attached or keeps nothing (non-persistent)."""
        attached = self._attached.get(consumer_id)
        if attached is None or isinstance(attached.subscription, NonPersistentSubscription):
            return None
        return attached.subscription.ledger.appends_in_flight

    def _redeliver(self, consumer_id: int, message_ids: Sequence[pb.MessageIdData], *,
                   everything: bool) -> bool:
        """Hand *message_ids* back (no ids and *everything*: all the consumer's unacked ones);
        False when the consumer is not attached."""
        attached = self._attached.get(consumer_id)
        if attached is None:
            return False
        positions = [Position(*wire_position(m.ledgerId, m.entryId)) for m in message_ids]
        if positions or everything:
            attached.subscription.redeliver(attached.consumer, positions or None)
        return True

    # ------------------------------------------------------------------ SEEK / UNSUBSCRIBE / CLOSE

    async def handle_seek(self, cmd: pb.CommandSeek) -> None:
        sub = self._attached_to(cmd.consumer_id).subscription
        if cmd.HasField("message_id"):
            try:
                await sub.resets.reset_cursor(
                    wire_position(cmd.message_id.ledgerId, cmd.message_id.entryId))
            except StorageError as exc:
                raise storage_failure(exc, StorageOp.SEEK_MESSAGE_ID).error from exc
        elif cmd.HasField("message_publish_time"):
            try:
                await sub.resets.reset_cursor_to_timestamp(cmd.message_publish_time)
            except StorageError as exc:
                raise storage_failure(exc, StorageOp.SEEK_PUBLISH_TIME).error from exc
        else:
            raise MetadataError("Message id and message publish time were not present")
        self.connection.write(encode_success(cmd.request_id))

    async def handle_unsubscribe(self, cmd: pb.CommandUnsubscribe) -> None:
        attached = self._attached_to(cmd.consumer_id)
        await attached.subscription.unsubscribe(attached.consumer, force=bool(cmd.force))
        self.forget(attached.consumer)
        self.connection.write(encode_success(cmd.request_id))

    def handle_close_consumer(self, cmd: pb.CommandCloseConsumer) -> None:
        """CLOSE_CONSUMER, after the ACKs and REDELIVERs queued before it."""
        self._sliced.run_after(lambda: self._close_consumer(cmd))

    def _close_consumer(self, cmd: pb.CommandCloseConsumer) -> None:
        attached = self._attached.pop(cmd.consumer_id, None)
        if attached is not None:
            attached.consumer.closed = True
            try:
                attached.subscription.remove_consumer(attached.consumer)
            except Exception as exc:  # a bug answers this request only, as the others do
                log.exception("closing consumer %s failed", attached.consumer.name)
                raise RequestError(f"{type(exc).__name__}: {exc}") from exc
        self.connection.write(encode_success(cmd.request_id))

    # ------------------------------------------------------------------ queries

    async def handle_get_last_message_id(self, cmd: pb.CommandGetLastMessageId) -> None:
        attached = self._attached_to(cmd.consumer_id)
        consumer, sub = attached.consumer, attached.subscription
        if isinstance(sub, NonPersistentSubscription):  # nothing is kept: "nothing available"
            self.connection.write(encode_get_last_message_id_response(
                cmd.request_id, _U64, _U64, partition=consumer.partition))
            return
        ledger = sub.ledger
        last = tail_position(ledger)
        txn = sub.transaction_view()
        if txn is not None:   # Pulsar answers the max read position: nothing an open
            capped = txn.last_readable(ledger)   # transaction holds back
            if capped is None:
                last = Position(last.ledger_id, -1)   # nothing readable yet
            elif capped < last:
                last = capped
        md = sub.cursor.mark_delete_position
        if last.entry_id < 0:
            # Nothing in the topic: Pulsar answers (-1, -1) (its compacted-ledger fallback finds
            # nothing either), not the current ledger's id.
            self.connection.write(encode_get_last_message_id_response(
                cmd.request_id, _U64, _U64, partition=consumer.partition,
                mark_delete=(md.ledger_id & _U64, md.entry_id & _U64)))
            return
        batch_index: int | None = None
        entry = await ledger.read_entry(last)
        if entry is not None:
            try:
                info = parse_entry(entry.data)
                if info.num_messages_in_batch is not None:
                    batch_index = info.num_messages_in_batch - 1
            except Exception:
                batch_index = None
        last_ledger = last.ledger_id
        self.connection.write(encode_get_last_message_id_response(
            cmd.request_id, last_ledger & _U64, last.entry_id & _U64,
            partition=consumer.partition, batch_index=batch_index,
            mark_delete=(md.ledger_id & _U64, md.entry_id & _U64),
        ))

    async def handle_consumer_stats(self, cmd: pb.CommandConsumerStats) -> None:
        attached = self._attached.get(cmd.consumer_id)
        if attached is None:
            self.connection.write(encode_consumer_stats_response(
                cmd.request_id, error_code=ServerError.ConsumerNotFound,
                error_message=f"Consumer {cmd.consumer_id} not found"))
            return
        consumer, sub = attached.consumer, attached.subscription
        # Rates as the service's once-a-second tick sampled them: a stats read changes nothing.
        rate_out, thr_out, rate_redeliver, ack_rate = consumer.rates(
            asyncio.get_running_loop().time())
        self.connection.write(encode_consumer_stats_response(
            cmd.request_id,
            msgRateOut=rate_out,
            msgThroughputOut=thr_out,
            msgRateRedeliver=rate_redeliver,
            consumerName=consumer.name,
            availablePermits=max(0, consumer.permits),
            unackedMessages=consumer.unacked_messages,
            blockedConsumerOnUnackedMsgs=consumer.blocked_on_unacked,
            address=self.remote_address,
            connectedSince=iso_ms(consumer.connected_since_ms),  # Pulsar: the stats' string
            type=consumer.sub_type_name,
            msgRateExpired=0.0,
            msgBacklog=sub.cursor.backlog if isinstance(sub, Subscription) else 0,
            messageAckRate=ack_rate,
        ))

    def on_writable(self) -> None:
        """The transport drained (resume_writing): dispatch again to this connection."""
        for attached in list(self._attached.values()):
            dispatcher = attached.subscription.dispatcher
            if dispatcher is not None:
                dispatcher.schedule()

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """The connection went away: every consumer leaves, its unacked messages are redelivered."""
        self._closed = True
        self._sliced.close()
        attached = list(self._attached.values())
        self._attached.clear()
        for record in attached:
            record.consumer.closed = True
            try:
                record.subscription.remove_consumer(record.consumer)
            except Exception:
                log.exception("removing consumer %s failed", record.consumer.name)

    def _attached_to(self, consumer_id: int) -> Attached:
        """The consumer a SEEK, UNSUBSCRIBE or GET_LAST_MESSAGE_ID names; Pulsar refuses an
        unknown one with MetadataError "Consumer not found" (ConsumerNotFound is its code for
        CONSUMER_STATS and acks)."""
        attached = self._attached.get(consumer_id)
        if attached is None:
            raise MetadataError("Consumer not found")
        return attached


async def _roll_back(sub: Subscription, seconds: int) -> None:
    """SUBSCRIBE's ``start_message_rollback_duration_sec``: the subscription (new or existing)
    restarts at what was published in the last *seconds*, before the consumer joins, as
    Pulsar's topic resets it; a failed reset is logged and the subscribe goes on."""
    try:
        await sub.resets.reset_cursor_to_timestamp(_now_ms() - seconds * 1000)
    except (StorageError, RequestError) as exc:
        log.warning("%s: rolling back %d s on subscribe failed: %s", sub.name, seconds, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
