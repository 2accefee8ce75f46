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
The store outlives its subscription object (the service keeps it while transactions are open),
so a topic reload finds the pending acknowledgements of a restart's replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from broker.transactions.ids import TransactionConflictError, TxnId
from broker.transactions.stats import PendingAckStats
from storage.positions import Position

__all__ = ["MAX_REDELIVER_WALK", "AckTarget", "PendingAck", "PendingAckStore"]

#: Positions an aborted cumulative acknowledgement hands back at most (the rest comes back
#: when the subscription's consumers reconnect or its cursor rewinds).
MAX_REDELIVER_WALK = 100_000

PendingAck = tuple[Position, "list[int] | None"]
"""A position and its batch index ack set words (Java BitSet longs; None: the whole entry)."""


class AckCursor(Protocol):
    @property
    def mark_delete_position(self) -> Position: ...

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

    def __init__(self, topic: str, subscription: str) -> None:
        self.topic = topic
        self.subscription = subscription
        self._individual: dict[Position, TxnId] = {}
        #: the individually acknowledged whole entries: held from dispatch while pending (a
        #: batch entry acknowledged in part stays deliverable: its other messages are not)
        self._whole: set[Position] = set()
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
              cursor: AckCursor) -> None:
        """Raise TransactionConflictError when *acks* conflict (module docstring)."""
        where = f"[{self.topic}][{self.subscription}] Transaction:{txn}"
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
            return
        for pos, _ in acks:
            if pos <= cursor.mark_delete_position or cursor.is_deleted(pos):
                raise TransactionConflictError(
                    f"{where} try to ack message:{pos} which is already acknowledged")
            holder = holders.get(pos)
            if holder is not None and holder != txn:
                raise TransactionConflictError(
                    f"{where} try to ack message:{pos} in pending ack status of "
                    f"transaction {holder}")
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
        for p, _ in acks:
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
        for p, _ in acks:
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
                self._individual[p] = txn
                if not words:
                    self._whole.add(p)
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
        for p, _ in acks:
            if self._individual.get(p) == txn:
                del self._individual[p]
                self._whole.discard(p)
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
            if cumulative is not None:
                ledger = target.ledger
                pos = ledger.next_position(cursor.mark_delete_position)
                for _ in range(MAX_REDELIVER_WALK):
                    if pos > cumulative:
                        break
                    again[pos] = None
                    pos = ledger.next_position(pos)
            for p in again:
                if not cursor.is_deleted(p):
                    dispatcher.add_replay(p)
            dispatcher.schedule()

    # ------------------------------------------------------------------ dispatch view

    def holds(self, pos: Position) -> bool:
        """A message pending-acked in an open transaction: not dispatched meanwhile."""
        if pos in self._whole:
            return True
        return any(pos <= upto for upto in self._cumulative.values())

    @property
    def active(self) -> bool:
        return bool(self._individual) or bool(self._cumulative)

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
            pending_individual_acks=len(self._individual),
            pending_cumulative_acks=len(self._cumulative),
            committed_txns=self.committed_txns, aborted_txns=self.aborted_txns)
