"""Index compaction: dropped (rescheduled or cancelled) positions do not hold time-index slots
in proportion to the drops; the index stays within twice what is pending plus a floor, and
hand-out order and timing are unchanged."""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from contextlib import AbstractContextManager
from typing import Any
from unittest import mock

from delayed_testlib import T0, DueCounter, FakeCursor, FakeLoop, FakeSnapshotStore

from broker.delayed import indexed
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.indexed import IndexedPositions
from broker.delayed.packed import CHUNK, PackedTimeIndex, WideIndex
from broker.delayed.tracker import DelayedDeliveryTracker
from storage.positions import Position

#: The documented floor of stale slots an index may keep whatever its live count.
FLOOR = 4_096
HOUR_MS = 3_600_000


def _slots(tracker: DelayedDeliveryTracker) -> int:
    return sum(p.indexed for p in tracker.scheduled_sources().indexes)


def _churn(tracker: DelayedDeliveryTracker, live: int, drops: int, seed: int) -> dict[Position, int]:
    """``live`` keys, then ``drops`` operations on random keys: 3 reschedules (the old
    version cancelled, a new entry at a new time) to 1 cancel followed by a fresh key. The
    slot bound is checked after every operation. Returns the pending {position: time}."""
    rng = random.Random(seed)
    ledger, entry = 5, 0
    pending: dict[Position, int] = {}
    keys: list[Position] = []

    def add() -> Position:
        nonlocal entry
        position = Position(ledger, entry)
        entry += 1
        at = T0 + rng.randrange(60_000, HOUR_MS)
        assert tracker.add(position, at) is True
        pending[position] = at
        return position

    for _ in range(live):
        keys.append(add())
    worst = 0
    for op in range(drops):
        k = rng.randrange(live)
        assert tracker.cancel(keys[k]) is True
        del pending[keys[k]]
        if op % 4 == 3 and op % 1_000 == 999:
            ledger, entry = ledger + 1, 0      # a new ledger now and then
        keys[k] = add()
        slots = _slots(tracker)
        worst = max(worst, slots)
        assert slots <= 2 * len(tracker) + FLOOR, (op, slots, len(tracker))
    assert len(tracker) == live == len(pending)
    assert worst > live                        # stale slots did accumulate between compactions
    return pending


def _drain(tracker: DelayedDeliveryTracker, loop: FakeLoop, pending: dict[Position, int]) -> None:
    """Step the clock through every pending time: each hand-out is exactly what is due, in
    (time, position) order, never early."""
    order = sorted(pending.items(), key=lambda kv: (kv[1], kv[0]))
    i = 0
    while i < len(order):
        now = order[i][1]
        loop.now_ms = now
        due = []
        while i < len(order) and order[i][1] <= now:
            due.append(order[i][0])
            i += 1
        got: list[Position] = []
        for _ in range(10):
            batch = tracker.get_scheduled(1_000)
            if not batch:
                break
            got += batch
        assert got == sorted(due), now
    assert len(tracker) == 0


def test_in_memory_tracker_reschedules_keep_the_index_within_twice_live_plus_floor() -> None:
    loop = FakeLoop(T0)
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=DueCounter(),
                                             loop=loop, clock_ms=loop.clock_ms)
    pending = _churn(tracker, live=1_000, drops=200_000, seed=1)
    _drain(tracker, loop, pending)


def test_bucket_tracker_mutable_bucket_and_late_index_stay_bounded_too() -> None:
    async def scenario() -> None:
        loop = FakeLoop(T0)
        tracker = BucketDelayedDeliveryTracker(
            cursor=FakeCursor(), snapshots=FakeSnapshotStore(), tick_time_ms=1, strict=True,
            on_due=DueCounter(), loop=asyncio.get_running_loop(), clock_ms=loop.clock_ms,
            min_index_count_per_bucket=1_000_000)
        pending = _churn(tracker, live=1_000, drops=50_000, seed=2)
        # the late-entry index: positions of ledgers below the mutable bucket's start
        late = [Position(1, e) for e in range(2_000)]
        for e, position in enumerate(late):
            assert tracker.add(position, T0 + 120_000 + e)
            pending[position] = T0 + 120_000 + e
        for position in late[:1_900]:
            assert tracker.cancel(position)
            del pending[position]
        assert _slots(tracker) <= 2 * len(tracker) + FLOOR
        _drain(tracker, loop, pending)
        await tracker.close()

    asyncio.run(scenario())


def test_hand_outs_that_leave_mostly_stale_slots_compact_as_well() -> None:
    positions = IndexedPositions()
    for e in range(20_000):
        positions.add(1_000 + e, 1, e)
    for e in range(10_000, 19_000):                # the later half mostly cancelled
        positions.discard(1, e)
    out: list[Position] = []
    positions.pop_upto(1_000 + 9_999, 10_000, out)  # the earlier half handed out
    assert out == [Position(1, e) for e in range(10_000)]
    assert positions.count == 1_000
    assert positions.indexed <= 2 * positions.count + FLOOR
    out.clear()
    positions.pop_upto(10**9, 10**6, out)
    assert out == [Position(1, e) for e in range(19_000, 20_000)]


def test_a_re_added_member_keeps_its_earliest_entry_after_compaction() -> None:
    positions = IndexedPositions()
    for e in range(10_000):
        positions.add(5_000 + e, 2, e)
    positions.discard(2, 7)
    positions.add(1_000_000, 2, 7)                 # stale entry at 5_007 and a new one
    for e in range(100, 9_000):
        positions.discard(2, e)                    # compacts on the way
    assert positions.count == 1_100
    assert positions.stale <= max(positions.count, FLOOR)
    positions.compact()
    assert positions.indexed == positions.count == 1_100
    out: list[Position] = []
    positions.pop_upto(5_007, 100, out)
    assert Position(2, 7) in out


def test_retain_keeps_order_and_chunk_bounds() -> None:
    rng = random.Random(3)
    index = PackedTimeIndex()
    entries = sorted((rng.randrange(10_000), rng.randrange(1 << 40)) for _ in range(30_000))
    for ts, packed in rng.sample(entries, len(entries)):
        index.push(ts, packed)
    out: list[int] = []
    index.pop_upto(100, 500, out)                  # a consumed head prefix
    rest = entries[len(out):]
    kept = [e for e in rest if e[1] % 3 == 0]
    assert index.retain(lambda packed: packed % 3 == 0) == len(kept) == len(index)
    ts_col, pos_col = index.columns()
    assert list(zip(ts_col, pos_col, strict=True)) == kept
    assert all(len(col) <= 2 * CHUNK for col in index._ts)
    assert all(len(col) >= CHUNK for col in index._ts[:-1])
    index.push(5_000, 3)                           # still a working index
    assert index.count_upto(5_000) == sum(1 for ts, _ in kept if ts <= 5_000) + 1
    assert index.retain(lambda packed: False) == 0 and not index
    assert index.columns() == (array("q"), array("Q"))


def test_wide_positions_drop_cancelled_heap_entries_too() -> None:
    wide = WideIndex()
    live: list[tuple[int, int]] = []
    for i in range(20_000):
        position = (1 << 33, i)                 # a ledger id past 32 bits
        assert wide.add(T0 + (i * 7919) % 100_000, *position)
        live.append(position)
        if len(live) > 100:
            wide.members.discard(live.pop(0))   # the trackers' cancel
        assert len(wide._heap) <= 2 * len(wide.members) + 1_100
    out: list[Position] = []
    wide.pop_due(T0 + 10**6, 10**6, out)
    assert sorted(out) == sorted(Position(*p) for p in live)


def _counted(name: str) -> tuple[list[int], AbstractContextManager[Any]]:
    """A patch of ``IndexedPositions.<name>`` that counts its calls (in the list's one item)
    and then runs it."""
    calls = [0]
    real = getattr(IndexedPositions, name)

    def counting(self: IndexedPositions) -> None:
        calls[0] += 1
        real(self)

    return calls, mock.patch.object(IndexedPositions, name, counting)


def test_incremental_compaction_in_small_steps_keeps_bound_and_order() -> None:
    loop = FakeLoop(T0)
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=DueCounter(),
                                             loop=loop, clock_ms=loop.clock_ms)
    full, counting = _counted("compact")
    with mock.patch.object(indexed, "SWEEP_STEP", 700), counting:
        pending = _churn(tracker, live=6_000, drops=60_000, seed=4)
        assert full == [0]                      # the sweeps kept up: no full compaction
        _drain(tracker, loop, pending)


def test_a_herd_at_one_time_is_compacted_although_steps_skip_equal_times() -> None:
    positions = IndexedPositions()
    for e in range(30_000):
        positions.add(T0, 3, e)                 # one millisecond, ~20 chunks
    for e in range(29_000):
        positions.discard(3, e)
        assert positions.indexed <= 2 * positions.count + FLOOR
    out: list[Position] = []
    positions.pop_upto(T0, 10**6, out)
    assert out == [Position(3, e) for e in range(29_000, 30_000)]


def test_retain_from_in_steps_under_pushes_and_pops_matches_a_sorted_list() -> None:
    rng = random.Random(5)
    index = PackedTimeIndex()
    reference: list[tuple[int, int]] = []
    for _ in range(20_000):
        entry = (rng.randrange(5_000), rng.randrange(1 << 40) * 3 + rng.randrange(1, 3))
        index.push(*entry)                     # stale-to-be: packed % 3 != 0
        reference.append(entry)
    for _ in range(10_000):
        entry = (rng.randrange(5_000), rng.randrange(1 << 40) * 3)
        index.push(*entry)
        reference.append(entry)
    reference.sort()
    after: int | None = None
    steps = 0
    while True:
        after = index.retain_from(after, lambda packed: packed % 3 == 0, 1_500)
        steps += 1
        for _ in range(50):                    # pushes meanwhile: kept entries
            entry = (rng.randrange(5_000), rng.randrange(1 << 40) * 3)
            index.push(*entry)
            reference.append(entry)
        out: list[int] = []
        index.pop_upto(steps * 20, 10**6, out)  # hand-outs meanwhile
        reference.sort()
        taken = [e for e in reference if e[0] <= steps * 20]
        assert [p for p in out if p % 3 == 0] == [p for _, p in taken if p % 3 == 0]
        assert len(out) <= len(taken)          # stale ones may be gone already
        reference = reference[len(taken):]
        ts_col, pos_col = index.columns()
        assert len(index) == len(ts_col)
        got = list(zip(ts_col, pos_col, strict=True))
        assert [e for e in got if e[1] % 3 == 0] == [e for e in reference if e[1] % 3 == 0]
        assert all(len(col) <= 2 * CHUNK for col in index._ts)
        if after is None:
            break
    assert steps > 5
    # what the steps skipped (chunks ending at an already swept time) may remain; no more
    assert len(index) <= len([e for e in reference if e[1] % 3 == 0]) + 2 * 2 * CHUNK


def test_deferred_sweep_steps_run_after_the_drop_one_at_a_time_within_the_bound() -> None:
    """With a ``defer`` (the in-memory tracker's event loop), a drop that starts or continues a
    sweep only schedules a step, at most one pending at a time, and the step runs when the
    deferred callbacks run: the drops themselves stay cheap. The hard bound still compacts
    at once, so the index stays within twice the live count plus the floor, and hand-out
    order is kept."""
    scheduled: list[object] = []
    positions = IndexedPositions(scheduled.append)
    rng = random.Random(11)
    live = {e: T0 + rng.randrange(HOUR_MS) for e in range(20_000)}
    for e, at in live.items():
        positions.add(at, 3, e)
    dropped = rng.sample(sorted(live), 16_000)
    steps_run = 0
    for i, e in enumerate(dropped):
        positions.discard(3, e)
        del live[e]
        assert len(scheduled) <= 1              # one step pending at a time
        assert positions.indexed <= 2 * positions.count + FLOOR
        if i % 500 == 499 and scheduled:        # the loop turns now and then
            step = scheduled.pop()
            step()                              # type: ignore[operator]
            steps_run += 1
    assert steps_run > 5
    while scheduled:                            # the sweep finishes over later turns
        scheduled.pop()()                       # type: ignore[operator]
        positions.discard(3, -1)                # nothing to drop: no new step asked
    out: list[Position] = []
    positions.pop_upto(T0 + HOUR_MS, 10**6, out)
    assert out == [Position(3, e) for e, _ in sorted(live.items(), key=lambda kv: (kv[1], kv[0]))]


def test_the_in_memory_tracker_defers_its_steps_to_its_event_loop() -> None:
    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True,
                                                 on_due=DueCounter(), loop=loop)
        calls, counting = _counted("_sweep_step")
        with counting:
            far = int(time.time() * 1000) + HOUR_MS
            for e in range(12_000):
                tracker.add(Position(3, e), far + e)
            for e in range(0, 12_000, 2):
                tracker.cancel(Position(3, e))
            inline = calls[0]                    # none ran inside the drops
            for _ in range(3):
                await asyncio.sleep(0)
        await tracker.close()
        return inline, calls[0]

    inline, after_turns = asyncio.run(run())
    assert inline == 0 and after_turns >= 1
