"""TransactionService: the transaction side of the broker, built once when
``transactionCoordinatorEnabled`` is true.

Theory of operation: it owns the durable log, the coordinator, the transaction buffer of every
topic a transaction touched and the pending-ack store of every subscription one acknowledged
in. At :meth:`start` the log is replayed (coordinator table, pending acknowledgements of open
transactions, the set of topics to scan at load) and the coordinator resumes (timers, and the
second phase of transactions a crash caught between phases). Topics reach it through
:meth:`buffer_for` / :meth:`attach` (load) and :meth:`dispatch_view` (dispatch); the
coordinator reaches topics through the loader the broker hands in (:class:`TopicLoader`).
Figures for admin and metrics: :meth:`coordinator_stats`, :meth:`transaction`,
:meth:`buffer_stats`, :meth:`pending_ack_stats`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.buffer_snapshot import BufferSnapshots
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.dispatch_view import DispatchView
from broker.transactions.ids import TxnId, TxnStatus, invalid_status, not_found
from broker.transactions.limits import DEFAULT_LIMITS, TransactionLimits
from broker.transactions.log import LOG_LEDGER, TransactionLog
from broker.transactions.log_batch import BatchSettings
from broker.transactions.pending_ack import (
    AckTarget,
    PendingAck,
    PendingAckStore,
    PendingAckStores,
)
from broker.transactions.stats import (
    CoordinatorStats,
    PendingAckStats,
    TopicBufferStats,
    TransactionStats,
)
from protocol.errors import NotAllowedError
from storage.ledger import ManagedLedger
from storage.positions import Position
from storage.store import SegmentStore

__all__ = ["COORDINATOR_ID", "TC_ASSIGN_PARTITIONS", "TC_ASSIGN_TOPIC", "TopicLoader", "TransactionService",
           "TransactionSettings", "TxnTopic"]

log = logging.getLogger("horae.transactions")

COORDINATOR_ID: Final = 0
#: The topic whose partitions Pulsar's clients look up to find the coordinators: partition N
#: is coordinator N. One coordinator here, so one partition.
TC_ASSIGN_TOPIC: Final = "persistent://pulsar/system/transaction_coordinator_assign"
TC_ASSIGN_PARTITIONS: Final = 1


class TxnTopic(Protocol):
    """What the service uses of a loaded topic."""

    @property
    def ledger(self) -> ManagedLedger: ...

    def ack_target(self, subscription: str) -> AckTarget | None: ...


TopicLoader = Callable[[str], Awaitable["TxnTopic | None"]]
"""Load a persistent topic by full name without creating it (None: it does not exist)."""


LoggedAck = tuple[TxnId, str, str, list[PendingAck], bool]
"""A logged acknowledgement: transaction, topic, subscription, positions, cumulative."""


def _logged_acks(records: list[tuple[Position, dict[str, Any]]]) -> tuple[set[str],
                                                                          list[LoggedAck]]:
    """From the replayed log: the topics transactions produced to (their buffers scan them at
    load) and every acknowledgement record, in log order (unreadable records skipped), less
    those on a subscription that a later ``unsub`` record says was deleted."""
    topics: set[str] = set()
    acks_logged: list[LoggedAck] = []
    for _, rec in records:
        op = rec.get("op")
        if op in ("parts", "checkpoint"):
            topics.update(str(t) for t in rec.get("topics", ()))
        if op == "unsub":   # the subscription was deleted: what was acknowledged on it is void
            gone = (str(rec.get("topic")), str(rec.get("sub")))
            acks_logged = [a for a in acks_logged if (a[1], a[2]) != gone]
            continue
        if op != "ack":
            continue
        try:
            txn = TxnId(int(rec["m"]), int(rec["l"]))
            acks: list[PendingAck] = [
                (Position(int(p[0]), int(p[1])), list(p[2]) if p[2] else None)
                for p in rec["pos"]]
            topic, sub = str(rec["topic"]), str(rec["sub"])
        except (KeyError, TypeError, ValueError, IndexError):
            continue
        if acks:
            acks_logged.append((txn, topic, sub, acks, bool(rec.get("cum"))))
    return topics, acks_logged


async def _nothing() -> None:
    return None


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("transaction buffer snapshot: %r", task.exception())


@dataclass(frozen=True)
class TransactionSettings:
    """The broker's transaction settings the service uses (broker.conf names in
    :class:`broker.config.BrokerConfig`)."""

    log_batching: BatchSettings = field(default_factory=BatchSettings)
    pending_ack_batching: BatchSettings = field(default_factory=BatchSettings)
    snapshot_max_transactions: int = 1000
    snapshot_min_interval_ms: int = 5000
    limits: TransactionLimits = DEFAULT_LIMITS


class TransactionService:
    def __init__(self, store: SegmentStore, loop: asyncio.AbstractEventLoop,
                 settings: TransactionSettings | None = None) -> None:
        self._store = store
        self._loop = loop
        self.settings = settings or TransactionSettings()
        self.limits = self.settings.limits
        self._log: TransactionLog | None = None
        self._coordinator: TransactionCoordinator | None = None
        self._loader: TopicLoader | None = None
        self._buffers: dict[str, TopicTransactionBuffer] = {}
        #: the pending-ack stores; a deleted subscription's go through
        #: ``pending_acks.forget_subscription``
        self.pending_acks = PendingAckStores()
        #: Topics a transaction produced to (from the log): their buffers scan them at load
        #: when they have no snapshot.
        self._txn_topics: set[str] = set()
        self.snapshots = BufferSnapshots(store.metadata, self.settings.snapshot_max_transactions,
                                         self.settings.snapshot_min_interval_ms, loop)
        self._snapshot_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, loader: TopicLoader) -> None:
        self._loader = loader
        self._log = await TransactionLog.open(self._store, self.settings.log_batching,
                                              self.settings.pending_ack_batching)
        self.pending_acks.submit = self._log.submit
        records = await self._log.records()
        self._coordinator = TransactionCoordinator(COORDINATOR_ID, self._log, self, self._loop,
                                                   self.limits)
        self._coordinator.replay(records)
        topics, logged = _logged_acks(records)
        self._txn_topics.update(topics)
        for txn, topic, sub, acks, cumulative in logged:
            status = self._coordinator.status(txn)
            if status in (TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.ABORTING):
                self.pending_store(topic, sub).replay(txn, acks, cumulative)
                meta = self._coordinator.meta_of(txn)
                if meta is not None and not cumulative:
                    meta.pending_acks += len(acks)
        self._coordinator.resume()
        self._snapshot_task = self._loop.create_task(
            self.snapshots.run(lambda: list(self._buffers.values())))

    async def close(self) -> None:
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
        if self._coordinator is not None:
            await self._coordinator.close()
        if self._log is not None:
            await self._log.close()

    @property
    def coordinator(self) -> TransactionCoordinator:
        if self._coordinator is None:
            raise RuntimeError("transaction service not started")
        return self._coordinator

    # ------------------------------------------------------------------ topics

    def buffer_for(self, topic: str) -> TopicTransactionBuffer:
        buffer = self._buffers.get(topic)
        if buffer is None:
            buffer = TopicTransactionBuffer(topic, self.coordinator.status)
            buffer.on_detached = self._detached
            self._buffers[topic] = buffer
        return buffer

    async def attach(self, buffer: TopicTransactionBuffer, ledger: ManagedLedger,
                     on_readable: Callable[[], None]) -> None:
        """The topic of *buffer* loaded over *ledger*: recovered on its first load, from its
        snapshot and the entries after it, else by a scan of its entries when a logged
        transaction produced to it; then snapshotted, so the next load reads only what comes
        after (also an entry of a transaction that never added the topic)."""
        self._buffers[buffer.topic] = buffer   # the loaded topic's, even if released meanwhile
        buffer.attach(ledger, on_readable)
        if buffer.recovered:
            return
        await self.snapshots.recover(buffer, ledger, buffer.topic in self._txn_topics)

    async def detach(self, buffer: TopicTransactionBuffer, ledger: ManagedLedger) -> None:
        """The topic unloads: its buffer is snapshotted when it changed since its last one."""
        if buffer.recovered and (buffer.snapshot_upto != ledger.last_confirmed
                                 or buffer.ends_since_snapshot):
            await self.snapshots.save_now(buffer)
        buffer.detach(ledger)

    def _detached(self, buffer: TopicTransactionBuffer) -> None:
        """The topic of *buffer* unloaded: its buffer and idle pending-ack stores are dropped
        (no table keeps a row per topic ever loaded); what an ongoing transaction holds stays.
        A later load builds them anew (the buffer from the ledger, :meth:`attach`)."""
        topic = buffer.topic
        if self._buffers.get(topic) is not buffer or buffer.attached or buffer.holds_any:
            return
        if buffer.touched:
            self._txn_topics.add(topic)   # rebuilt by a scan of the ledger at the next load
        del self._buffers[topic]
        for key in [k for k, store in self.pending_acks.items() if k[0] == topic and store.idle]:
            del self.pending_acks[key]

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: its buffer and pending acknowledgements go."""
        self._buffers.pop(topic, None)
        self._txn_topics.discard(topic)
        forgotten = self._loop.create_task(self.snapshots.forget(topic))
        forgotten.add_done_callback(_log_failure)
        for key in [k for k in self.pending_acks if k[0] == topic]:
            del self.pending_acks[key]

    async def add_partitions(self, txn: TxnId, topics: list[str],
                             full: Callable[[str], str] = str) -> None:
        """ADD_PARTITION_TO_TXN of *topics* as the client named them (*full* resolves a name):
        logged (durable: their buffers are rebuilt from their ledgers at load from now on),
        then the topics are known to have transactions."""
        await self.coordinator.add_partitions(txn, topics, full)
        self._txn_topics.update(full(t) for t in topics)

    def registered_topics(self) -> list[str]:
        return sorted(self._txn_topics)

    def partitions_holding(self, txn: TxnId) -> list[str]:
        return [topic for topic, buffer in self._buffers.items() if buffer.holds(txn)]

    def pending_store(self, topic: str, subscription: str) -> PendingAckStore:
        key = (topic, subscription)
        store = self.pending_acks.get(key)
        if store is None:
            store = self.pending_acks[key] = PendingAckStore(
                topic, subscription, self.limits.max_pending_acks_per_subscription)
        return store

    def dispatch_view(self, topic: str, subscription: str) -> DispatchView | None:
        """The view a dispatcher checks this round, None when nothing is to check."""
        buffer = self._buffers.get(topic)
        pending = self.pending_acks.get((topic, subscription))
        if pending is not None and not pending.active:
            pending = None
        if buffer is None or (not buffer.active and pending is None):
            return None
        return DispatchView(buffer, pending)


    # ------------------------------------------------------------------ acknowledgements

    def acknowledge(self, txn: TxnId, topic: str, subscription: str,
                    acks: list[PendingAck], cumulative: bool,
                    target: AckTarget) -> Awaitable[None]:
        """An ACK in transaction *txn*: checked, logged (durable), then pending.

        The checks run and the log record is queued now, in the caller's loop iteration, so
        the record shares an fsync with whatever that iteration wrote (the SEND a
        consume-process-produce client sent just before the ACK); the awaitable finishes
        once the record is durable. A RequestError of the checks is raised now."""
        meta = self.coordinator.open_meta(txn)
        if not acks:
            return _nothing()
        if (topic, subscription) not in meta.reached_subscriptions:
            # Pulsar's clients add the subscription first; one that did not is added here, so
            # the end of the transaction reaches this store.
            return self._acknowledge_after_adding(txn, topic, subscription, acks, cumulative,
                                                  target)
        return self._log_ack(txn, topic, subscription, acks, cumulative, target)

    async def _acknowledge_after_adding(self, txn: TxnId, topic: str, subscription: str,
                                        acks: list[PendingAck], cumulative: bool,
                                        target: AckTarget) -> None:
        await self.coordinator.add_subscriptions(txn, [(topic, subscription)])
        await self._log_ack(txn, topic, subscription, acks, cumulative, target)

    def _log_ack(self, txn: TxnId, topic: str, subscription: str, acks: list[PendingAck],
                 cumulative: bool, target: AckTarget) -> asyncio.Future[None]:
        meta = self.coordinator.open_meta(txn)
        counted = 0 if cumulative else len(acks)
        limit = self.limits.max_pending_acks_per_txn
        if meta.pending_acks + counted > limit:
            raise NotAllowedError(
                f"Transaction {txn} holds {meta.pending_acks} pending acknowledgements; "
                f"{counted} more would pass the {limit} one transaction may hold "
                "(maxPendingAcksPerTransaction)")
        store = self.pending_store(topic, subscription)
        store.check(txn, acks, cumulative, target.cursor, target.batch_acks)
        assert self._log is not None
        store.reserve(txn, acks, cumulative)   # others conflict while the record is written
        meta.pending_acks += counted
        try:
            written = self._log.submit({
                "op": "ack", "m": txn.most, "l": txn.least, "topic": topic,
                "sub": subscription, "cum": cumulative,
                "pos": [[p.ledger_id, p.entry_id, words] for p, words in acks]})
        except BaseException:
            meta.pending_acks -= counted
            store.release(txn, acks, cumulative)
            raise
        done: asyncio.Future[None] = self._loop.create_future()

        def durable(w: asyncio.Future[Position]) -> None:
            # On the loop once the record is durable (or failed): no task, no extra loop turn.
            # The bookkeeping follows the record, not the waiter: a waiter cancelled meanwhile
            # (its connection went) leaves a durable record that a restart replays as pending.
            store.release(txn, acks, cumulative)
            if w.cancelled():
                meta.pending_acks -= counted
                done.cancel()
                return
            exc = w.exception()
            if exc is not None:
                meta.pending_acks -= counted
                if not done.done():
                    done.set_exception(exc)
                return
            status = self.coordinator.status(txn)
            if status is not TxnStatus.OPEN:
                # Ending started meanwhile: the record names an ack the end did not see; a
                # replay finds the transaction ended (or ends it again with the same outcome).
                if not done.done():
                    done.set_exception(not_found(txn, status) if status is None or status.ended
                                       else invalid_status(txn, TxnStatus.OPEN, status))
                return
            store.add(txn, acks, cumulative, target)
            if not done.done():
                done.set_result(None)

        written.add_done_callback(durable)
        return done

    # ------------------------------------------------------------------ Participants

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None:
        loaded = await self._load(topic)
        if loaded is None:
            return   # deleted: nothing of the transaction is left to end there
        buffer = self.buffer_for(topic)   # the loaded topic's (attach)
        await buffer.end(txn, commit)
        if buffer.ends_since_snapshot >= self.snapshots.max_transactions:
            await self.snapshots.save_now(buffer)

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnId,
                                  commit: bool) -> None:
        store = self.pending_acks.get((topic, subscription))
        if store is None:
            return
        loaded = await self._load(topic)
        target = loaded.ack_target(subscription) if loaded is not None else None
        store.end(txn, commit, target)
        if commit and loaded is not None and target is not None:
            await loaded.ledger.flush_cursors()   # durable before COMMITTED is logged

    async def _load(self, topic: str) -> TxnTopic | None:
        assert self._loader is not None
        return await self._loader(topic)

    # ------------------------------------------------------------------ figures

    def coordinator_stats(self) -> CoordinatorStats:
        return self.coordinator.stats()

    def transaction(self, txn: TxnId) -> TransactionStats | None:
        return self.coordinator.transaction(txn)

    def ongoing_transactions(self) -> list[TransactionStats]:
        return self.coordinator.ongoing()

    def buffer_stats_of(self, topic: str) -> TopicBufferStats | None:
        buffer = self._buffers.get(topic)
        return buffer.stats() if buffer is not None else None

    def pending_ack_stats_of(self, topic: str, subscription: str) -> PendingAckStats | None:
        store = self.pending_acks.get((topic, subscription))
        return store.stats() if store is not None else None

    def buffer_stats(self) -> Mapping[str, TopicBufferStats]:
        return {topic: b.stats() for topic, b in self._buffers.items()}

    def pending_ack_stats(self) -> Mapping[tuple[str, str], PendingAckStats]:
        return {key: s.stats() for key, s in self.pending_acks.items()}

    def log_internal_stats(self) -> dict[str, Any]:
        """The transaction log's ledger (it holds the pending acknowledgements too)."""
        assert self._log is not None
        return {"name": LOG_LEDGER, "stats": self._log.internal_stats()}

    def in_buffer(self, topic: str, txn: TxnId) -> tuple[Position | None, bool]:
        """*txn* on *topic*'s buffer: (its first entry while open, aborted there)."""
        buffer = self._buffers.get(topic)
        return (None, False) if buffer is None else buffer.transaction_stats(txn)

    def cumulative_ack(self, topic: str, subscription: str, txn: TxnId) -> Position | None:
        """The cumulative acknowledgement *txn* holds on a subscription, if any."""
        store = self.pending_acks.get((topic, subscription))
        return None if store is None else store.cumulative_of(txn)
