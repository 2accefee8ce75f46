"""What a dispatcher asks of transactions, per round: how far it may read, and per entry
whether to deliver it, acknowledge it unseen (a marker, an aborted message) or hold it (its
acknowledgement is pending in an open transaction)."""

from __future__ import annotations

from typing import Final

from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.pending_ack import PendingAckStore
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["DELIVER", "HIDE", "HOLD", "DispatchView"]

DELIVER: Final = 0
HIDE: Final = 1   # acknowledge unseen
HOLD: Final = 2   # skip, keep unacknowledged


class DispatchView:
    __slots__ = ("_buffer", "_pending")

    def __init__(self, buffer: TopicTransactionBuffer, pending: PendingAckStore | None) -> None:
        self._buffer = buffer
        self._pending = pending

    def read_limit(self, last: Position | None) -> Position | None:
        """The last position a read may reach (it may name entry -1 of a ledger: before it)."""
        return self._buffer.max_read_position(last)

    def last_readable(self, ledger: ManagedLedger) -> Position | None:
        """The last entry a consumer may be given now (GET_LAST_MESSAGE_ID), None: none."""
        cap = self._buffer.max_read_position(ledger.last_confirmed)
        if cap is None or cap.entry_id >= 0:
            return cap
        for info in reversed(ledger.ledgers):   # held from a ledger's first entry on
            if info.ledger_id < cap.ledger_id and info.entries > 0:
                return Position(info.ledger_id, info.entries - 1)
        return None

    def ack_set(self, pos: Position, unacked: int | None, messages: int) -> int | None:
        """The messages of *pos* to deliver: *unacked* (the subscription's; None: all of its
        *messages*) less those pending in transactions; 0 when none is left to deliver."""
        pending = self._pending
        held = pending.held_indexes(pos) if pending is not None else 0
        if not held:
            return unacked
        return (unacked if unacked is not None else (1 << messages) - 1) & ~held

    def verdict(self, pos: Position) -> int:
        if self._buffer.hides(pos):
            return HIDE
        pending = self._pending
        if pending is not None and pending.holds(pos):
            return HOLD
        return DELIVER
