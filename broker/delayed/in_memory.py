"""In-memory delayed-delivery tracker: packed, exact, ~18 bytes per tracked message.

Theory of operation
-------------------
Pulsar's ``InMemoryDelayedDeliveryTracker`` keeps ``timestamp -> ledger -> bitmap`` with the
timestamp trimmed to the tick; that is compact only while many messages share a
(tick, ledger) cell, and a Python version degrades past 100 bytes per message when delays are
spread thinly (measured: bench/delayed.py). Horae keeps instead:

- one :class:`~broker.delayed.indexed.IndexedPositions`: a packed time index of
  ``(deliver_at_ms, ledger<<32|entry)`` at exact times (16 B + over-allocation per message,
  independent of the delay distribution), so strict mode needs no rounding and is never
  early, and a roaring bitmap of entry ids per ledger for O(1) ``contains``, dedup of a
  re-read entry, and cancellation. A cancelled position stays in the index until it reaches
  the head and is then dropped, so cancel is O(1) too, or until the index is compacted (when
  its stale slots outnumber the live ones: amortised O(1) per cancel);
- the cancel counters (:mod:`broker.delayed.cancels`, PIP-423): ``cancel_delayed`` clears a
  tracked target and gives the verdict; the subscription acknowledges the target, which keeps
  it out from then on (the dispatcher skips acknowledged entries), and ``add`` holds it back
  while that acknowledgement is on its way (the cancels in flight).

Invariants: ``len(self)`` == members of the indexed positions + wide positions (see
:mod:`broker.delayed.indexed` for the index's own).

Fixed-delay detection (``delayedDeliveryFixedDelayDetectionLookahead``), as in Pulsar: while
every added deliver time is >= the highest one tracked minus one tick, and nothing was added
that was already due, delays look fixed (FIFO). Once at least ``lookahead`` messages are
tracked and none is due, :meth:`should_pause_all_deliveries` asks the dispatcher to stop
reading: the index would just fill up with messages in publish order. The state resets when
the tracker becomes empty. 0 disables it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from operator import itemgetter

from pyroaring import BitMap

from broker.delayed.cancels import CancelResult
from broker.delayed.indexed import IndexedPositions
from broker.delayed.packed import POSITION_BITS, WideIndex, fits
from broker.delayed.schedule_view import ScheduledSources
from broker.delayed.tracker import TimedTracker, TimerLoop
from storage.positions import Position

log = logging.getLogger("horae.delayed.in_memory")

_LIMIT = 1 << POSITION_BITS


class InMemoryDelayedDeliveryTracker(TimedTracker):
    def __init__(self, *, tick_time_ms: int, strict: bool, on_due: Callable[[], None],
                 loop: TimerLoop, fixed_delay_lookahead: int = 0,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self._init_timing(loop=loop, clock_ms=clock_ms, tick_time_ms=tick_time_ms,
                          strict=strict, on_due=on_due)
        self._lookahead = fixed_delay_lookahead
        # a real event loop runs the index's compaction steps after the drop that asks for
        # them (a test's fake loop has no call_soon: steps run inline there)
        self._positions = IndexedPositions(
            loop.call_soon if isinstance(loop, asyncio.AbstractEventLoop) else None)
        self._wide = WideIndex()
        self._highest_ms = 0
        self._fixed_delay = True
        self._closed = False

    # --- time ----------------------------------------------------------------------------

    def _head_ts(self) -> int | None:
        """Earliest live deliver time (drops stale heads left by cancel)."""
        head = self._positions.head_ts()
        wide = self._wide.peek_ts()
        if wide is not None and (head is None or wide < head):
            return wide
        return head

    # --- the interface -------------------------------------------------------------------

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        ledger_id, entry_id = position
        packable = fits(ledger_id, entry_id)
        if packable:
            bm = self._positions.members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True                 # re-read of a tracked entry: the tracker owns it
        elif position in self._wide.members:
            return True
        in_flight = self._cancels.in_flight
        if in_flight and position in in_flight:
            return True                     # cancelled (PIP-423), its ack on its way
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
            self._fixed_delay = False
            return False
        if packable:
            self._positions.add(deliver_at_ms, ledger_id, entry_id)
        else:
            self._wide.add(deliver_at_ms, ledger_id, entry_id)
        if deliver_at_ms < self._highest_ms - self._tick_ms:
            self._fixed_delay = False
        if deliver_at_ms > self._highest_ms:
            self._highest_ms = deliver_at_ms
        timer = self._timer
        # Fast path: a later deadline than the armed one changes nothing.
        if timer.target_ms is None or deliver_at_ms - (0 if self._strict else self._tick_ms) \
                < timer.target_ms:
            self._update_timer()
        return True

    def add_run(self, positions: list[Position], deliver_at_ms: list[int]) -> list[int]:
        """:meth:`add` of each, with the per-call work done once: one cutoff, one look at the
        cancels in flight and at the fixed-delay state, one timer check for the earliest time."""
        due: list[int] = []
        cutoff = self._cutoff()
        in_flight = self._cancels.in_flight
        if len(positions) > 1 and not in_flight and self._add_one_ledger(
                positions, deliver_at_ms, cutoff):
            return due
        indexed = self._positions
        members = indexed.members
        index_add = indexed.add
        tick = self._tick_ms
        highest = self._highest_ms
        fixed = self._fixed_delay
        earliest: int | None = None
        for i, (position, at) in enumerate(zip(positions, deliver_at_ms, strict=True)):
            ledger_id, entry_id = position
            if not (0 <= ledger_id < _LIMIT and 0 <= entry_id < _LIMIT):
                # does not pack: the generic way, in its turn (the fixed-delay state follows
                # the order of the times)
                self._highest_ms, self._fixed_delay = highest, fixed
                if not self.add(position, at):
                    due.append(i)
                highest, fixed = self._highest_ms, self._fixed_delay
                continue
            bm = members.get(ledger_id)
            if bm is not None and entry_id in bm:
                continue                    # re-read of a tracked entry
            if in_flight and position in in_flight:
                continue                    # cancelled (PIP-423), its ack on its way
            if at < 0 or at <= cutoff:
                fixed = False
                due.append(i)
                continue
            index_add(at, ledger_id, entry_id)
            if at < highest - tick:
                fixed = False
            if at > highest:
                highest = at
            if earliest is None or at < earliest:
                earliest = at
        self._highest_ms = highest
        self._fixed_delay = fixed
        if earliest is not None:
            target = self._timer.target_ms
            if target is None or earliest - (0 if self._strict else tick) < target:
                self._update_timer()
        return due

    def _add_one_ledger(self, positions: list[Position], deliver_at_ms: list[int],
                        cutoff: int) -> bool:
        """:meth:`add_run`'s usual case in bulk: fresh positions of one ledger, none tracked,
        all packable and due after ``cutoff``, no cancel in flight (checked by the caller): added
        with one membership union, the fixed-delay state and the timer as the loop would leave
        them. False, and nothing changes, when the run is not such a one."""
        ledger_id = positions[0][0]
        entry_ids = [entry_id for _, entry_id in positions]
        low = min(deliver_at_ms)
        if low <= cutoff or low < 0 or not 0 <= ledger_id < _LIMIT \
                or not 0 <= min(entry_ids) <= max(entry_ids) < _LIMIT \
                or len(set(map(itemgetter(0), positions))) != 1:
            return False
        if not self._positions.add_entry_ids(ledger_id, entry_ids, deliver_at_ms):
            return False
        highest, tick = self._highest_ms, self._tick_ms
        if self._fixed_delay:
            for at in deliver_at_ms:
                if at < highest - tick:
                    self._fixed_delay = False
                    break
                if at > highest:
                    highest = at
        self._highest_ms = max(highest, max(deliver_at_ms))
        target = self._timer.target_ms
        if target is None or low - (0 if self._strict else tick) < target:
            self._update_timer()
        return True

    def has_message_available(self) -> bool:
        head = self._head_ts()
        available = head is not None and head <= self._cutoff()
        if not available:
            self._update_timer()
        return available

    def get_scheduled(self, max_messages: int) -> list[Position]:
        self._expire_cancels()
        cutoff = self._cutoff()
        out: list[Position] = []
        positions = self._positions
        while len(out) < max_messages and positions.index:
            if not positions.pop_upto(cutoff, max_messages - len(out), out):
                break
        if len(out) < max_messages and self._wide.members:
            self._wide.pop_due(cutoff, max_messages - len(out), out)
        if not positions.count and not self._wide.members:
            self._reset_when_empty()
        out.sort()
        self._update_timer()
        return out

    def scheduled_sources(self) -> ScheduledSources:
        return ScheduledSources(indexes=(self._positions,), wide=tuple(self._wide.items()))

    def next_due_ms(self) -> int | None:
        return self._head_ts()

    def last_due_ms(self) -> int | None:
        if not self._positions.count and not self._wide.members:
            return None
        wide = self._wide.items()
        lasts = [t for t in (self._positions.index.last_ts(),
                             wide[-1][0] if wide else None) if t is not None]
        return max(lasts) if lasts else None

    def _reset_when_empty(self) -> None:
        self._positions.clear()             # only stale entries can be left
        self._highest_ms = 0
        self._fixed_delay = True

    def cancel(self, position: Position) -> bool:
        ledger_id, entry_id = position
        positions = self._positions
        if fits(ledger_id, entry_id):
            if not positions.discard(ledger_id, entry_id):
                return False
        elif position in self._wide.members:
            self._wide.members.discard(position)
        else:
            return False
        if not positions.count and not self._wide.members:
            self._reset_when_empty()
        self._update_timer()
        return True

    def cancel_run(self, positions: list[Position]) -> int:
        """:meth:`cancel` of each, the timer re-aimed once at the end."""
        indexed = self._positions
        discard = indexed.discard
        wide = self._wide.members
        dropped = 0
        for position in positions:
            ledger_id, entry_id = position
            if 0 <= ledger_id < _LIMIT and 0 <= entry_id < _LIMIT:
                dropped += discard(ledger_id, entry_id)
            elif position in wide:
                wide.discard(position)
                dropped += 1
        if dropped:
            if not indexed.count and not wide:
                self._reset_when_empty()
            self._update_timer()
        return dropped

    def cancel_entry_ids(self, ledger_id: int, entry_ids: BitMap) -> int:
        """:meth:`cancel_run` of one ledger's entry ids: one bitmap difference."""
        if not 0 <= ledger_id < _LIMIT:
            return super().cancel_entry_ids(ledger_id, entry_ids)
        indexed = self._positions
        dropped = indexed.discard_entry_ids(ledger_id, entry_ids)
        if dropped:
            if not indexed.count and not self._wide.members:
                self._reset_when_empty()
            self._update_timer()
        return dropped

    def cancel_delayed(self, position: Position, deliver_at_ms: int) -> CancelResult:
        cancels = self._cancels
        if deliver_at_ms <= self._cutoff():
            return cancels.refuse()
        if cancels.again(position):
            return CancelResult.APPLIED     # cancelled already, its ack on its way
        cleared = self.cancel(position)
        if not cleared and not fits(*position):
            return CancelResult.NOT_FOUND
        return cancels.accept(position, deliver_at_ms, cleared=cleared)

    def sequential_skip(self, position: Position) -> int:
        return self._positions.run_end(*position)

    def contains(self, position: Position) -> bool:
        if fits(*position):
            return self._positions.contains(*position)
        return position in self._wide.members

    def pending_entry_ids(self, ledger_id: int, entries: int) -> BitMap | None:
        if entries and not fits(ledger_id, entries - 1):
            return None     # some of them are wide positions
        return self._positions.ledger_members(ledger_id) or BitMap()

    def __len__(self) -> int:
        return self._positions.count + len(self._wide.members)

    @property
    def memory_bytes(self) -> int:
        return (self._positions.memory_bytes + (self._wide.memory_bytes if self._wide else 0)
                + self._cancels.memory_bytes)

    def clear(self) -> None:
        self._wide.clear()
        self._reset_when_empty()
        self._timer.cancel()

    def on_rewind(self) -> None:
        """Nothing of this index is durable: the rewind's re-read adds it again."""
        self.clear()

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()

    def should_pause_all_deliveries(self) -> bool:
        return (self._lookahead > 0 and self._fixed_delay and len(self) >= self._lookahead
                and not self.has_message_available())

    async def recover(self) -> None:
        return None
