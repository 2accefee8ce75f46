"""The pending-ack store of one subscription: acknowledgements made in a transaction.

Theory of operation
-------------------
An ACK carrying a transaction id does not touch the cursor. It is checked for conflicts as
Pulsar's PendingAckHandleImpl decides (below), logged (durable before ACK_RESPONSE), and kept
here; the message leaves its consumer's unacknowledged list and is not dispatched again while
the acknowledgement is pending. At the end of the transaction:

- commit: the acknowledgements are applied to the cursor (individual deletes, a mark-delete,
  batch index bits), and the cursor is flushed before the coordinator logs COMMITTED, so a
  committed acknowledgement is never lost (a crash before that replays COMMITTING and applies
  them again: applying is idempotent);
- abort: they are dropped and the messages go back to the dispatcher to be delivered again.

Conflicts (TransactionConflict): an individual acknowledgement of a message that is already
acknowledged, or pending in another transaction (individually or under its cumulative
acknowledgement); a cumulative acknowledgement while another transaction holds one, at or before
the mark-delete position, or over a message another transaction acknowledged individually.
Messages of one batch entry are told apart by their batch index: two transactions
acknowledging different messages of an entry do not conflict, the same message does
(:mod:`broker.transactions.batch_acks`).
The store outlives its subscription object (the service keeps it while transactions are open),
so a topic reload finds the pending acknowledgements of a restart's replay. A deleted
subscription's store goes with it (:meth:`PendingAckStores.forget_subscription`), as Pulsar's
delete drops the subscription's pending-ack store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from broker.transactions.batch_acks import BatchIndexAcks, acked_indexes
from broker.transactions.ids import TransactionConflictError, TxnId
from broker.transactions.limits import DEFAULT_MAX_PENDING_ACKS_PER_SUBSCRIPTION
from broker.transactions.stats import PendingAckStats
from protocol.errors import NotAllowedError
from storage.positions import Position

__all__ = ["MAX_REDELIVER_WALK", "AckTarget", "PendingAck", "PendingAckStore", "PendingAckStores"]

log = logging.getLogger("horae.transactions")

#: Positions an aborted cumulative acknowledgement hands back at most, each one a row of the
#: dispatcher's replay set. Only positions the dispatcher has passed need it (those from the
#: read position on are read again anyway), so it is walked only for entries read and held
#: while the acknowledgement was pending; past it the rest comes back when the subscription
#: rewinds (its consumers reconnect), and a warning says so.
MAX_REDELIVER_WALK = 100_000

PendingAck = tuple[Position, "list[int] | None"]
"""A position and its batch index ack set words (Java BitSet longs; None: the whole entry)."""


class AckCursor(Protocol):
    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def read_position(self) -> Position: ...

    def is_deleted(self, pos: Position) -> bool: ...

    def delete(self, positions: Iterable[Position]) -> None: ...

    def mark_delete(self, pos: Position) -> None: ...


class AckDispatcher(Protocol):
    def on_acked(self, positions: list[Position]) -> None: ...

    def add_replay(self, position: Position, sticky_hash: int | None = None) -> None: ...

    def schedule(self) -> None: ...


class AckLedger(Protocol):
    def next_position(self, pos: Position) -> Position: ...


class AckTarget(Protocol):
    """What the store uses of the live subscription (:class:`broker.subscriptions.subscription.
    Subscription` has all of it)."""

    @property
    def ledger(self) -> AckLedger: ...

    @property
    def cursor(self) -> AckCursor: ...

    @property
    def dispatcher(self) -> AckDispatcher | None: ...

    @property
    def batch_acks(self) -> dict[Position, int]: ...

    def check_end_of_topic(self) -> None: ...


def _bits(words: list[int]) -> int:
    bits = 0
    for i, word in enumerate(words):
        bits |= (word & 0xFFFFFFFFFFFFFFFF) << (64 * i)
    return bits


class PendingAckStore:
    """The pending acknowledgements of subscription *subscription* on *topic*."""

    def __init__(self, topic: str, subscription: str,
                 max_pending: int = DEFAULT_MAX_PENDING_ACKS_PER_SUBSCRIPTION) -> None:
        self.topic = topic
        self.subscription = subscription
        #: individual acknowledgements pending here at most (maxPendingAcksPerSubscription)
        self.max_pending = max_pending
        #: whole entries acknowledged individually: held from dispatch while pending
        self._individual: dict[Position, TxnId] = {}
        #: messages of batch entries acknowledged individually: the entry stays deliverable
        #: without them (:mod:`broker.transactions.batch_acks`)
        self._batch = BatchIndexAcks()
        #: batch entries (re)delivered without messages a transaction held: an abort hands
        #: those back by delivering the entry again
        self._filtered: set[Position] = set()
        self._by_txn: dict[TxnId, list[PendingAck]] = {}
        self._cumulative: dict[TxnId, Position] = {}
        #: positions the transaction's acknowledgements took from consumers: redelivered on
        #: abort
        self._released: dict[TxnId, list[Position]] = {}
        #: acknowledgements checked and being logged (:meth:`reserve`): they conflict already
        self._reserved: dict[Position, tuple[TxnId, int]] = {}
        self._reserved_cumulative: dict[TxnId, tuple[Position, int]] = {}
        self.committed_txns = 0
        self.aborted_txns = 0

    # ------------------------------------------------------------------ checks

    def _holders(self) -> dict[Position, TxnId]:
        """Individual acknowledgements pending or being logged, by position."""
        if not self._reserved:
            return self._individual
        return {**{p: t for p, (t, _) in self._reserved.items()}, **self._individual}

    def _cumulatives(self) -> dict[TxnId, Position]:
        if not self._reserved_cumulative:
            return self._cumulative
        merged = {t: p for t, (p, _) in self._reserved_cumulative.items()}
        for t, p in self._cumulative.items():
            merged[t] = max(p, merged.get(t, p))
        return merged

    def check(self, txn: TxnId, acks: list[PendingAck], cumulative: bool,
              cursor: AckCursor, batch_acks: Mapping[Position, int] | None = None) -> None:
        """Raise TransactionConflictError when *acks* conflict (module docstring);
        *batch_acks* are the subscription's batch entries acknowledged in part (the messages
        still unacknowledged, by position)."""
        where = f"[{self.topic}][{self.subscription}] Transaction:{txn}"
        if not cumulative and (len(self._individual) + len(self._reserved) + len(self._batch)
                               + len(acks) > self.max_pending):
            raise NotAllowedError(
                f"{where} {len(acks)} more pending acknowledgements would pass the "
                f"{self.max_pending} this subscription may hold "
                f"(maxPendingAcksPerSubscription); end some transactions first")
        holders = self._holders()
        cumulatives = self._cumulatives()
        if cumulative:
            pos = acks[-1][0]
            for other, upto in cumulatives.items():
                if other != txn:
                    raise TransactionConflictError(
                        f"{where} cumulative ack of {pos} conflicts: transaction {other} "
                        f"holds a pending cumulative ack at {upto}")
            if pos <= cursor.mark_delete_position:
                raise TransactionConflictError(
                    f"{where} cumulative ack position {pos} is already acknowledged "
                    f"(mark-delete position {cursor.mark_delete_position})")
            for p, other in holders.items():
                if other != txn and p <= pos:
                    raise TransactionConflictError(
                        f"{where} cumulative ack of {pos} conflicts: {p} is pending-acked "
                        f"by transaction {other}")
            in_batch = self._batch.holder_up_to(txn, pos)
            if in_batch is not None:
                raise TransactionConflictError(
                    f"{where} cumulative ack of {pos} conflicts: messages of {in_batch[0]} "
                    f"are pending-acked by transaction {in_batch[1]}")
            return
        for pos, words in acks:
            if pos <= cursor.mark_delete_position or cursor.is_deleted(pos):
                raise TransactionConflictError(
                    f"{where} try to ack message:{pos} which is already acknowledged")
            holder = holders.get(pos)
            if holder is None:
                holder = self._batch.conflict(txn, pos, acked_indexes(words) if words else None)
            if holder is not None and holder != txn:
                raise TransactionConflictError(
                    f"{where} try to ack message:{pos} in pending ack status of "
                    f"transaction {holder}")
            unacked = batch_acks.get(pos) if words and batch_acks else None
            if words and unacked is not None and acked_indexes(words) & ~unacked:
                raise TransactionConflictError(
                    f"{where} try to ack message:{pos} whose batch index is already "
                    "acknowledged")
            for other, upto in cumulatives.items():
                if other != txn and pos <= upto:
                    raise TransactionConflictError(
                        f"{where} try to ack message:{pos} under the pending cumulative ack "
                        f"of transaction {other}")

    # ------------------------------------------------------------------ state changes

    def reserve(self, txn: TxnId, acks: list[PendingAck], cumulative: bool) -> None:
        """Checked acknowledgements whose log record is being written: other transactions'
        conflict with them from now on (the check and the record are not one step)."""
        if cumulative:
            pos, count = self._reserved_cumulative.get(txn, (acks[-1][0], 0))
            self._reserved_cumulative[txn] = (max(pos, acks[-1][0]), count + 1)
            return
        for p, words in acks:
            if words:
                self._batch.reserve(txn, p, acked_indexes(words))
                continue
            holder, count = self._reserved.get(p, (txn, 0))
            self._reserved[p] = (holder, count + 1)

    def release(self, txn: TxnId, acks: list[PendingAck], cumulative: bool) -> None:
        """The record of :meth:`reserve`'s acknowledgements was written (or failed)."""
        if cumulative:
            pos, count = self._reserved_cumulative.get(txn, (acks[-1][0], 1))
            if count <= 1:
                self._reserved_cumulative.pop(txn, None)
            else:
                self._reserved_cumulative[txn] = (pos, count - 1)
            return
        for p, words in acks:
            if words:
                self._batch.release(txn, p, acked_indexes(words))
                continue
            reserved = self._reserved.get(p)
            if reserved is None:
                continue
            holder, count = reserved
            if count <= 1:
                del self._reserved[p]
            else:
                self._reserved[p] = (holder, count - 1)

    def add(self, txn: TxnId, acks: list[PendingAck], cumulative: bool,
            target: AckTarget | None) -> None:
        """Record *acks* (checked and logged already); the messages leave their consumers."""
        released: list[Position] = []
        if cumulative:
            pos = acks[-1][0]
            previous = self._cumulative.get(txn)
            if previous is None or pos > previous:
                self._cumulative[txn] = pos
        else:
            self._by_txn.setdefault(txn, []).extend(acks)
            for p, words in acks:
                if words:
                    self._batch.add(txn, p, acked_indexes(words))
                else:
                    self._individual[p] = txn
            # A whole entry leaves its consumer; a batch entry acknowledged in part stays with
            # it (its other messages are still the consumer's to acknowledge).
            released = [p for p, words in acks if not words]
        if target is not None and target.dispatcher is not None:
            if cumulative:
                upto = self._cumulative[txn]
                owners = getattr(target.dispatcher, "owner", {})
                released = [p for p in list(owners) if p <= upto]
            self._released.setdefault(txn, []).extend(released)
            target.dispatcher.on_acked(released)

    def replay(self, txn: TxnId, acks: list[PendingAck], cumulative: bool) -> None:
        """A logged acknowledgement of a still open transaction (start-up)."""
        self.add(txn, acks, cumulative, None)

    def end(self, txn: TxnId, commit: bool, target: AckTarget | None) -> None:
        """Apply (commit) or drop (abort) the transaction's acknowledgements. Idempotent."""
        acks = self._by_txn.pop(txn, [])
        cumulative = self._cumulative.pop(txn, None)
        released = self._released.pop(txn, [])
        handed_back: list[Position] = []   # batch entries to deliver again on abort
        owners = getattr(target.dispatcher, "owner", {}) if target is not None else {}
        for p, words in acks:
            if words:
                self._batch.drop(txn, p)
                if p in self._filtered or p not in owners:
                    handed_back.append(p)
                if not self._batch.held(p):
                    self._filtered.discard(p)
            elif self._individual.get(p) == txn:
                del self._individual[p]
        if not acks and cumulative is None:
            return
        if commit:
            self.committed_txns += 1
        else:
            self.aborted_txns += 1
        if target is None:
            return
        cursor = target.cursor
        dispatcher = target.dispatcher
        if commit:
            whole: list[Position] = []
            batch_acks = target.batch_acks
            for p, words in acks:
                if words:
                    current = batch_acks.get(p)
                    bits = _bits(words)
                    remaining = bits if current is None else current & bits
                    if remaining:
                        batch_acks[p] = remaining
                        continue
                batch_acks.pop(p, None)
                whole.append(p)
            if whole:
                cursor.delete(whole)
            if cumulative is not None and cumulative > cursor.mark_delete_position:
                cursor.mark_delete(cumulative)
            if dispatcher is not None:
                dispatcher.on_acked(whole)
                dispatcher.schedule()
            target.check_end_of_topic()
            return
        if dispatcher is not None:
            # Whole entries were held from dispatch while pending (and left their consumers):
            # they are delivered again. Under a cumulative acknowledgement that is everything
            # from the mark-delete position to it (after a restart nobody held them at all).
            again = dict.fromkeys(released)
            again.update((p, None) for p, words in acks if not words)
            # A batch entry acknowledged in part in the transaction went on with its consumer;
            # one delivered since without the messages held (its consumer had left), or with
            # nobody now, is delivered again with them.
            taken = [p for p in dict.fromkeys(handed_back) if p in owners]
            if taken:
                dispatcher.on_acked(taken)
            again.update((p, None) for p in handed_back)
            if cumulative is not None:
                # Only what the dispatcher passed (held) before its read position: the rest
                # is read again as it comes.
                ledger = target.ledger
                read = cursor.read_position
                pos = ledger.next_position(cursor.mark_delete_position)
                for _ in range(MAX_REDELIVER_WALK):
                    if pos > cumulative or pos >= read:
                        break
                    again[pos] = None
                    pos = ledger.next_position(pos)
                else:
                    log.warning("[%s][%s] abort of transaction %s: %d positions handed back; "
                                "the ones from %s to %s come back when the subscription "
                                "rewinds", self.topic, self.subscription, txn,
                                MAX_REDELIVER_WALK, pos, min(cumulative, read))
            for p in again:
                if not cursor.is_deleted(p):
                    dispatcher.add_replay(p)
            dispatcher.schedule()

    # ------------------------------------------------------------------ dispatch view

    def holds(self, pos: Position) -> bool:
        """A message pending-acked in an open transaction: not dispatched meanwhile."""
        if pos in self._individual:
            return True
        return any(pos <= upto for upto in self._cumulative.values())

    def held_indexes(self, pos: Position) -> int:
        """The messages of batch entry *pos* pending in transactions, for a delivery of it
        (which leaves them out: noted, so an abort delivers the entry again)."""
        held = self._batch.held(pos)
        if held:
            self._filtered.add(pos)
        return held

    @property
    def active(self) -> bool:
        return bool(self._individual) or bool(self._cumulative) or bool(self._batch)

    @property
    def idle(self) -> bool:
        """Nothing pending or being logged: the store may be dropped (and made anew)."""
        return not (self._individual or self._cumulative or self._by_txn or self._reserved
                    or self._reserved_cumulative or self._batch or self._filtered)

    def position_state(self, pos: Position) -> tuple[bool, list[int] | None]:
        """(pending individually in an open transaction, the ack set words it holds: None for
        the whole entry): Pulsar's getPositionStatsInPendingAck."""
        txn = self._individual.get(pos)
        if txn is None:
            return False, None
        words: list[int] | None = None
        for p, w in self._by_txn.get(txn, ()):
            if p == pos:
                words = w
        return True, words

    def cumulative_of(self, txn: TxnId) -> Position | None:
        """The cumulative acknowledgement *txn* holds here (Pulsar's
        TransactionInPendingAckStats), None for none."""
        return self._cumulative.get(txn)

    def stats(self) -> PendingAckStats:
        return PendingAckStats(
            topic=self.topic, subscription=self.subscription, state="Ready",
            ongoing_txns=len(set(self._by_txn) | set(self._cumulative)),
            pending_individual_acks=len(self._individual) + len(self._batch),
            pending_cumulative_acks=len(self._cumulative),
            committed_txns=self.committed_txns, aborted_txns=self.aborted_txns)


#: Queues a transaction-log record; resolves once it is durable
#: (:meth:`broker.transactions.log.TransactionLog.submit`).
LogSubmit = Callable[[Mapping[str, Any]], "asyncio.Future[Position]"]


class PendingAckStores(dict[tuple[str, str], PendingAckStore]):
    """The pending-ack stores of the transaction service, by (topic, subscription)."""

    def __init__(self) -> None:
        super().__init__()
        #: the transaction log's submit, once the service opened its log
        self.submit: LogSubmit | None = None

    async def forget_subscription(self, topic: str, subscription: str) -> None:
        """The subscription is being deleted (its consumers are gone): its pending
        acknowledgements go with it, as Pulsar's subscription delete deletes its pending-ack
        store. A subscription made again with the name starts without them: none of them holds
        its messages back or acknowledges them at a commit. When some are pending, an
        ``unsub`` record (after theirs in the log) is durable before this returns, so a
        restart does not bring them back; the caller deletes the cursor after it. The
        transactions themselves go on: their end finds nothing to do on this subscription."""
        key = (topic, subscription)
        store = self.get(key)
        if store is None:
            return
        if not store.idle:
            assert self.submit is not None, "the transaction log is not open"
            await self.submit({"op": "unsub", "topic": topic, "sub": subscription})
        if self.get(key) is store:
            del self[key]
