"""Delayed delivery of one subscription: its policy, its tracker, and who the tracker wakes.

Theory of operation
-------------------
A subscription has one :class:`DelayedDelivery`, made from a :class:`TrackerFactory` (the
broker's settings, the event loop and, for a durable subscription, its cursor and the snapshot
store) and the delayed-delivery policy in force. When the subscription creates a Shared or
Key_Shared dispatcher it hands that dispatcher its ``DelayedDelivery``; the dispatcher drives it
(:meth:`DelayedDelivery.hold` for a fresh entry with a deliver time -- or, for those of one read
due after :meth:`~DelayedDelivery.hold_after_ms`, one :meth:`~DelayedDelivery.hold_run` --,
:meth:`~DelayedDelivery.due`
for the positions that fell due, :meth:`~DelayedDelivery.paused`,
:meth:`~DelayedDelivery.skip_held`) and is the one the tracker wakes (``on_due``). A dispatcher
of another type gets none. The same object outlives a dispatcher switch (its tracker is
cleared by the reset, or released when the new dispatcher does not delay), serves the admin
cancel and the figures while no consumer is attached, and recovers a bucket tracker's
snapshots when the subscription is loaded.

The tracker is built from the factory on first use: the first delayed entry read, a cancel,
or a load that finds bucket snapshots in the cursor properties. The policy is pushed:
:meth:`DelayedDelivery.set_policy` on every change, which applies a new tick to the tracker;
nothing here asks the topic for it. So is the topic's replace-by-key schedule
(``replacements``, :mod:`broker.delayed.replace_by_key`) while that policy is on: the
dispatcher asks it whether an entry was superseded. Positions go in and come out as storage's
:class:`~storage.positions.Position`.

Read-ahead (``delayedDeliveryReadAheadMillis``): the tracker's timer also wakes the dispatcher
that many ms before a deliver time that follows a quiet spell (:meth:`DelayedDelivery.wake_with`'s
``soon``); the dispatcher reads the first positions due then (:meth:`DelayedDelivery.upcoming`),
so the delivery at the deliver time does not pay for cold storage and memory
(:mod:`broker.subscriptions.dispatchers.read_ahead`).

:func:`create_tracker` picks the tracker kind from ``delayedDeliveryTrackerFactoryClassName``
(Pulsar's class names or the short names ``in-memory`` / ``bucket``, validated and mapped by
:attr:`broker.config.BrokerConfig.delayed_tracker_kind`). The bucket tracker needs a durable
cursor and the snapshot store; without them (a non-durable reader) the in-memory tracker is
used.

Broker config read here (:class:`broker.config.BrokerConfig`):
``delayed_delivery_tracker_factory_class_name``, ``delayed_delivery_fixed_delay_detection_lookahead``,
``delayed_delivery_min_index_count_per_bucket``,
``delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds``,
``delayed_delivery_max_indexes_per_bucket_snapshot_segment``, ``delayed_delivery_max_num_buckets``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyroaring import BitMap

from broker.config import BrokerConfig
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.cancels import CancelResult
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.known_times import KnownDeliverTimes
from broker.delayed.policy import DelayPolicy
from broker.delayed.ports import BucketCursor, SnapshotStorage
from broker.delayed.replace_by_key import KeyedSchedule
from broker.delayed.schedule_view import ScheduledSources, scheduled_page
from broker.delayed.tracker import DelayedDeliveryTracker
from broker.delayed.unread import UnreadScan
from storage.positions import Position

__all__ = ["DelayedDelivery", "TrackerFactory", "create_tracker"]

log = logging.getLogger("horae.delayed")


def create_tracker(config: BrokerConfig, policy: DelayPolicy, *,
                   on_due: Callable[[], None], loop: asyncio.AbstractEventLoop,
                   cursor: BucketCursor | None = None, snapshots: SnapshotStorage | None = None,
                   clock_ms: Callable[[], int] | None = None) -> DelayedDeliveryTracker:
    """A tracker for one subscription (see the module docstring)."""
    kind = config.delayed_tracker_kind
    if kind == "bucket" and cursor is not None and snapshots is not None:
        return BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=snapshots, tick_time_ms=policy.tick_time_ms,
            strict=policy.strict, on_due=on_due, loop=loop, clock_ms=clock_ms,
            min_index_count_per_bucket=config.delayed_delivery_min_index_count_per_bucket,
            time_step_per_segment_ms=1000 * (
                config.delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds),
            max_indexes_per_segment=config.delayed_delivery_max_indexes_per_bucket_snapshot_segment,
            max_num_buckets=config.delayed_delivery_max_num_buckets,
        )
    if kind == "bucket":
        log.debug("bucket tracker needs a durable cursor and the snapshot store: in-memory used")
    return InMemoryDelayedDeliveryTracker(
        tick_time_ms=policy.tick_time_ms, strict=policy.strict, on_due=on_due, loop=loop,
        fixed_delay_lookahead=config.delayed_delivery_fixed_delay_detection_lookahead,
        clock_ms=clock_ms)


@dataclass(frozen=True, slots=True)
class TrackerFactory:
    """Builds the tracker of one subscription: the broker's settings, its loop and, for a
    durable subscription, its cursor and the snapshot store (bucket snapshots)."""

    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    cursor: BucketCursor | None = None
    snapshots: SnapshotStorage | None = None

    def __call__(self, policy: DelayPolicy, on_due: Callable[[], None]) -> DelayedDeliveryTracker:
        return create_tracker(self.config, policy, on_due=on_due, loop=self.loop,
                              cursor=self.cursor, snapshots=self.snapshots)


class DelayedDelivery:
    """One subscription's delayed delivery (see the module docstring)."""

    __slots__ = ("_factory", "_policy", "_read_ahead_ms", "_soon", "_tracker", "_wake",
                 "due_total", "known_times", "read_ahead_total", "replacements", "unread")

    def __init__(self, factory: Callable[[DelayPolicy, Callable[[], None]], DelayedDeliveryTracker],
                 policy: DelayPolicy, *, read_ahead_ms: int = 0) -> None:
        self._factory = factory
        self._policy = policy
        self._tracker: DelayedDeliveryTracker | None = None
        self._wake: Callable[[], None] | None = None
        self._soon: Callable[[], None] | None = None
        self._read_ahead_ms = read_ahead_ms
        #: Positions read ahead of their deliver time (:meth:`upcoming`;
        #: ``horae_subscription_delayed_read_ahead``).
        self.read_ahead_total = 0
        #: Delayed positions handed to the dispatcher as due (``horae_subscription_delayed_due``).
        self.due_total = 0
        #: The topic's replace-by-key schedule while that policy is on (the dispatcher
        #: acknowledges unseen what it says is superseded); set by the topic.
        self.replacements: KeyedSchedule | None = None
        #: The topic's deliver times learnt at publish (the dispatcher holds those entries
        #: without reading them, :mod:`broker.delayed.known_times`); set by the topic.
        self.known_times: KnownDeliverTimes | None = None
        #: The listing's scan of what the dispatcher has not read yet, while listings ask
        #: (:mod:`broker.delayed.unread`).
        self.unread: UnreadScan | None = None

    # --- owner side: the policy, the dispatcher, the lifecycle -----------------------------

    @property
    def policy(self) -> DelayPolicy:
        return self._policy

    @property
    def tracker(self) -> DelayedDeliveryTracker | None:
        """The tracker, once built (figures, tests)."""
        return self._tracker

    def set_policy(self, policy: DelayPolicy) -> None:
        """The policy in force changed: a new tick applies to the next cutoff and timer."""
        self._policy = policy
        if self._tracker is not None:
            self._tracker.reset_tick_time(policy.tick_time_ms)

    def wake_with(self, callback: Callable[[], None] | None,
                  soon: Callable[[], None] | None = None) -> None:
        """Who the tracker wakes when positions fall due (``callback``) and, read-ahead
        milliseconds before a deliver time that follows a quiet spell, ``soon``: the
        dispatcher driving it."""
        self._wake = callback
        self._soon = soon

    def _on_due(self) -> None:
        if self._wake is not None:
            self._wake()

    def _on_soon(self) -> None:
        if self._soon is not None:
            self._soon()

    def _ensure(self) -> DelayedDeliveryTracker:
        tracker = self._tracker
        if tracker is None:
            tracker = self._tracker = self._factory(self._policy, self._on_due)
            if self._read_ahead_ms > 0:
                tracker.read_ahead(self._read_ahead_ms, self._on_soon)
        return tracker

    async def recover(self) -> None:
        """Rebuild the tracker's persisted state (a load that found bucket snapshots)."""
        await self._ensure().recover()

    async def release(self) -> None:
        """Close and drop the tracker (the next use builds a new one) and the listing's scan."""
        self.drop_unread()
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            await tracker.close()

    def unread_scan(self, start: Position) -> UnreadScan:
        """The listing's scan past the read position (``start`` when it is made here)."""
        if self.unread is None:
            self.unread = UnreadScan(start, self.drop_unread)
        return self.unread

    def drop_unread(self) -> None:
        scan, self.unread = self.unread, None
        if scan is not None:
            scan.close()

    # --- the dispatcher's side -------------------------------------------------------------

    def hold(self, position: Position, deliver_at_ms: int) -> bool:
        """A fresh entry due at ``deliver_at_ms``: True = the tracker keeps it back for now;
        False = deliver it (already due, or delayed delivery is not active)."""
        if not self._policy.active:
            return False
        return self._ensure().add(position, deliver_at_ms)

    def hold_after_ms(self) -> int | None:
        """The cutoff :meth:`hold_run` is for: a fresh entry due after it is held whatever it
        is (None: delayed delivery is not active, every entry takes :meth:`hold`)."""
        if not self._policy.active:
            return None
        return self._ensure().cutoff_ms()

    def hold_run(self, positions: list[Position], deliver_at_ms: list[int]) -> list[int]:
        """Fresh entries of one read, each due after :meth:`hold_after_ms`: held together
        (one tracker call). Returns the indexes of those the tracker did not keep (fell due
        meanwhile: the caller delivers them as due)."""
        return self._ensure().add_run(positions, deliver_at_ms)

    def due(self, max_messages: int) -> list[Position]:
        """Up to ``max_messages`` positions that fell due, ascending, handed over for good."""
        tracker = self._tracker
        if tracker is None or not tracker.has_message_available():
            return []
        due = tracker.get_scheduled(max_messages)
        self.due_total += len(due)
        return due

    async def upcoming(self, limit: int) -> list[Position]:
        """Up to the first ``limit`` positions tracked by deliver time that are due within
        twice the read-ahead from now, on the tracker's clock (its cutoff; called at the
        read-ahead's lead time, so within the
        read-ahead after the deadline it is for: what the first rounds after it read; a lone
        message among sparse ones reads itself, not the next ``limit``), ascending by
        position, left in the tracker; counted in ``read_ahead_total``."""
        if self._tracker is None:
            return []
        tracker = self._tracker
        page = await scheduled_page(tracker.scheduled_sources(), None, limit)
        until = tracker.cutoff_ms() + 2 * self._read_ahead_ms
        positions = sorted(Position(ledger_id, entry_id)
                           for at, ledger_id, entry_id in page.entries if at <= until)
        self.read_ahead_total += len(positions)
        return positions

    def paused(self) -> bool:
        """Should the dispatcher stop reading new entries for now (the tracker asks)?"""
        tracker = self._tracker
        return tracker is not None and tracker.should_pause_all_deliveries()

    def skip_held(self, position: Position) -> int:
        """The first entry id >= ``position``'s in its ledger that a sequential read must still
        look at (:meth:`DelayedDeliveryTracker.sequential_skip`); none is skipped while
        delayed delivery is not active (held entries are then delivered as they are read)."""
        tracker = self._tracker
        if tracker is None or not self._policy.active:
            return position.entry_id
        return tracker.sequential_skip(position)

    # --- resets and cancels ----------------------------------------------------------------

    def forget(self, positions: Iterable[Position]) -> None:
        """Drop tracked positions, in memory only (skipped: they are acknowledged anyway)."""
        tracker = self._tracker
        if tracker is not None:
            tracker.cancel_run(positions if isinstance(positions, list) else list(positions))

    def forget_entry_ids(self, ledger_id: int, entry_ids: BitMap) -> None:
        """:meth:`forget` of one ledger's entry ids (a bitmap)."""
        tracker = self._tracker
        if tracker is not None:
            tracker.cancel_entry_ids(ledger_id, entry_ids)

    def clear(self) -> None:
        """Forget everything (a cursor reset)."""
        if self._tracker is not None:
            self._tracker.clear()

    def on_rewind(self) -> None:
        """The subscription reads again from its first unacknowledged entry."""
        if self._tracker is not None:
            self._tracker.on_rewind()

    def cancel(self, position: Position, deliver_at_ms: int) -> CancelResult:
        """PIP-423 cancel: the tracker's verdict (:meth:`DelayedDeliveryTracker.cancel_delayed`).
        An accepted one is held back until :meth:`cancel_settled`: the caller acknowledges the
        target on the cursor meanwhile, the durable record of the cancel."""
        return self._ensure().cancel_delayed(position, deliver_at_ms)

    def cancel_settled(self, position: Position) -> None:
        """The acknowledgement of an accepted cancel is on the cursor (or failed)."""
        if self._tracker is not None:
            self._tracker.cancel_settled(position)

    # --- figures ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._tracker) if self._tracker is not None else 0

    @property
    def memory_bytes(self) -> int:
        return self._tracker.memory_bytes if self._tracker is not None else 0

    def next_due_ms(self) -> int | None:
        """The earliest deliver time tracked (epoch ms); None when nothing is."""
        return self._tracker.next_due_ms() if self._tracker is not None else None

    def last_due_ms(self) -> int | None:
        """The latest deliver time tracked (epoch ms); None when nothing is."""
        return self._tracker.last_due_ms() if self._tracker is not None else None

    def scheduled_sources(self) -> ScheduledSources:
        """What is scheduled, as held in memory (:mod:`broker.delayed.schedule_view`)."""
        return (self._tracker.scheduled_sources() if self._tracker is not None
                else ScheduledSources())
