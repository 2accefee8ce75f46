"""A subscription's cursor position resets: seek, reset-cursor, skip, clear-backlog, rewind.

Theory of operation
-------------------
Every operation that moves a subscription's cursor other than by a consumer's ack runs here,
under one lock (:attr:`CursorResets.lock`), so two resets never interleave and a dispatcher
never sees half of one:

- :meth:`~CursorResets.reset_cursor` / :meth:`~CursorResets.reset_cursor_to_timestamp` (client
  SEEK, admin reset-cursor): consumers are disconnected (they re-subscribe, as in Pulsar), the
  delayed tracker, the dispatcher's replay and pending state, the redelivery counts and batch
  acks are cleared, and the cursor is moved so the next entry read is the target.
- :meth:`~CursorResets.skip`, :meth:`~CursorResets.skip_by_message_ids` (PIP-423) and
  :meth:`~CursorResets.skip_all` (clear-backlog) acknowledge entries on the consumers' behalf.
- :meth:`~CursorResets.rewind` (a dispatcher of another type replaced the old one): the read
  position goes back to the first unacknowledged entry.

Each ends by bumping ``cursor.revision`` (PIP-269): a dispatcher read that started before the
reset is discarded when it completes. :attr:`CursorResets.resetting` is true while a reset
disconnects consumers, so the subscription does not take a reader's last consumer leaving for
the end of the reader.

Owned by :class:`broker.subscriptions.subscription.Subscription` (``sub.resets``), which it
reaches through the narrow :class:`ResetTarget`. Loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from broker.delayed.tracker import DelayedDeliveryTracker
from broker.subscriptions.consumer import SUB_TYPE_NAMES, Consumer
from broker.subscriptions.dispatchers import Dispatcher
from broker.subscriptions.dispatchers.cursors import (
    SubscriptionCursor,
    normalize_target,
    tail_position,
)
from protocol.errors import NotAllowedError
from protocol.metadata import parse_entry
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["CursorResets", "ResetTarget"]

EXCLUSIVE, FAILOVER = 0, 2


class ResetTarget(Protocol):
    """What the reset operations may touch of their subscription (implemented by
    :class:`broker.subscriptions.subscription.Subscription`)."""

    sub_type: int | None
    consumers: list[Consumer]
    dispatcher: Dispatcher | None
    delayed_tracker: DelayedDeliveryTracker | None
    redelivery_counts: dict[Position, int]
    batch_acks: dict[Position, int]
    msg_ack_counter: int

    @property
    def cursor(self) -> SubscriptionCursor: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...


class CursorResets:
    """The position-reset operations of one subscription (see the module docstring)."""

    def __init__(self, sub: ResetTarget) -> None:
        self.sub = sub
        self.lock = asyncio.Lock()
        self.resetting = False

    # ------------------------------------------------------------------ seek / reset-cursor

    async def reset_to(self, target: Position, *, disconnect: bool) -> None:
        """Move the cursor so *target* is the next entry read (see the module docstring)."""
        sub = self.sub
        async with self.lock:
            self.resetting = True
            try:
                if disconnect:
                    for consumer in list(sub.consumers):
                        consumer.disconnect()
                        consumer.side.forget(consumer)
                        sub.remove_consumer(consumer)
                if sub.delayed_tracker is not None:
                    sub.delayed_tracker.clear()
                if sub.dispatcher is not None:
                    sub.dispatcher.reset()
                sub.redelivery_counts.clear()
                sub.batch_acks.clear()
                sub.cursor.reset(target)
                sub.cursor.revision += 1
            finally:
                self.resetting = False
        if sub.dispatcher is not None:
            sub.dispatcher.schedule()

    async def reset_cursor(self, position: tuple[int, int] | Position) -> None:
        """Seek / admin reset-cursor to a message id: the next entry read is that one."""
        lid, eid = (position.ledger_id, position.entry_id) if isinstance(
            position, Position) else (position[0], position[1])
        await self.reset_to(normalize_target(self.sub.ledger, lid, eid), disconnect=True)

    async def reset_cursor_to_timestamp(self, timestamp_ms: int) -> None:
        """Seek by publish time: the next entry is the first one published at or after it."""
        target = await self._find_by_publish_time(timestamp_ms)
        await self.reset_to(target, disconnect=True)

    async def _find_by_publish_time(self, timestamp_ms: int) -> Position:
        ledger = self.sub.ledger
        index: list[tuple[int, int]] = []  # (ledger_id, entries), flattened by binary search
        total = 0
        for info in ledger.ledgers:
            if info.entries:
                index.append((info.ledger_id, info.entries))
                total += info.entries
        end: Position = ledger.next_position(tail_position(ledger))

        def at(i: int) -> Position:
            for lid, n in index:
                if i < n:
                    return Position(lid, i)
                i -= n
            return end

        lo, hi = 0, total  # first entry with publish_time >= timestamp_ms in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            entry = await ledger.read_entry(at(mid))
            if entry is None:
                lo = mid + 1  # trimmed: treat as older
                continue
            try:
                published = parse_entry(entry.data).publish_time
            except Exception:
                published = 0
            if published < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return at(lo)

    # ------------------------------------------------------------------ skip / clear-backlog

    async def skip(self, n: int) -> None:
        """Acknowledge the next ``n`` unacknowledged entries (admin skip)."""
        cursor = self.sub.cursor
        ledger = self.sub.ledger
        last = ledger.last_confirmed
        positions: list[Position] = []
        pos = cursor.mark_delete_position
        while last is not None and len(positions) < n and pos < last:
            pos = ledger.next_position(pos)
            if not cursor.is_deleted(pos):
                positions.append(pos)
        await self._skip_positions(positions)

    async def skip_all(self) -> None:
        """Clear the backlog: everything up to the last entry is acknowledged."""
        sub = self.sub
        async with self.lock:
            last = sub.ledger.last_confirmed
            if sub.delayed_tracker is not None:
                sub.delayed_tracker.clear()
            if sub.dispatcher is not None:
                sub.dispatcher.on_acked(list(sub.dispatcher.replay))
            if last is not None:
                sub.cursor.mark_delete(last)
                if sub.cursor.read_position <= last:
                    sub.cursor.read_position = sub.ledger.next_position(last)
            sub.batch_acks.clear()
            sub.cursor.revision += 1

    async def skip_by_message_ids(self, ids: Iterable[tuple[int, ...]]) -> None:
        """PIP-423: individually acknowledge given message ids (batch index optional)."""
        sub = self.sub
        if sub.sub_type in (EXCLUSIVE, FAILOVER) and sub.consumers:
            raise NotAllowedError(
                f"Skip by message ids is not allowed on a {SUB_TYPE_NAMES[sub.sub_type]} "
                "subscription")
        full: list[Position] = []
        for item in ids:
            pos = Position(int(item[0]), int(item[1]))
            batch_index = int(item[2]) if len(item) > 2 and item[2] is not None else -1
            if batch_index >= 0:
                entry = await sub.ledger.read_entry(pos)
                size = parse_entry(entry.data).messages if entry is not None else 1
                current = sub.batch_acks.get(pos, (1 << size) - 1)
                remaining = current & ~(1 << batch_index)
                if remaining:
                    sub.batch_acks[pos] = remaining
                    continue
                sub.batch_acks.pop(pos, None)
            full.append(pos)
        await self._skip_positions(full)

    async def _skip_positions(self, positions: list[Position]) -> None:
        if not positions:
            return
        sub = self.sub
        async with self.lock:
            tracker = sub.delayed_tracker
            if tracker is not None:
                for pos in positions:
                    tracker.cancel(pos.ledger_id, pos.entry_id)
            fresh = [pos for pos in positions if not sub.cursor.is_deleted(pos)]
            sub.cursor.delete(positions)
            sub.msg_ack_counter += len(fresh)   # an admin ack counts as any ack
            if sub.dispatcher is not None:
                sub.dispatcher.on_acked(positions)
            sub.cursor.revision += 1
        if sub.dispatcher is not None:
            sub.dispatcher.schedule()

    async def first_published_at_or_after(self, timestamp_ms: int) -> Position:
        """The first entry published at or after *timestamp_ms* (the end when none is)."""
        return await self._find_by_publish_time(timestamp_ms)

    async def acknowledge_positions(self, positions: list[Position]) -> None:
        """Acknowledge these entries as an admin operation does (expiry, skip)."""
        await self._skip_positions(positions)

    # ------------------------------------------------------------------ rewind

    async def rewind(self, new: Dispatcher) -> None:
        """A dispatcher replaced the old one (whose replay set and held entries died with it):
        read again from the first unacknowledged entry. A tracker *new* cannot use is closed."""
        sub = self.sub
        async with self.lock:
            if sub.delayed_tracker is not None and not new.delayed_capable:
                sub.delayed_tracker.clear()
                await sub.delayed_tracker.close()
                sub.delayed_tracker = None
            elif sub.delayed_tracker is not None:
                sub.delayed_tracker.clear()
            sub.cursor.read_position = sub.ledger.next_position(sub.cursor.mark_delete_position)
            sub.cursor.revision += 1
