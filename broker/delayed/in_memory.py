"""In-memory delayed-delivery tracker: packed, exact, ~18 bytes per tracked message.

Theory of operation
-------------------
Pulsar's ``InMemoryDelayedDeliveryTracker`` keeps ``timestamp -> ledger -> bitmap`` with the
timestamp trimmed to the tick; that is compact only while many messages share a
(tick, ledger) cell, and a Python version degrades past 100 bytes per message when delays are
spread thinly (measured: bench/delayed.py). Horae keeps instead:

- a :class:`~broker.delayed.packed.PackedTimeIndex` of ``(deliver_at_ms, ledger<<32|entry)``
  at exact times (16 B + over-allocation per message, independent of the delay
  distribution), so strict mode needs no rounding and is never early;
- a roaring bitmap of entry ids per ledger (``_members``) for O(1) ``contains``, dedup of a
  re-read entry, and cancellation. A cancelled position stays in the index until it reaches
  the head and is then dropped, so cancel is O(1) too;
- the cancel book (:mod:`broker.delayed.cancels`, PIP-423): ``cancel_delayed`` clears a
  tracked target or records it so that ``add`` refuses it later; kept in memory only until
  two ticks past its deliver time. Durable cancels are the subscription's job here (it
  acknowledges the cancelled message).

Invariants: ``len(self)`` == number of members; every member has at least one index entry at
its deliver time; an index entry whose position is not a member is stale and never delivered.

Fixed-delay detection (``delayedDeliveryFixedDelayDetectionLookahead``), as in Pulsar: while
every added deliver time is >= the highest one tracked minus one tick, and nothing was added
that was already due, delays look fixed (FIFO). Once at least ``lookahead`` messages are
tracked and none is due, :meth:`should_pause_all_deliveries` asks the dispatcher to stop
reading: the index would just fill up with messages in publish order. The state resets when
the tracker becomes empty. 0 disables it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from pyroaring import BitMap

from broker.delayed.cancels import CancelResult
from broker.delayed.packed import (
    POSITION_BITS,
    POSITION_MASK,
    PackedTimeIndex,
    WideIndex,
    bitmap_bytes,
    fits,
    run_end,
    take_members,
)
from broker.delayed.tracker import TimedTracker, TimerLoop

log = logging.getLogger("horae.delayed.in_memory")


class InMemoryDelayedDeliveryTracker(TimedTracker):
    def __init__(self, *, tick_time_ms: int, strict: bool, on_due: Callable[[], None],
                 loop: TimerLoop, fixed_delay_lookahead: int = 0,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self._init_timing(loop=loop, clock_ms=clock_ms, tick_time_ms=tick_time_ms,
                          strict=strict, on_due=on_due)
        self._lookahead = fixed_delay_lookahead
        self._index = PackedTimeIndex()
        self._members: dict[int, BitMap] = {}
        self._wide = WideIndex()
        self._count = 0
        self._highest_ms = 0
        self._fixed_delay = True
        self._closed = False

    # --- time ----------------------------------------------------------------------------

    def _head_ts(self) -> int | None:
        """Earliest live deliver time (drops stale heads left by cancel)."""
        index = self._index
        members = self._members
        while index:
            packed = index.peek_packed()
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm:
                break
            index.drop_head()
        wide = self._wide.peek_ts()
        head = index.peek_ts()
        if wide is not None and (head is None or wide < head):
            return wide
        return head

    # --- the interface -------------------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        packable = fits(ledger_id, entry_id)
        if packable:
            bm = self._members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True                 # re-read of a tracked entry: the tracker owns it
        elif (ledger_id, entry_id) in self._wide.members:
            return True
        cancels = self._cancels
        if packable and (cancels.waiting.count or cancels.used.count) \
                and cancels.blocks(ledger_id, entry_id, deliver_at_ms):
            return True                     # cancelled (PIP-423): never delivered
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
            self._fixed_delay = False
            return False
        if packable:
            if bm is None:
                bm = self._members[ledger_id] = BitMap()
            bm.add(entry_id)
            self._index.push(deliver_at_ms, (ledger_id << POSITION_BITS) | entry_id)
        else:
            self._wide.add(deliver_at_ms, ledger_id, entry_id)
        self._count += 1
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

    def has_message_available(self) -> bool:
        head = self._head_ts()
        available = head is not None and head <= self._cutoff()
        if not available:
            self._update_timer()
        return available

    def get_scheduled(self, max_messages: int) -> list[tuple[int, int]]:
        self._expire_cancels()
        cutoff = self._cutoff()
        out: list[tuple[int, int]] = []
        buf: list[int] = []
        members = self._members
        index = self._index
        while len(out) < max_messages and index:
            buf.clear()
            if not index.pop_upto(cutoff, max_messages - len(out), buf):
                break
            take_members(buf, members, out)
        if len(out) < max_messages and self._wide:
            self._wide.pop_due(cutoff, max_messages - len(out), out)
        self._count -= len(out)
        if self._count == 0:
            self._reset_when_empty()
        out.sort()
        self._update_timer()
        return out

    def _reset_when_empty(self) -> None:
        self._index.clear()                 # only stale entries can be left
        self._members.clear()
        self._highest_ms = 0
        self._fixed_delay = True

    def cancel(self, ledger_id: int, entry_id: int) -> bool:
        if fits(ledger_id, entry_id):
            bm = self._members.get(ledger_id)
            if bm is None or entry_id not in bm:
                return False
            bm.remove(entry_id)
            if not bm:
                del self._members[ledger_id]
        elif (ledger_id, entry_id) in self._wide.members:
            self._wide.members.discard((ledger_id, entry_id))
        else:
            return False
        self._count -= 1
        if self._count == 0:
            self._reset_when_empty()
        self._update_timer()
        return True

    def cancel_delayed(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> CancelResult:
        if deliver_at_ms <= self._cutoff():
            return self._cancels.refuse()
        cleared = self.cancel(ledger_id, entry_id)
        if not fits(ledger_id, entry_id):
            return CancelResult.APPLIED if cleared else CancelResult.NOT_FOUND
        return self._cancels.record(ledger_id, entry_id, deliver_at_ms, cleared=cleared)

    def sequential_skip(self, ledger_id: int, entry_id: int) -> int:
        return run_end(self._members.get(ledger_id), entry_id)

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        if fits(ledger_id, entry_id):
            bm = self._members.get(ledger_id)
            return bm is not None and entry_id in bm
        return (ledger_id, entry_id) in self._wide.members

    def __len__(self) -> int:
        return self._count

    @property
    def memory_bytes(self) -> int:
        return (self._index.memory_bytes + sys.getsizeof(self._members)
                + sum(bitmap_bytes(bm) for bm in self._members.values())
                + (self._wide.memory_bytes if self._wide else 0) + self._cancels.memory_bytes)

    def clear(self) -> None:
        self._count = 0
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
        return (self._lookahead > 0 and self._fixed_delay and self._count >= self._lookahead
                and not self.has_message_available())

    async def recover(self) -> None:
        return None
