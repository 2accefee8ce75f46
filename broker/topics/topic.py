"""A loaded persistent topic: its managed ledger, producers, subscriptions and counters.

Theory of operation
-------------------
:meth:`Topic.load` opens the topic's managed ledger (which starts a new ledger, as Pulsar
does on every load) and re-opens one durable subscription per cursor the ledger has kept, so
consumers resume where they were after a restart.

Publishing (:meth:`Topic.check_publish`, called by :class:`broker.topics.producer.Producer` for every SEND) parses
the entry's metadata once, runs the delayed-delivery publish guard (PIP-315 max delay,
PIP-437 fixed delay; :mod:`broker.delayed.guard`) when the entry or the policy asks for it,
and appends the entries to the ledger as a run (:meth:`append_run`): the ledger tells the
run itself once its entries are durable, and its producer answers from that call. The
ledger's listener (``self.subscriptions.on_durable``, once per group commit) only tells
subscriptions that entries exist, at once: inside the store's hand-back of the commit, whose
receipts and MESSAGEs leave in one held write per connection (:mod:`broker.net.output`).

Lifecycle: one :class:`TopicState` (OPEN, TERMINATED, FENCED, CLOSED), read by two guards:
:meth:`_check_publishing` (SENDs and producers: OPEN only) and :attr:`serving`
(subscriptions, housekeeping: OPEN or TERMINATED).

Producers join through :meth:`attach_producer`, the one way in: the topic checks its own
state and backlog quota, recovers the name's sequence state, then ``self.admission``
(:class:`broker.topics.access_modes.ProducerAdmission`, shared with non-persistent topics)
attaches or queues it: it owns the attached producers, the WaitForExclusive line, fencing
and promotion.

Subscriptions are ``self.subscriptions``
(:class:`broker.topics.topic_subscriptions.TopicSubscriptions`: the dict by name, creating and
deleting them, the new-entries notification). Counters and rates are ``self.meters``
(:class:`broker.topics.meters.TopicMeters`): plain ints incremented on the hot path and read at
scrape time (:mod:`broker.metrics`, :mod:`broker.topics.stats`).

Replace by key (``self.replace_by_key``, :mod:`broker.topics.replace_by_key`): while the
``delayedDeliveryReplaceByKey`` policy is on, each run's keyed entries are recorded as they
become durable; a load rebuilds that record from the backlog before anything is dispatched.

The delayed-delivery policy is resolved once and cached by ``self.delivery``
(:class:`broker.topics.delivery.TopicDelivery`, which also builds what the subscriptions are
made with); the service drops the cache (``delivery.invalidate_policy``) when a namespace or
topic policy changes, so the next message sees the change without a restart.

Re-sent messages are not stored twice: :class:`broker.topics.dedup.MessageDeduplication`
(``self.dedup``) keeps the per-producer-name sequence state, recovered when the topic loads
and snapshotted into the ``pulsar.dedup`` cursor by :meth:`housekeeping` and :meth:`close`
(see :mod:`broker.topics.dedup`). That cursor is not a subscription.

Trimming: :meth:`housekeeping` (once a second, off the hot path) lets ``self.trimmer``
(:class:`broker.topics.trim.LedgerTrimmer`) decide whether sealed ledgers every cursor has passed
are deleted now; never at load. The admin documents (``topic_stats``, ``internal_stats``)
are built by :mod:`broker.topics.stats`. Compaction (``self.compaction``,
:mod:`broker.topics.compaction`) keeps the ``__compaction`` cursor, which is not a subscription
either.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Protocol

from broker.config import BrokerConfig
from broker.delayed.guard import DelayTooLongError, check_and_start_publish
from broker.delayed.keyed_snapshot import KeyedSnapshots
from broker.delayed.known_times import MAX_CHECKED, CheckedTimes
from broker.delayed.policy import DelayPolicy
from broker.delayed.relocate import DelayedRelocator
from broker.metrics.entry_size import ENTRY_SIZE_BUCKETS_BYTES
from broker.subscriptions.dispatch_rate import TopicDispatch
from broker.subscriptions.subscription import Subscription
from broker.topics.access_modes import Admission, ProducerAccess, ProducerAdmission
from broker.topics.activity import TopicActivity
from broker.topics.backlog_policies import BacklogPolicies
from broker.topics.compaction import COMPACTION_CURSOR, TopicCompaction
from broker.topics.dedup import DEDUP_CURSOR, MessageDeduplication
from broker.topics.delivery import TopicDelivery
from broker.topics.entry_metadata import EntryStamper
from broker.topics.meters import TopicMeters
from broker.topics.names import TopicName
from broker.topics.policies import PolicyStore
from broker.topics.producer import Producer, ProducerRequest, ProducerTransport
from broker.topics.publish_bounds import NO_BOUNDS, SendBounds
from broker.topics.publish_rate import PublishRateLimiter
from broker.topics.publish_refusals import PublishRefusals
from broker.topics.replace_by_key import TopicReplaceByKey
from broker.topics.storage_errors import StorageOp, storage_failure
from broker.topics.subscribe_rate import SubscribeRateLimiter
from broker.topics.termination import TERMINATED_REASON, Termination
from broker.topics.topic_state import TopicState
from broker.topics.topic_subscriptions import TopicSubscriptions, close_subscription
from broker.topics.trim import LedgerTrimmer
from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.dispatch_view import DispatchView
from broker.transactions.pending_ack import AckTarget
from broker.transactions.service import TransactionService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import (
    MetadataError,
    NotAllowedError,
    RequestError,
    ServiceNotReadyError,
    TopicTerminatedError,
)
from protocol.metadata import check_publish_metadata, entry_info
from protocol.send_accel import scan_publish_metadata
from storage.ledger import ManagedLedger
from storage.metadata import MetadataStore
from storage.positions import Position
from storage.segment_file import DurableSink
from storage.segments import MAX_RECORD_BYTES
from storage.shadow import ShadowLedger
from storage.snapshots import SnapshotStore

__all__ = ["Topic"]

log = logging.getLogger("horae.topic")

#: Pulsar's answer to a SEND on a shadow topic (Producer.checkAndStartPublish).
SHADOW_SEND_REFUSAL = "Cannot send messages to a shadow topic"

class TopicHost(Protocol):
    """What a topic may ask of the registry that loaded it (implemented by
    :class:`broker.topics.service.BrokerService`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def snapshots(self) -> SnapshotStore:
        """Bucket snapshots of delayed-delivery trackers."""
        ...

    def resolve_delay_policy(self, name: TopicName) -> DelayPolicy: ...

    @property
    def policies(self) -> PolicyStore: ...

    # storage's MetadataStore (compaction results)
    @property
    def metadata(self) -> MetadataStore: ...

    #: Refused publishes by reason; refuses producer creation while storage is read-only.
    publish_refusals: PublishRefusals

    #: Which topics moved lately (the rate and housekeeping tick visits those).
    activity: TopicActivity

    async def unload_topic(self, full: str) -> None: ...

    #: Transactions (None: transactionCoordinatorEnabled is false).
    transactions: TransactionService | None


_OPEN = TopicState.OPEN
#: The entry-size histogram bucket of an entry of that many bytes.
_size_bucket = partial(bisect.bisect_left, ENTRY_SIZE_BUCKETS_BYTES)
_SERVING = frozenset({TopicState.OPEN, TopicState.TERMINATED})


class Topic:
    """A loaded topic (see the module docstring)."""

    def __init__(self, host: TopicHost, name: TopicName, ledger: ManagedLedger) -> None:
        self.host = host
        self.name = name
        self.full = name.full
        self.ledger = ledger
        #: The source topic a shadow topic reads (broker/topics/shadows.py); None otherwise.
        self.shadow_source: str | None = (
            ledger.source_name if isinstance(ledger, ShadowLedger) else None)
        self.loop = host.loop
        self.admission = ProducerAdmission(self.full, self.producer_success, self._accepting)
        self.subscriptions = TopicSubscriptions(self, host.snapshots)
        #: What its subscriptions are built with (delayed-delivery policy, tracker factory, ...).
        self.delivery = TopicDelivery(host, name, self.subscriptions)
        self.publish_rate = PublishRateLimiter()  # its rate is set at each producer creation
        self.subscribe_rate = SubscribeRateLimiter()  # its rate is set at each SUBSCRIBE
        # dispatchRate, shared by the subscriptions (its rate is set at each SUBSCRIBE)
        self.topic_dispatch = TopicDispatch(
            lambda: (self.meters.msg_out_counter, self.meters.bytes_out_counter),
            lambda: self.meters.rates()[:2])
        self._max_message_size = host.config.max_message_size  # bounds a chunked message
        #: the topic's maxMessageSize policy (0: none), set at each producer creation
        self.max_message_size_policy = 0
        # the namespace's encryptionRequired, as of the last producer's arrival
        self.encryption_required = False
        self.state = TopicState.OPEN
        self._guarded = name.is_persistent  # the publish guard is for persistent topics
        self.loaded_ms = int(time.time() * 1000)
        self.dedup = MessageDeduplication(
            self, host.config.broker_deduplication_max_number_of_producers)
        self.trimmer = LedgerTrimmer(self)
        #: Copies long-delayed messages forward so the ledgers they hold can be trimmed.
        cfg = host.config
        self.relocator = DelayedRelocator(
            self, self.subscriptions.values, self.trimmer.bound, self.trimmer.trim_now,
            # a shadow's ledgers are its source's: the source relocates what they hold
            enabled=cfg.delayed_delivery_relocation_enabled and self.shadow_source is None,
            min_delay_ms=cfg.delayed_delivery_relocation_min_delay_millis,
            interval_s=cfg.delayed_delivery_relocation_interval_seconds)
        self.compaction = TopicCompaction(self, host.metadata)
        self.termination = Termination(host.metadata, self.full)
        interceptors = host.config.entry_metadata_interceptors
        self.entry_stamper = (EntryStamper(interceptors, host.metadata, self.full)
                              if interceptors and name.is_persistent else None)
        self.backlog = BacklogPolicies(self, host.policies, host.config)
        #: The deliver times the publish check read, carried to the append (known_times).
        self.checked_times = CheckedTimes()
        records = host.policies.records
        self.replace_by_key = TopicReplaceByKey(
            ledger, lambda: name.is_persistent and host.policies.delayed_replace_by_key(name),
            self.subscriptions.values, KeyedSnapshots(host.snapshots, host.metadata, name.full, loop=self.loop),
            generation=lambda: records.generation)
        self.meters: TopicMeters = TopicMeters(self.loop, ledger, self.subscriptions,
                                               self.admission, self.backlog, self.dedup)
        #: The publish-latency histogram the producers increment (the meters' own list).
        self.publish_latency_buckets = self.meters.publish_latency_buckets
        txns = host.transactions
        #: This topic's transaction buffer (None without transactions or when not persistent).
        self.txn_buffer: TopicTransactionBuffer | None = (
            txns.buffer_for(self.full)
            if txns is not None and name.is_persistent and self.shadow_source is None else None)

    # ------------------------------------------------------------------ loading

    @classmethod
    async def load(cls, host: TopicHost, name: TopicName, ledger: ManagedLedger) -> Topic:
        """A topic over its freshly opened *ledger*, with its durable subscriptions restored."""
        topic = cls(host, name, ledger)
        ledger.add_listener(topic.subscriptions.on_durable)
        for cursor_name in list(ledger.cursors):
            if cursor_name == DEDUP_CURSOR:
                topic.dedup.start_recovery()
                continue
            if cursor_name == COMPACTION_CURSOR:
                continue
            try:
                sub = await Subscription.open(topic, cursor_name, durable=True,
                                              initial_position="latest", start_message_id=None)
            except Exception:
                log.exception("could not restore subscription %s on %s", cursor_name, name.full)
                continue
            topic.subscriptions[cursor_name] = sub
            topic.replace_by_key.adopt(sub)
        topic.subscriptions.update_caching()
        subs = list(topic.subscriptions.values())
        if topic.replace_by_key.sync(subs) is not None:
            # Before anything is dispatched: what the previous run had replaced stays replaced.
            await topic.replace_by_key.rebuild(subs)
        if topic.txn_buffer is not None and host.transactions is not None:
            # Before anything is dispatched: what transactions hid or hold stays so.
            await host.transactions.attach(topic.txn_buffer, ledger, topic.subscriptions.notify_new_entries)
        await topic.compaction.load()
        await topic.termination.load()
        if topic.entry_stamper is not None and topic.entry_stamper.indexes:
            last = ledger.last_confirmed
            entry = await ledger.read_entry(last) if last is not None else None
            await topic.entry_stamper.recover(entry.data if entry is not None else None)
        if topic.termination.recorded:
            topic.state = TopicState.TERMINATED
        # No trim at load: only what happens from now on triggers one (broker.topics.trim).
        topic.trimmer.reset_trigger()
        return topic

    # ------------------------------------------------------------------ publishing

    def append_run(self, entries: list[bytes], sink: DurableSink,
                   messages: Sequence[int]) -> None:
        """Append entries that passed :meth:`check_publish` (of ``messages[i]`` messages each)
        as one run: *sink* is told once they are durable (or failed), with one completion for
        all (storage's append_run). With broker entry metadata configured they are stored
        with it (``self.entry_stamper``). Raises the SEND_ERROR of a failed append
        (PersistenceError / ServiceNotReadyError); then none was appended."""
        stamper = self.entry_stamper
        if stamper is not None and self.ledger.accepts_appends:
            entries = stamper.stamp(entries, messages)
        self.replace_by_key.sync(self.subscriptions.values())
        sink = self.replace_by_key.sink_for(entries, sink, self.checked_times)
        if self.txn_buffer is not None:
            sink = self.txn_buffer.sink_for(entries, sink)
        try:
            self.ledger.append_run(entries, sink)
        except Exception as exc:   # never out of the publish path: a SEND_ERROR instead
            raise self._append_failed(exc) from None
        meters = self.meters
        meters.entries_added_counter += len(entries)
        buckets = meters.entry_size_buckets
        if len(entries) == 1:   # a lone send's run
            size = len(entries[0])
            buckets[bisect.bisect_left(ENTRY_SIZE_BUCKETS_BYTES, size)] += 1
            meters.entry_size_sum_bytes += size
            return
        sizes = list(map(len, entries))
        if not sizes:
            return
        # A run's entries usually share one size bucket (a producer's messages look alike):
        # then one bisect for the run, not one per entry; otherwise (a run mixing sizes, as
        # reschedules and their empty tombstones do) the bisects and the count run in C.
        bucket = bisect.bisect_left(ENTRY_SIZE_BUCKETS_BYTES, min(sizes))
        if bucket == bisect.bisect_left(ENTRY_SIZE_BUCKETS_BYTES, max(sizes)):
            buckets[bucket] += len(sizes)
        else:
            for bucket, count in Counter(map(_size_bucket, sizes)).items():
                buckets[bucket] += count
        meters.entry_size_sum_bytes += sum(sizes)

    def _append_failed(self, exc: Exception) -> RequestError:
        """The SEND_ERROR of a failed append (reloading the topic when storage asks for it)."""
        failure = storage_failure(exc, StorageOp.PUBLISH)
        if failure.reload_topic:
            self.on_persistence_failure(exc)
        return failure.error

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]:
        """Everything a SEND is checked for before its append: (entry as it will be stored,
        messages in it, whether it is a chunk other than the last of its message).

        Raises RequestError subclasses (SEND_ERROR): MalformedEntryError (ChecksumError code),
        NotAllowedError (max delay exceeded, the topic's maxMessageSize), ServiceNotReadyError,
        TopicTerminatedError.
        """
        if self.state is not _OPEN:
            self._check_publishing()
        if self.shadow_source is not None:
            raise NotAllowedError(SHADOW_SEND_REFUSAL)
        limit = self.max_message_size_policy
        if limit and len(entry) - 4 > limit:   # metadata and payload, as Pulsar measures
            raise NotAllowedError("Exceed maximum message size")
        # Hot path: the metadata is checked from its bytes (protocol.metadata_scan), no protobuf;
        # a layout the scan declines gets one upb parse, which accepts it or raises.
        max_size = self._max_message_size
        scanned = scan_publish_metadata(entry, max_size)
        md: pb.MessageMetadata | None = None
        at_varint: bytes | None = None      # deliver_at_time as the scan found it
        if scanned is None:
            md, messages, partial = check_publish_metadata(entry, max_size)
            delayed = md.HasField("deliver_at_time")
        else:
            messages, partial, at_varint = scanned
            delayed = at_varint is not None
        if self.encryption_required:
            if md is None:
                md = check_publish_metadata(entry, max_size)[0]
            if not md.encryption_keys:
                raise MetadataError("Messages must be encrypted")   # Pulsar's
        delivery = self.delivery
        policy = delivery.resolved
        if policy is None:
            policy = delivery.delay_policy()
        # Only where the guard can act (its documented no-op cases skip the EntryInfo parse);
        # the guard needs the parsed message, and gets the one parse there is.
        if self._guarded and policy.active and (
                policy.fixed_delay_ms > 0 or (policy.max_delay_ms > 0 and delayed)):
            if md is None:
                md = check_publish_metadata(entry, max_size)[0]
            try:
                result = check_and_start_publish(entry, entry_info(md), policy, md)
            except DelayTooLongError as exc:
                self.meters.delayed_rejected_counter += exc.messages
                raise
            self.meters.fixed_delay_overridden_counter += result.overridden_messages
            if result.entry is not entry:
                return result.entry, messages, partial   # rewritten: its time is not carried
        # its deliver time (None: none), carried to the append and read there where it is
        # needed: the dispatchers hold a delayed entry unread (every checked entry is noted,
        # so that the append finds its run whole)
        checked = self.checked_times
        if len(checked.entries) < MAX_CHECKED:
            checked.entries.append(entry)
            checked.varints.append(at_varint)
        return entry, messages, partial

    def send_bounds(self) -> SendBounds:
        """What the producer may take without :meth:`check_publish` right now
        (:mod:`broker.topics.publish_bounds`): a plain entry up to ``plain`` bytes, one
        delayed or keyed message up to ``single``. ``plain`` is -1 when some check could act
        on a plain entry (the topic not open, a shadow, encryption required, a fixed delivery
        delay); ``single`` is -1 then and also while the max-delay guard is in force, which
        must see every delayed entry. The producer reads them once per run of SENDs: they must
        stay the exact conditions under which :meth:`check_publish` returns
        ``(entry, 1, False)`` for such an entry."""
        if self.state is not _OPEN or self.shadow_source is not None or self.encryption_required:
            return NO_BOUNDS
        single_allowed = True
        if self._guarded:
            delivery = self.delivery
            policy = delivery.resolved
            if policy is None:
                policy = delivery.delay_policy()
            if policy.active and policy.fixed_delay_ms > 0:
                return NO_BOUNDS   # the guard stamps a fixed delay on every message
            single_allowed = not (policy.active and policy.max_delay_ms > 0)
        limit = self.max_message_size_policy
        bound = limit + 4 if limit else MAX_RECORD_BYTES   # metadata and payload, as above
        return SendBounds(bound, bound if single_allowed else -1, self._max_message_size,
                          self.checked_times)

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None:
        """Called by producers for the entries whose receipts were just sent (the latency
        histogram buckets are incremented by the producer directly)."""
        meters = self.meters
        meters.msg_in_counter += messages
        meters.bytes_in_counter += size
        meters.publish_latency_sum_ms += latency_sum_ms
        meters.publish_latency_count += entries
        self.host.activity.touch(self)

    def publish_refused(self, reason: str, refused: int) -> None:
        """Producers count the SENDs they drop because the store is read-only."""
        self.host.publish_refusals.count(reason, refused)

    def on_persistence_failure(self, exc: object) -> None:
        """The ledger refused or failed a write: fence the topic and reload it.

        Producers are disconnected so clients look the topic up again and re-send to a fresh
        ledger; nothing that failed was acknowledged.
        """
        if self.state is TopicState.FENCED or self.state is TopicState.CLOSED:
            return
        self.state = TopicState.FENCED
        log.error("persistence failure on %s: %s; reloading the topic", self.full, exc)
        self.loop.create_task(self.host.unload_topic(self.full))

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
        """The one way a producer joins the topic: the topic's state and backlog quota, the
        name's sequence state recovered (before PRODUCER_SUCCESS tells the client where its
        sequence stands), then attached by its access mode and ``maxProducersPerTopic``
        (0 = no limit; :mod:`broker.topics.access_modes`) or queued (WaitForExclusive).
        Returns the producer, its answer (PRODUCER_SUCCESS) and whether it is attached now
        (else queued: the answer says ``producer_ready=false``). Raises ServiceNotReadyError,
        TopicTerminatedError, ProducerBusyError / ProducerFencedError, the quota's errors."""
        await self.dedup.prepare()
        producer = Producer(transport, self, request.producer_id, request.name,
                            request.access_mode, request.user_provided_name, request.metadata,
                            request.epoch)
        self._check_publishing()
        self.backlog.admit_producer()
        admission = self.admission.add(producer, request.topic_epoch, max_producers)
        # Only an admitted producer holds its name's sequence state (a refused one would keep
        # the name from ever being evicted); no SEND comes before PRODUCER_SUCCESS.
        self.dedup.attach(producer)
        if admission is Admission.QUEUE:
            self.admission.queue(producer, request.request_id, request.schema_version)
            return producer, C.encode_producer_success(
                request.request_id, producer.name, -1, request.schema_version,
                ready=False), False
        return producer, self.producer_success(producer, request.request_id,
                                               request.schema_version), True

    def _check_publishing(self) -> None:
        """The one guard of SENDs and producers: raises unless the topic is OPEN."""
        state = self.state
        if state is _OPEN:
            return
        if state is TopicState.TERMINATED:
            raise TopicTerminatedError(TERMINATED_REASON)
        raise ServiceNotReadyError(f"Topic {self.full} is being closed or reloaded")

    @property
    def serving(self) -> bool:
        """Subscriptions and housekeeping go on: OPEN or TERMINATED."""
        return self.state in _SERVING

    def _accepting(self) -> bool:
        return self.state in _SERVING

    def producer_success(self, producer: Producer, request_id: int,
                         schema_version: bytes | None) -> bytes:
        """PRODUCER_SUCCESS for a producer that now holds the topic (created, or a queued
        WaitForExclusive one promoted): the name's last persisted sequence id only with
        deduplication on (Pulsar says nothing of it otherwise), the topic epoch for every
        access mode but Shared."""
        last_sequence_id = producer.seq_state.persisted if self.dedup_enabled() else -1
        return self.access.producer_success(request_id, producer, last_sequence_id,
                                            schema_version)

    # ------------------------------------------------------------------ transactions

    def transaction_view(self, subscription: str) -> DispatchView | None:
        """What *subscription*'s dispatcher checks this round (None: nothing)."""
        txns = self.host.transactions
        if txns is None or self.txn_buffer is None:
            return None
        return txns.dispatch_view(self.full, subscription)

    def ack_target(self, subscription: str) -> AckTarget | None:
        return self.subscriptions.get(subscription)

    async def forget_pending_acks(self, subscription: str) -> None:
        txns = self.host.transactions
        if txns is not None:
            await txns.pending_acks.forget_subscription(self.full, subscription)

    def check_not_in_open_transaction(self, pos: Position, action: str) -> None:
        """Refuse (NotAllowed) to *action* a message of a transaction that has not ended: it is
        not visible yet, and its commit or abort decides whether it ever is."""
        buffer = self.txn_buffer
        txn = buffer.open_transaction_of(pos) if buffer is not None else None
        if txn is not None:
            raise NotAllowedError(
                f"Cannot {action} message {pos}: it belongs to transaction {txn}, which is "
                "still open; it can be done once the transaction has committed")

    # ------------------------------------------------------------------ delayed policy

    def dedup_enabled(self) -> bool:
        """The deduplication policy in force (topic > namespace > brokerDeduplicationEnabled)."""
        return self.host.policies.dedup_enabled(self.name)

    @property
    def partition_index(self) -> int:
        return self.name.partition_index

    # ------------------------------------------------------------------ activity

    def touch(self) -> None:
        """A counter moved (dispatch, ack): sample this topic's rates while it is active."""
        self.host.activity.touch(self)

    # ------------------------------------------------------------------ housekeeping

    def housekeeping(self, now: float) -> None:
        """Once a second (the service's tick): dedup snapshot, then maybe a trim."""
        if not self.serving:
            return
        self.dedup.snapshot(now)
        self.compaction.maybe_trigger(self.host.policies.compaction_threshold(self.name))
        self.trimmer.tick(now)
        self.relocator.tick(now)
        self.backlog.tick(now)
        subs = list(self.subscriptions.values())
        self.replace_by_key.sync(subs)
        self.replace_by_key.prune(subs)

    async def before_trim(self) -> None:
        """Called by the trimmer before it deletes ledgers: the entry index they hold is
        recorded first (:mod:`broker.topics.entry_metadata`)."""
        if self.entry_stamper is not None:
            await self.entry_stamper.record()

    def retention(self) -> tuple[int, int]:
        """(minutes, MB) of retention in force (the trimmer keeps that much consumed data)."""
        return self.host.policies.retention(self.name)

    # ------------------------------------------------------------------ termination

    @property
    def terminated(self) -> bool:
        """Terminated, durably: no message will ever be added."""
        return self.termination.recorded

    async def terminate(self) -> Position | None:
        """Pulsar's terminate (:meth:`broker.topics.termination.Termination.terminate`);
        subscriptions with nothing left to read tell their consumers they reached the end."""
        if self.termination.recorded:
            return self.termination.last
        self._check_publishing()
        self.state = TopicState.TERMINATED  # new SENDs and producers are refused from now on
        try:
            last = await self.termination.terminate(self.producers,
                                                    lambda: self.ledger.last_confirmed)
        except BaseException:
            if self.state is TopicState.TERMINATED:  # never terminated only in memory
                self.state = _OPEN
            raise
        for sub in list(self.subscriptions.values()):
            sub.check_end_of_topic()
        return last

    # ------------------------------------------------------------------ lifecycle

    async def close(self, *, disconnect_clients: bool = True) -> None:
        """Detach producers and subscriptions (telling clients, who reconnect) and close the
        ledger; in-flight appends complete first."""
        if self.state is TopicState.CLOSED:
            return
        self.state = TopicState.CLOSED
        self.host.activity.forget(self)
        for p in list(self.producers.values()):
            if disconnect_clients:
                p.disconnect()
            else:
                p.close()
        await self.relocator.close()
        for sub in list(self.subscriptions.values()):
            await close_subscription(sub, disconnect_clients=disconnect_clients)
        await self.trimmer.close()
        if self.entry_stamper is not None:
            try:
                await self.entry_stamper.record()
            except Exception:
                log.exception("recording the entry index of %s failed", self.full)
        await self.backlog.close()
        await self.compaction.close()
        if self.txn_buffer is not None and self.host.transactions is not None:
            await self.host.transactions.detach(self.txn_buffer, self.ledger)
        self.dedup.close(self.loop.time())
        try:
            await self.ledger.close()
        except Exception:
            log.exception("closing ledger of %s failed", self.full)

    def __repr__(self) -> str:
        return f"<Topic {self.full}>"

