"""A subscription's cursor position resets: seek, reset-cursor, skip, clear-backlog, rewind.

Theory of operation
-------------------
Every operation that moves a subscription's cursor other than by a consumer's ack runs here, as
one *revision* of the subscription's :class:`broker.subscriptions.revision.RevisionController`
(PIP-269): two resets never interleave (a second one queues behind the first), no dispatcher
round starts while one runs, and a read, replay read or queued frame made before it is discarded:

- :meth:`~CursorResets.reset_cursor` / :meth:`~CursorResets.reset_cursor_to_timestamp` (client
  SEEK, admin reset-cursor): consumers are disconnected (they re-subscribe, as in Pulsar), the
  delayed tracker, the dispatcher's replay and pending state, the redelivery counts and batch
  acks are cleared, and the cursor is moved so the next entry read is the target.
- :meth:`~CursorResets.skip`, :meth:`~CursorResets.skip_by_message_ids` (PIP-423) and
  :meth:`~CursorResets.skip_all` (clear-backlog) acknowledge entries on the consumers' behalf.
- :meth:`~CursorResets.switch_dispatcher` (a consumer of another type arrives on a subscription
  without consumers) and :meth:`~CursorResets.rewind` (the first consumer arrives on a Shared or
  Key_Shared dispatcher whose consumers all left, as Pulsar's
  ``PersistentDispatcherMultipleConsumers.addConsumer`` rewinds): the read position goes back to
  the first unacknowledged entry and the dispatcher starts afresh.

Inside a revision the derived state is dropped first (the delayed tracker's index and hand-out
suppression, the dispatcher's replay set, queued frames, pending lists, Key_Shared ownership,
redelivery counts, batch acks) -- except that a forward skip that keeps the consumers drops only
what concerns the skipped positions (plus every queued frame). The cursor edit is registered with
``rev.apply_at_end`` and applied by the controller in the same loop step as the revision bump.
Nothing else bumps the revision. After the revision the dispatcher is scheduled: everything else
is re-derived by reading. :attr:`CursorResets.resetting` is true while a reset disconnects
consumers, so the subscription does not take a reader's last consumer leaving for the end of the
reader.

Owned by :class:`broker.subscriptions.subscription.Subscription` (``sub.resets``), which it
reaches through the narrow :class:`ResetTarget`. Loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatchers import Dispatcher
from broker.subscriptions.dispatchers.cursors import (
    SubscriptionCursor,
    entry_exists,
    normalize_target,
    tail_position,
)
from broker.subscriptions.last_active import mark_active
from broker.subscriptions.revision import Revision, RevisionController
from protocol.entry_metadata import parse_prefix, strip
from protocol.errors import MalformedEntryError, NotAllowedError
from protocol.metadata import entry_timestamp, parse_entry
from protocol.sub_types import SubType
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["CursorResets", "ResetTarget", "find_by_index", "find_by_publish_time",
           "first_entry_not"]


class ResetTarget(Protocol):
    """What the reset operations may touch of their subscription (implemented by
    :class:`broker.subscriptions.subscription.Subscription`)."""

    sub_type: SubType | None
    consumers: list[Consumer]
    dispatcher: Dispatcher | None
    delayed: DelayedDelivery
    redelivery_counts: dict[Position, int]
    batch_acks: dict[Position, int]
    msg_ack_counter: int

    @property
    def cursor(self) -> SubscriptionCursor: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def revisions(self) -> RevisionController: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def touch(self) -> None:
        """The ack counter moved: the topic's rate meters need sampling again."""
        ...


class CursorResets:
    """The position-reset operations of one subscription (see the module docstring)."""

    def __init__(self, sub: ResetTarget) -> None:
        self.sub = sub
        self.resetting = False

    def _schedule(self) -> None:
        d = self.sub.dispatcher
        if d is not None and d.consumers:
            d.schedule()

    def _drop_derived(self) -> None:
        """Everything derived from the cursor's positions goes (a reset that moves them)."""
        sub = self.sub
        sub.delayed.clear()
        if sub.dispatcher is not None:
            sub.dispatcher.reset()
        sub.redelivery_counts.clear()
        sub.batch_acks.clear()

    # ------------------------------------------------------------------ seek / reset-cursor

    async def reset_to(self, target: Position, *, disconnect: bool) -> None:
        """Move the cursor so *target* is the next entry read (see the module docstring)."""
        sub = self.sub
        async with sub.revisions.revise() as rev:
            self.resetting = True
            try:
                if disconnect:
                    for consumer in list(sub.consumers):
                        consumer.disconnect()
                        consumer.side.forget(consumer)
                        sub.remove_consumer(consumer)
                self._drop_derived()
                cursor = sub.cursor
                rev.apply_at_end(lambda: cursor.reset(target))
            finally:
                self.resetting = False
        mark_active(sub.cursor)   # Pulsar's cursor counts a reset as activity
        self._schedule()

    async def reset_cursor(self, position: tuple[int, int] | Position) -> None:
        """Seek / admin reset-cursor to a message id: the next entry read is that one."""
        lid, eid = (position.ledger_id, position.entry_id) if isinstance(
            position, Position) else (position[0], position[1])
        await self.reset_to(normalize_target(self.sub.ledger, lid, eid), disconnect=True)

    async def reset_cursor_to_timestamp(self, timestamp_ms: int) -> None:
        """Seek by publish time: the next entry is the first one published at or after it.
        The search reads entries directly (not through the cursor) before the revision starts."""
        target = await self._find_by_publish_time(timestamp_ms)
        await self.reset_to(target, disconnect=True)

    async def _find_by_publish_time(self, timestamp_ms: int) -> Position:
        return await find_by_publish_time(self.sub.ledger, timestamp_ms)

    # ------------------------------------------------------------------ skip / clear-backlog

    async def skip(self, n: int) -> None:
        """Acknowledge the next ``n`` unacknowledged entries (admin skip)."""
        sub = self.sub
        async with sub.revisions.revise() as rev:
            cursor = sub.cursor
            ledger = sub.ledger
            last = ledger.last_confirmed
            positions: list[Position] = []
            pos = cursor.mark_delete_position
            while last is not None and len(positions) < n and pos < last:
                pos = ledger.next_position(pos)
                if not cursor.is_deleted(pos):
                    positions.append(pos)
            self._skip_inside(rev, positions)
        self._schedule()

    async def skip_all(self) -> None:
        """Clear the backlog: everything up to the last entry is acknowledged."""
        sub = self.sub
        async with sub.revisions.revise() as rev:
            last = sub.ledger.last_confirmed
            self._drop_derived()  # everything handed out is acknowledged now
            cursor, ledger = sub.cursor, sub.ledger

            def edit() -> None:
                if last is not None:
                    cursor.mark_delete(last)
                    if cursor.read_position <= last:
                        cursor.read_position = ledger.next_position(last)

            rev.apply_at_end(edit)
        self._schedule()

    def check_skip_by_message_ids(self) -> None:
        """Pulsar's rule (``PersistentSubscription.skipMessages(List)``): a subscription whose
        type acknowledges cumulatively (Exclusive, Failover) refuses, whether or not consumers
        are connected now (its type outlives them); one that was never typed accepts."""
        sub_type = self.sub.sub_type
        if sub_type is not None and SubType(sub_type).single_active:
            raise NotAllowedError(
                "Skip messages by message ids is not allowed for subscription type "
                f"{SubType(sub_type).name}: it acknowledges cumulatively")

    async def skip_by_message_ids(self, ids: Iterable[tuple[int, ...]]) -> None:
        """PIP-423: individually acknowledge given message ids (batch index optional). Ids of
        entries that do not exist, and batch indexes beyond their batch, are ignored (the admin
        API refuses them with 412 first).

        Batch sizes are read (direct reads) before the revision starts; the batch-ack book is
        edited inside it."""
        self.check_skip_by_message_ids()
        sub = self.sub
        items: list[tuple[Position, int, int]] = []  # (position, batch index or -1, batch size)
        for item in ids:
            pos = Position(int(item[0]), int(item[1]))
            if not entry_exists(sub.ledger, pos):
                continue  # no such message (yet): acknowledging it would lose it later
            batch_index = int(item[2]) if len(item) > 2 and item[2] is not None else -1
            size = 1
            if batch_index >= 0:
                entry = await sub.ledger.read_entry(pos)
                size = parse_entry(entry.data).messages if entry is not None else 1
                if batch_index >= size:
                    continue  # no such message in the batch
            items.append((pos, batch_index, size))
        async with sub.revisions.revise() as rev:
            full: list[Position] = []
            for pos, batch_index, size in items:
                if batch_index >= 0:
                    current = sub.batch_acks.get(pos, (1 << size) - 1)
                    remaining = current & ~(1 << batch_index)
                    if remaining:
                        sub.batch_acks[pos] = remaining
                        continue
                    sub.batch_acks.pop(pos, None)
                full.append(pos)
            self._skip_inside(rev, full)
        self._schedule()

    def _skip_inside(self, rev: Revision, positions: list[Position]) -> None:
        """Inside a revision: forget ``positions`` everywhere; acknowledge them at its end."""
        sub = self.sub
        sub.delayed.forget(positions)
        if sub.dispatcher is not None:
            sub.dispatcher.on_skipped(positions)
        for pos in positions:
            sub.batch_acks.pop(pos, None)
        cursor = sub.cursor
        if positions:
            def edit() -> None:
                fresh = sum(1 for pos in positions if not cursor.is_deleted(pos))
                cursor.delete(positions)
                sub.msg_ack_counter += fresh  # an admin ack counts as any ack
                sub.touch()

            rev.apply_at_end(edit)

    # ------------------------------------------------------------------ rewinds

    def _rewind_edit(self, rev: Revision) -> None:
        cursor, ledger = self.sub.cursor, self.sub.ledger

        def edit() -> None:
            cursor.read_position = ledger.next_position(cursor.mark_delete_position)

        rev.apply_at_end(edit)

    async def switch_dispatcher(self, new: Dispatcher) -> None:
        """A consumer of another type arrives on a subscription without consumers: *new*
        replaces the old dispatcher (whose replay set and frames die with it) and reading starts
        again from the first unacknowledged entry. A tracker *new* cannot use is closed."""
        sub = self.sub
        async with sub.revisions.revise() as rev:
            old = sub.dispatcher
            sub.dispatcher = new
            if old is not None:
                old.reset()
                await old.close()
            sub.delayed.clear()
            if new.delayed is None:
                sub.delayed.wake_with(None)
                await sub.delayed.release()
            self._rewind_edit(rev)

    async def first_published_at_or_after(self, timestamp_ms: int) -> Position:
        """The first entry published at or after *timestamp_ms* (the end when none is)."""
        return await self._find_by_publish_time(timestamp_ms)

    async def acknowledge_positions(self, positions: list[Position]) -> None:
        """Acknowledge these entries as an admin operation does (expiry, skip)."""
        async with self.sub.revisions.revise() as rev:
            self._skip_inside(rev, positions)
        self._schedule()

    async def rewind(self) -> None:
        """The first consumer arrives on a Shared/Key_Shared dispatcher whose consumers all
        left: like Pulsar's addConsumer on an empty consumer list, forget the replay set and an
        in-memory delayed index (a bucket index is kept: its snapshots are durable) and read
        again from the first unacknowledged entry."""
        sub = self.sub
        async with sub.revisions.revise() as rev:
            if sub.dispatcher is not None:
                sub.dispatcher.reset()
            sub.delayed.on_rewind()
            self._rewind_edit(rev)


async def find_by_publish_time(ledger: ManagedLedger, timestamp_ms: int) -> Position:
    """The first entry published (or, with broker entry metadata, stored) at or after
    *timestamp_ms* (binary search over the stored entries, read directly); the position after
    the last entry when none is."""

    def older(data: bytes) -> bool:
        try:
            return entry_timestamp(data) < timestamp_ms
        except Exception:
            return True

    return await first_entry_not(ledger, older)


async def first_entry_not(ledger: ManagedLedger, older: Callable[[bytes], bool]) -> Position:
    """The first stored entry for which *older* is false, *older* being true for a prefix of the
    stored entries and false after it (binary search, entries read directly; an entry no longer
    readable counts as older); the position after the last entry when *older* holds for all."""
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

    lo, hi = 0, total  # the first entry that is not older lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        entry = await ledger.read_entry(at(mid))
        if entry is None or older(entry.data):
            lo = mid + 1
        else:
            hi = mid
    return at(lo)


def _last_index(data: bytes) -> int:
    """The broker entry metadata index of an entry's last message; -1 for an entry without."""
    try:
        found = parse_prefix(data)
    except MalformedEntryError:
        return -1
    return found.index if found is not None and found.index is not None else -1


def _messages(data: bytes) -> int:
    """Messages in a stored entry (one unless its metadata says it is a batch)."""
    try:
        batch = parse_entry(strip(data)).num_messages_in_batch
    except Exception:   # an entry whose metadata does not parse counts as one, as dispatch does
        return 1
    return batch if batch is not None and batch > 0 else 1


async def find_by_index(ledger: ManagedLedger, index: int) -> Position:
    """The stored entry holding the message of broker entry metadata *index* (the first whose
    last message's index is at least *index*); ``(-1, -1)`` (Pulsar's ``MessageId.Earliest``)
    when that message is no longer stored. Entries without an index count as older."""
    earliest = Position(-1, -1)
    pos = await first_entry_not(ledger, lambda data: _last_index(data) < index)
    entry = await ledger.read_entry(pos)
    if entry is None:   # past every stored entry: the entries up to it were trimmed
        return earliest
    first = _last_index(entry.data) - _messages(entry.data) + 1
    oldest = next((Position(info.ledger_id, 0) for info in ledger.ledgers if info.entries), None)
    if index < first and pos == oldest:
        return earliest   # older than anything still stored
    return pos
