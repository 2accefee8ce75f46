"""The delayed-delivery tracker interface, and the one timer every tracker uses.

Theory of operation
-------------------
A Shared or Key_Shared dispatcher reads an entry whose ``deliver_at_time`` is past the cutoff
and hands its position to its tracker with :meth:`DelayedDeliveryTracker.add`;
the entry is skipped for now. When positions become due the tracker calls ``on_due()`` (the
dispatcher's "read more / replay" trigger) and the dispatcher pulls them with
:meth:`~DelayedDeliveryTracker.get_scheduled`, re-reads those entries and dispatches them as
replays with their original message ids.

Cutoff: ``now`` in strict mode (``isDelayedDeliveryDeliverAtTimeStrict``, Horae's default:
never early) or ``now + tick`` otherwise (Pulsar's default: up to one tick early). ``add``
returns False for a position already at or before the cutoff: the dispatcher delivers it at
once.

Timer (:class:`DeadlineTimer`): one ``loop.call_at`` handle per tracker, armed for the next
deadline and re-armed only when that deadline changes. Like Pulsar's
``AbstractDelayedDeliveryTracker.updateTimer``: no timer while something is already due (the
dispatcher reads when its consumers have permits again), and two firings are at least
``spacing_ms`` apart so a stream of distinct deadlines cannot turn into a wake-up per message.
The spacing is the tick when early delivery is allowed (what is due within a tick goes out
together, as in Pulsar) and :data:`STRICT_TIMER_SPACING_MS` in strict mode: Pulsar spaces
strict firings by the tick too, so a message due just after a firing waits up to a whole tick
(1 s by default); here it waits at most that one millisecond, the precision of
``deliver_at_time`` itself, and the wake-ups stay bounded at 1,000 a second per tracker.

Read-ahead (:meth:`DelayedDeliveryTracker.read_ahead`): the same timer, asked for a lead, also
fires a *lead* callback that many ms before a deadline it aims at from farther away than that --
the first deadline after a quiet spell, never one of a stream already falling due (those are
within that many ms of each other). The dispatcher reads the first due entries then, so the
delivery at the deadline finds the storage's pages, the segment index and the code of the read
and send paths warm (:mod:`broker.subscriptions.dispatchers.read_ahead`).

Clocks: ``clock_ms()`` is wall-clock epoch milliseconds (``deliver_at_time`` is epoch ms).
On the wall clock itself the timer is the loop's timerfd (:mod:`broker.delayed.wake`), armed
at the deadline's absolute time: it fires at ``deliver_at`` plus the kernel's wake-up (tens of
µs), where the loop's own timers, counted in whole ms, fired up to a ms after it. Elsewhere
(a test's clock, no timerfd) the timer converts the remaining delay, taken from the wall clock
with its fraction of a ms, to the loop's monotonic clock. Either way it never fires before
``deliver_at``. The spacing counts from the deadline last fired, not from when the loop got to
it, so a firing a little late does not push the next deadline back by as much. Everything here runs on
the event loop thread; nothing is thread-safe.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Protocol

from pyroaring import BitMap

from broker.delayed.cancels import CancelCounters, CancelResult, CancelStats
from broker.delayed.schedule_view import ScheduledSources
from broker.delayed.wake import WakeHandle, precise_wake
from storage.positions import Position

#: A pending cancel is counted this many ticks past its deliver time (PIP-423's grace:
#: ``deliverAt + 2 * tick``).
CANCEL_GRACE_TICKS = 2

#: The least time between two timer firings in strict mode (ms): the precision of
#: ``deliver_at_time``, so nothing waits for a tick (see the module docstring).
STRICT_TIMER_SPACING_MS = 1


class DelayedOperationType(IntEnum):
    """Operation kinds of a delayed index (``pulsar.delay.DelayedOperationType``)."""

    DELAY = 0
    CANCEL = 1


def wall_clock_ms() -> int:
    """Epoch milliseconds, the unit of ``deliver_at_time``."""
    return time.time_ns() // 1_000_000


def wall_clock_ms_exact() -> float:
    """Epoch milliseconds with their fraction: what the timer aims with."""
    return time.time_ns() / 1_000_000


class TimerLoop(Protocol):
    """The part of an event loop the timer needs (tests pass a fake)."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> asyncio.TimerHandle: ...


class DeadlineTimer:
    """One loop timer aimed at the tracker's next deadline (epoch ms).

    ``update(deadline)`` is cheap when the deadline did not change, which is the common case
    for a stream of adds behind the head. ``target_ms`` is the deadline aimed at (None: none);
    one already past when aimed at stays the target with no loop timer armed, so the
    trackers' adds behind it skip re-aiming while the dispatcher is behind. ``spacing_ms`` is the least time between two
    firings. ``arm_count`` counts ``call_at`` calls (tests and debugging: "armed once").

    The delay is computed from ``exact_ms`` (the wall clock with its fraction of a ms) when
    given, else from ``clock_ms``: the firing lands at the deadline itself, not up to a ms
    after it as a delay from truncated ms would. A loop whose timers have ms granularity
    (libuv) may wake up to a ms early: the firing then re-aims at the remainder, which such a
    loop runs on its next turn, so the callback never runs before the deadline.
    """

    __slots__ = ("_callback", "_clock_ms", "_handle", "_last_fire_ms", "_lead_handle", "_lead_ms",
                 "_loop", "_on_lead", "_wake", "arm_count", "spacing_ms", "target_ms")

    def __init__(self, loop: TimerLoop, clock_ms: Callable[[], int], spacing_ms: int,
                 callback: Callable[[], None],
                 exact_ms: Callable[[], float] | None = None) -> None:
        self._loop = loop
        self._clock_ms: Callable[[], float] = exact_ms or clock_ms
        self._callback = callback
        self._handle: asyncio.TimerHandle | WakeHandle | None = None
        # on the wall clock itself, the loop's timerfd (broker/delayed/wake.py) wakes it at
        # the deadline, where a loop timer is up to a ms late
        self._wake = precise_wake(loop) if exact_ms is wall_clock_ms_exact else None
        self._last_fire_ms = 0.0
        self.spacing_ms = spacing_ms
        self.target_ms: int | None = None
        self.arm_count = 0
        self._lead_ms = 0
        self._on_lead: Callable[[], None] | None = None
        self._lead_handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def set_lead(self, lead_ms: int, callback: Callable[[], None] | None) -> None:
        """Also call ``callback`` ``lead_ms`` before each deadline aimed at from farther away
        than that (0 or None: no lead). An armed timer is aimed again, so it applies at once."""
        self._lead_ms = lead_ms if callback is not None and lead_ms > 0 else 0
        self._on_lead = callback if self._lead_ms else None
        target = self.target_ms
        if self._handle is not None and target is not None:
            self.cancel()
            self.update(target)

    def update(self, deadline_ms: int | None) -> None:
        """Aim the timer at ``deadline_ms`` (None = nothing tracked: disarm)."""
        if deadline_ms is None:
            self.cancel()
            return
        if deadline_ms == self.target_ms and self._handle is not None:
            return
        self.cancel()
        now = self._clock_ms()
        delay = deadline_ms - now
        if delay < 0:
            # Already due: the dispatcher is behind (no permits or slow consumers) and reads
            # again by itself; re-firing here would spin. The deadline stays the target (no
            # loop timer armed): an add due later needs no timer sooner, so it need not
            # re-aim; the hand-out or cancel that moves the head re-aims.
            self.target_ms = deadline_ms
            return
        # Never fire more often than once per spacing.
        delay = max(delay, self._last_fire_ms + self.spacing_ms - now)
        self.target_ms = deadline_ms
        self.arm_count += 1
        when = self._loop.time() + delay / 1000.0
        self._handle = self._arm(deadline_ms, now + delay, when)
        lead = self._lead_ms
        if lead and delay > lead:
            self._lead_handle = self._loop.call_at(when - lead / 1000.0, self._fire_lead)

    def _arm(self, deadline_ms: int, at_ms: float, loop_when: float
             ) -> asyncio.TimerHandle | WakeHandle:
        """The firing at ``at_ms`` (wall clock, never before ``deadline_ms``) by the loop's
        timerfd, else the loop timer at ``loop_when`` (the loop's clock)."""
        wake = self._wake
        if wake is not None:
            handle = wake.call_at_ns(max(deadline_ms * 1_000_000, round(at_ms * 1_000_000)),
                                     self._fire)
            if handle is not None:
                return handle
        return self._loop.call_at(loop_when, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._lead_handle is not None:
            self._lead_handle.cancel()
            self._lead_handle = None
        self.target_ms = None

    def _fire_lead(self) -> None:
        self._lead_handle = None
        if self._on_lead is not None:
            self._on_lead()

    def _fire(self) -> None:
        self._handle = None
        now = self._clock_ms()
        target = self.target_ms
        if target is not None and now < target:
            # The loop woke us early (ms rounding, or the wall clock and the loop's monotonic
            # clock drifting apart): aim again at the same deadline, without the spacing.
            self._handle = self._arm(target, target, self._loop.time() + (target - now) / 1000.0)
            return
        self.target_ms = None
        # the spacing counts from the deadline fired, not from when the loop got to it: a
        # firing a little late must not push the next deadline back by as much
        self._last_fire_ms = now if target is None else target
        self._callback()


class DelayedDeliveryTracker(abc.ABC):
    """What a dispatcher needs from a delayed-delivery index (see the module docstring).

    Positions go in and come out as storage's :class:`~storage.positions.Position`.
    Implementations: in_memory (packed, process-lifetime) and bucket (PIP-195, persisted
    snapshots).
    """

    @abc.abstractmethod
    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Track a position. False = already due (<= cutoff): deliver it normally now.
        True = tracked (or already tracked): skip it for now."""

    def add_run(self, positions: list[Position], deliver_at_ms: list[int]) -> list[int]:
        """Track fresh positions read together (a dispatcher's read), each due at the time of
        the same index: what :meth:`add` does for each, in one call. Returns the indexes of
        those :meth:`add` answers False for (already due: deliver them now); usually none,
        since the caller passes only times past the cutoff it saw."""
        add = self.add
        return [i for i, (position, at) in enumerate(zip(positions, deliver_at_ms, strict=True))
                if not add(position, at)]

    def cutoff_ms(self) -> int:
        """Deliver times at or before this are due now (the cutoff :meth:`add` compares with)."""
        return wall_clock_ms()

    def read_ahead(self, lead_ms: int, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` ``lead_ms`` before a deadline the timer aims at from farther away
        than that (module docstring, "Read-ahead"). A tracker without a timer ignores it."""
        return

    @abc.abstractmethod
    def has_message_available(self) -> bool:
        """Is some tracked position due now? (Also re-aims the timer when not.)"""

    @abc.abstractmethod
    def get_scheduled(self, max_messages: int) -> list[Position]:
        """Up to ``max_messages`` due positions, ascending, removed from the tracker."""

    @abc.abstractmethod
    def cancel(self, position: Position) -> bool:
        """Drop a tracked position, in memory only (the skip-by-ids path, which acks it
        anyway). True if it was tracked."""

    def cancel_run(self, positions: list[Position]) -> int:
        """:meth:`cancel` of each (positions superseded together); returns how many were
        tracked."""
        cancel = self.cancel
        return sum(1 for position in positions if cancel(position))

    def cancel_entry_ids(self, ledger_id: int, entry_ids: BitMap) -> int:
        """:meth:`cancel_run` of the entry ids of one ledger (a bitmap); returns how many were
        tracked."""
        return self.cancel_run([Position(ledger_id, entry_id) for entry_id in entry_ids])

    @abc.abstractmethod
    def cancel_delayed(self, position: Position, deliver_at_ms: int) -> CancelResult:
        """PIP-423 tracker-level cancel of the message at ``position`` due at
        ``deliver_at_ms``: the verdict from what the tracker holds. A tracked index is cleared
        (APPLIED); an untracked one is accepted as it is (PENDING); a deliver time at or before
        the cutoff is refused (REFUSED_PAST); a message already handed out or acknowledged is
        NOT_FOUND. Nothing is persisted: the caller acknowledges an accepted target on the
        cursor (the durable record, :mod:`broker.delayed.cancels`), and until it calls
        :meth:`cancel_settled` the tracker holds that target back whatever reads meet it."""

    def cancel_settled(self, position: Position) -> None:
        """The acknowledgement of an accepted cancel is on the cursor (or failed): the target
        is no longer held back by the tracker (the cursor skips it from now on)."""
        return None

    @abc.abstractmethod
    def cancel_stats(self) -> CancelStats:
        """Cancels applied, refused (totals) and pending (now): per-subscription metrics."""

    @abc.abstractmethod
    def contains(self, position: Position) -> bool:
        """Is the position tracked and not yet handed out?"""

    def pending_entry_ids(self, ledger_id: int, entries: int) -> BitMap | None:
        """The entry ids below *entries* of one ledger that :meth:`contains` holds, as one
        bitmap the caller must not change; None when this tracker cannot tell them at once
        (the caller then asks :meth:`contains` position by position)."""
        return None

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of tracked (delayed) messages: ``pulsar_subscription_delayed``."""

    @property
    @abc.abstractmethod
    def memory_bytes(self) -> int:
        """Bytes of memory used by the index: ``pulsar_delayed_message_index_size_bytes``."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Forget everything (cursor reset / clear backlog)."""

    @abc.abstractmethod
    def on_rewind(self) -> None:
        """The subscription rewinds to its first unacknowledged entry (its consumers all left
        and one arrives, as Pulsar's addConsumer): an index that is rebuilt by reading again
        forgets itself; a durable one is kept (its snapshots stay valid)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the timer and wait for background work; the tracker is unusable after."""

    @abc.abstractmethod
    def should_pause_all_deliveries(self) -> bool:
        """True while the dispatcher should stop reading new entries (fixed-delay detection)."""

    @abc.abstractmethod
    async def recover(self) -> None:
        """Rebuild persisted state after a restart (in-memory: nothing to do)."""

    @abc.abstractmethod
    def reset_tick_time(self, tick_ms: int) -> None:
        """A policy changed the tick: applies to the next cutoff and timer."""

    def sequential_skip(self, position: Position) -> int:
        """The first entry id >= ``position.entry_id`` of its ledger that a sequential read must still
        look at: every position in ``[entry_id, result)`` is one :meth:`add` would answer True
        for whatever its deliver time (already tracked). The dispatcher moves its read position
        over such runs instead of reading them again (after a restart or a rewind)."""
        return position.entry_id

    def apply_delay_operation(self, op: DelayedOperationType, position: Position,
                              deliver_at_ms: int) -> bool:
        """PIP-423's ``applyDelayOperation``: DELAY = :meth:`add`, CANCEL =
        :meth:`cancel_delayed` (True when accepted: applied or pending; the caller
        acknowledges the target and settles it)."""
        if op is DelayedOperationType.CANCEL:
            return self.cancel_delayed(position, deliver_at_ms).accepted
        return self.add(position, deliver_at_ms)

    # --- what is scheduled (admin listing, metrics) ----------------------------------------

    def scheduled_sources(self) -> ScheduledSources:
        """What the index holds in memory, for :mod:`broker.delayed.schedule_view`."""
        return ScheduledSources()

    def next_due_ms(self) -> int | None:
        """The earliest deliver time tracked (epoch ms), None when nothing is."""
        return None

    def last_due_ms(self) -> int | None:
        """The latest deliver time tracked (epoch ms; from index slots, so a handed-out or
        cancelled message may still count until its slot leaves), None when nothing is."""
        return None


class TimedTracker(DelayedDeliveryTracker):
    """The part every tracker shares: the tick, strictness, the cutoff and one deadline timer.

    Subclasses call :meth:`_init_timing` from ``__init__``, keep ``_closed``, and implement
    ``_head_ts`` (the earliest live deliver time); the timer is re-aimed from it. They also
    share the cancel counters (:class:`~broker.delayed.cancels.CancelCounters`): the cancels
    in flight, and the pending gauge's slots, expired :data:`CANCEL_GRACE_TICKS` ticks after
    their deliver time (checked at most once a second, from :meth:`_expire_cancels`).
    """

    _cancels: CancelCounters
    _next_expiry_ms: int = 0

    _clock_ms: Callable[[], int]
    _tick_ms: int
    _strict: bool
    _on_due: Callable[[], None]
    _timer: DeadlineTimer

    def _init_timing(self, *, loop: TimerLoop, clock_ms: Callable[[], int] | None,
                     tick_time_ms: int, strict: bool, on_due: Callable[[], None]) -> None:
        self._clock_ms = clock_ms or wall_clock_ms
        self._tick_ms = tick_time_ms
        self._strict = strict
        self._on_due = on_due
        self._timer = DeadlineTimer(loop, self._clock_ms, self._timer_spacing_ms(),
                                    self._on_timer,
                                    exact_ms=None if clock_ms else wall_clock_ms_exact)
        self._cancels = CancelCounters()

    def cancel_stats(self) -> CancelStats:
        return self._cancels.stats()

    @property
    def cancels(self) -> CancelCounters:
        """The cancel counters (read-only use: stats, benchmarks)."""
        return self._cancels

    def cancel_settled(self, position: Position) -> None:
        self._cancels.settle(position)

    def _expire_cancels(self) -> bool:
        """Drop from the pending gauge the cancels whose deliver time is over by the grace;
        True if any went."""
        if not self._cancels.pending:
            return False
        now = self._clock_ms()
        if now < self._next_expiry_ms:
            return False
        self._next_expiry_ms = now + 1000
        return self._cancels.expire(now - CANCEL_GRACE_TICKS * self._tick_ms)

    _closed: bool

    @abc.abstractmethod
    def _head_ts(self) -> int | None:
        """The earliest live deliver time tracked, or None when nothing is."""

    def read_ahead(self, lead_ms: int, callback: Callable[[], None] | None) -> None:
        self._timer.set_lead(lead_ms, callback)

    def _update_timer(self) -> None:
        """Re-aim the timer at the earliest live deadline (or cancel it)."""
        if self._closed:
            return
        head = self._head_ts()
        if head is None:
            self._timer.cancel()
        else:
            self._timer.update(self._timer_target(head))

    def _on_timer(self) -> None:
        if self.has_message_available():
            self._on_due()

    def _cutoff(self) -> int:
        """Deliver times at or before this are due: now (strict) or now + one tick."""
        now = self._clock_ms()
        return now if self._strict else now + self._tick_ms

    def cutoff_ms(self) -> int:
        return self._cutoff()

    def _timer_target(self, deliver_at_ms: int) -> int:
        """When the timer must fire for a message due at ``deliver_at_ms``."""
        return deliver_at_ms if self._strict else deliver_at_ms - self._tick_ms

    def _timer_spacing_ms(self) -> int:
        """Least time between firings: one tick, or 1 ms in strict mode (module docstring)."""
        return STRICT_TIMER_SPACING_MS if self._strict else self._tick_ms

    def reset_tick_time(self, tick_ms: int) -> None:
        if tick_ms != self._tick_ms:
            self._tick_ms = tick_ms
            self._timer.spacing_ms = self._timer_spacing_ms()
            self._timer.cancel()
            self._update_timer()

    @property
    def timer(self) -> DeadlineTimer:
        return self._timer

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def tick_time_ms(self) -> int:
        return self._tick_ms
