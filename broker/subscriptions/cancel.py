"""Cancel one scheduled (delayed) message on one subscription: PIP-423's tracker-level verdict,
and the acknowledgement of the cancelled message, which is the cancel's durable record.

Theory of operation
-------------------
The admin API (:mod:`broker.admin.delayed_routes`) has already found the message, checked that
its stored ``deliver_at_time`` is the ``deliverAt`` it was given, and picked the subscriptions.
For each one :func:`cancel_on_subscription`:

1. refuses what cannot be cancelled: a subscription type that does not delay (Exclusive,
   Failover), a message already acknowledged, or one a consumer holds right now (delivered,
   not yet acknowledged): ``NOT_FOUND``;
2. asks the subscription's delayed delivery (``DelayedDelivery.cancel``: its tracker, built
   if there is none yet, as on the dispatcher's first delayed entry) for its verdict
   (``DelayedDeliveryTracker.cancel_delayed``: a tracked target leaves the index at once).
   ``REFUSED_PAST`` (the deliver time is at or before the cutoff) and ``NOT_FOUND`` stop here;
3. then -- where the design keeps the cancel in the tracker's buckets -- acknowledges the
   message individually on the subscription through the admin ack path
   (``skip_by_message_ids``: cursor, dispatcher, ack counters) and flushes the cursor. The
   acknowledgement is the cancel's only durable record: the tracker persists nothing per
   cancel and replays nothing after a restart (:mod:`broker.delayed.cancels`); an
   acknowledged entry is never handed out, after a restart or a rewind too. Until the ack is
   on the cursor the tracker holds the target back (a cancel *in flight*); it is settled
   (``DelayedDelivery.cancel_settled``) once the ack is, or if it failed. The caller answers
   204 only after the cursor write is durable. Cancels on one subscription at the same time
   share cursor writes (a group commit: one write in flight, the next covers every ack made
   meanwhile).

A reset-cursor to a position before the message clears its acknowledgement, as it clears every
acknowledgement after that position: the message is then delivered at its time again, as an
acknowledged one is redelivered.

Runs on the broker loop; the awaits are the acknowledgement's revision and the cursor's write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from weakref import WeakKeyDictionary

from broker.delayed.cancels import CancelResult
from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.dispatchers.cursors import SubscriptionCursor
from protocol.sub_types import SubType
from storage.positions import Position

__all__ = ["CancelTarget", "SubscriptionCancel", "cancel_on_subscription", "delays_messages"]

class CancelConsumer(Protocol):
    """What the cancel needs to know of a consumer: the positions it holds unacknowledged."""

    @property
    def pending(self) -> Mapping[Position, object]: ...


class MessageIdSkipper(Protocol):
    """The part of :class:`broker.subscriptions.resets.CursorResets` a cancel uses."""

    async def skip_by_message_ids(self, ids: Iterable[tuple[int, ...]]) -> None: ...


class CancelTarget(Protocol):
    """The part of :class:`broker.subscriptions.subscription.Subscription` a cancel uses."""

    name: str
    durable: bool
    sub_type: SubType | None

    @property
    def cursor(self) -> SubscriptionCursor: ...

    @property
    def consumers(self) -> Sequence[CancelConsumer]: ...

    @property
    def delayed(self) -> DelayedDelivery: ...

    @property
    def resets(self) -> MessageIdSkipper: ...


@dataclass(frozen=True, slots=True)
class SubscriptionCancel:
    """The outcome of a cancel on one subscription: the tracker's verdict and why."""

    subscription: str
    result: CancelResult
    reason: str

    @property
    def accepted(self) -> bool:
        return self.result.accepted


def delays_messages(sub: CancelTarget) -> bool:
    """Does this subscription hold delayed messages back? Shared and Key_Shared do; a durable
    subscription with no consumer since the broker started (type not known yet) counts too,
    so a cancel right after a restart is not lost."""
    if sub.sub_type is None:
        return sub.durable
    return SubType(sub.sub_type).shares_messages


async def cancel_on_subscription(sub: CancelTarget, position: Position,
                                 deliver_at_ms: int) -> SubscriptionCancel:
    """Cancel the message at ``position`` due at ``deliver_at_ms`` (module docstring)."""
    name = str(sub.name)

    def outcome(result: CancelResult, reason: str) -> SubscriptionCancel:
        return SubscriptionCancel(name, result, reason)

    if not delays_messages(sub):
        return outcome(CancelResult.NOT_FOUND,
                       f"subscription {name} does not delay messages (only Shared and "
                       "Key_Shared do)")
    if sub.cursor.is_deleted(position):
        return outcome(CancelResult.NOT_FOUND, f"{_id(position)} is already acknowledged "
                       f"on subscription {name}")
    if any(position in consumer.pending for consumer in sub.consumers):
        return outcome(CancelResult.NOT_FOUND, f"{_id(position)} was already delivered on "
                       f"subscription {name}")
    result = sub.delayed.cancel(position, deliver_at_ms)
    if result is CancelResult.REFUSED_PAST:
        return outcome(result, f"deliverAt {deliver_at_ms} is already due on subscription "
                       f"{name}: too late to cancel")
    if result is CancelResult.NOT_FOUND:
        return outcome(result, f"{_id(position)} was already delivered or acknowledged on "
                       f"subscription {name}")
    try:
        await sub.resets.skip_by_message_ids([(position.ledger_id, position.entry_id)])
    finally:
        sub.delayed.cancel_settled(position)
    await _flush_together(sub.cursor)
    return outcome(result, f"{_id(position)} cancelled on subscription {name} "
                   f"({result.value})")


class _GroupFlush:
    """The cursor writes of one subscription's cancels, shared: one write at a time, and the
    next one covers every cancel acknowledged while the previous was in flight (a group
    commit). A cancel returns once a write that started after its ack is durable; a failed
    write fails the cancels it covered."""

    __slots__ = ("_flush", "_next", "_task")

    def __init__(self, flush: Callable[[], Awaitable[None]]) -> None:
        self._flush = flush
        self._next: asyncio.Future[None] | None = None     # the write to come, and its waiters
        self._task: asyncio.Task[None] | None = None

    async def flush(self) -> None:
        write = self._next
        if write is None:
            loop = asyncio.get_running_loop()
            write = self._next = loop.create_future()
            write.add_done_callback(_retrieved)
            if self._task is None:
                self._task = loop.create_task(self._run())
        await asyncio.shield(write)

    async def _run(self) -> None:
        try:
            while self._next is not None:
                write, self._next = self._next, None
                try:
                    await self._flush()
                except Exception as exc:
                    write.set_exception(exc)
                else:
                    write.set_result(None)
        finally:
            self._task = None


def _retrieved(write: asyncio.Future[None]) -> None:
    """A write's failure is its waiters' to raise; none left (cancelled) is no error."""
    if not write.cancelled():
        write.exception()


_group_flushes: WeakKeyDictionary[object, _GroupFlush] = WeakKeyDictionary()


async def _flush_together(cursor: SubscriptionCursor) -> None:
    """Make the cancel's acknowledgement durable, sharing the cursor write with the other
    cancels on the subscription at the same time (:class:`_GroupFlush`)."""
    group = _group_flushes.get(cursor)
    if group is None:
        group = _group_flushes[cursor] = _GroupFlush(cursor.flush)
    await group.flush()


def _id(position: Position) -> str:
    return f"message {position.ledger_id}:{position.entry_id}"
