"""What a dispatcher asks of transactions, per round: how far it may read, and per entry
whether to deliver it, acknowledge it unseen (a marker, an aborted message) or hold it (its
acknowledgement is pending in an open transaction)."""

from __future__ import annotations

from typing import Final

from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.pending_ack import PendingAckStore
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
        return self._buffer.max_read_position(last)

    def verdict(self, pos: Position) -> int:
        if self._buffer.hides(pos):
            return HIDE
        pending = self._pending
        if pending is not None and pending.holds(pos):
            return HOLD
        return DELIVER
