"""The copy-forward walk finds a ledger's held entries with bitmaps: what a subscription's cursor
has not acknowledged, checked against what its tracker holds, with no call per position (a
ledger of 50,000 entries asked position by position held the event loop ~50 ms). The answer is
the one the position-by-position walk gives, for either tracker and any acknowledgements."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from delayed_testlib import (
    T0,
    DueCounter,
    FakeCursor,
    FakeLoop,
    FakeSnapshotStore,
    ManualClock,
    bucket_tracker,
)

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.relocate import TrackedPending, _held_entries, _held_one_by_one
from broker.delayed.tracker import DelayedDeliveryTracker
from storage import SegmentStore
from storage.config import StorageConfig
from storage.cursor import ManagedCursor
from storage.positions import Position

ENTRIES = 200
FIRST_LEDGER = 0      # a new store's first ledger id


def tracked_one_by_one(tracker: DelayedDeliveryTracker, lid: int, entries: int) -> set[int]:
    return {e for e in range(entries) if tracker.contains(Position(lid, e))}


def test_in_memory_pending_ids_are_what_contains_says() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=DueCounter(),
                                       loop=loop, clock_ms=loop.clock_ms)
    rnd = random.Random(3)
    for e in rnd.sample(range(ENTRIES), 120):
        t.add(Position(5, e), T0 + 1_000 + rnd.randrange(5_000))
    t.add(Position(6, 0), T0 + 1_000)
    assert set(t.pending_entry_ids(5, ENTRIES) or ()) == tracked_one_by_one(t, 5, ENTRIES)
    loop.advance(3_000)
    t.get_scheduled(40)                                   # handed out: no longer pending
    t.cancel(Position(5, next(iter(t.pending_entry_ids(5, ENTRIES) or ()))))
    assert set(t.pending_entry_ids(5, ENTRIES) or ()) == tracked_one_by_one(t, 5, ENTRIES)
    assert not t.pending_entry_ids(9, ENTRIES)            # a ledger it holds nothing of
    assert t.pending_entry_ids(5, 1 << 40) is None        # wide entry ids: ask one by one


async def test_bucket_pending_ids_are_what_contains_says_sealed_or_not() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()

    def make() -> BucketDelayedDeliveryTracker:
        return bucket_tracker(cursor, store, clock)

    t = make()
    for e in range(20):                                   # ledger 1, sealed into a bucket
        if e != 12:
            t.add(Position(1, e), T0 + 10_000 + e)
    for e in range(0, 30, 3):                             # ledger 2: the mutable bucket
        t.add(Position(2, e), T0 + 20_000 + e)
    await t.wait_idle()
    for lid in (1, 2, 3):
        assert set(t.pending_entry_ids(lid, 30) or ()) == tracked_one_by_one(t, lid, 30)
    clock.now_ms = T0 + 10_000 + 2
    assert t.get_scheduled(100) == [(1, 0), (1, 1), (1, 2)]
    for lid in (1, 2):
        assert set(t.pending_entry_ids(lid, 30) or ()) == tracked_one_by_one(t, lid, 30)
    await t.close()

    r = make()                                            # recovered from its snapshots
    await r.recover()
    assert set(r.pending_entry_ids(1, 30) or ()) == tracked_one_by_one(r, 1, 30)
    await r.close()


class CountingTracker(InMemoryDelayedDeliveryTracker):
    """Counts the per-position questions the walk asks."""

    asked = 0

    def contains(self, position: Position) -> bool:
        CountingTracker.asked += 1
        return super().contains(position)


@pytest.fixture
async def cursor(tmp_path: Path) -> AsyncIterator[ManagedCursor]:
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False,
                                                            max_entries_per_ledger=ENTRIES))
    ledger = await store.open_ledger("persistent://public/default/held")
    cur = await ledger.open_cursor("sub", initial_position="earliest")
    for i in range(ENTRIES + 1):                          # the last one rolls the ledger
        await ledger.append(b"e%d" % i)
    assert ledger.ledgers[0].ledger_id == FIRST_LEDGER and ledger.ledgers[0].sealed
    try:
        yield cur
    finally:
        await store.close()


@pytest.mark.parametrize("seed", range(6))
async def test_held_entries_found_with_bitmaps_equal_the_walk_one_by_one(
        cursor: ManagedCursor, seed: int) -> None:
    rnd = random.Random(seed)
    first = FIRST_LEDGER
    loop = FakeLoop()
    tracker = CountingTracker(tick_time_ms=1, strict=True, on_due=DueCounter(), loop=loop,
                              clock_ms=loop.clock_ms)
    # a prefix acknowledged (the mark-delete position moves into the ledger), then some ids
    # acknowledged beyond it, the rest pending in the tracker -- or, in odd seeds, one of them
    # neither acknowledged nor pending (handed out): the ledger is held by something else
    prefix = rnd.randrange(0, ENTRIES // 2)
    acked = set(range(prefix)) | set(rnd.sample(range(prefix, ENTRIES), ENTRIES // 4))
    cursor.delete([Position(first, e) for e in sorted(acked)])
    rest = [e for e in range(ENTRIES) if e not in acked]
    handed_out = rnd.choice(rest) if seed % 2 else None
    for e in rest:
        if e != handed_out:
            tracker.add(Position(first, e), T0 + 60_000 + e)
    extra = rnd.sample(sorted(acked), 5)                  # tracked and acknowledged both
    for e in extra:
        tracker.add(Position(first, e), T0 + 60_000 + e)
    holders = [(cursor, TrackedPending(tracker))]

    CountingTracker.asked = 0
    got = _held_entries(first, ENTRIES, holders)          # type: ignore[arg-type]
    assert CountingTracker.asked == 0
    expected = _held_one_by_one(first, ENTRIES, cursor, TrackedPending(tracker))
    assert (got is None) == (expected is None) == (handed_out is not None)
    if got is not None:
        assert list(got) == expected == rest


async def test_a_cursor_without_bitmaps_is_walked_one_by_one(cursor: ManagedCursor) -> None:
    class PlainCursor:
        mark_delete_position = Position(-1, -1)

        def is_deleted(self, pos: Position) -> bool:
            return pos.entry_id % 2 == 0

    first = FIRST_LEDGER
    loop = FakeLoop()
    tracker = CountingTracker(tick_time_ms=1, strict=True, on_due=DueCounter(), loop=loop,
                              clock_ms=loop.clock_ms)
    for e in range(1, ENTRIES, 2):
        tracker.add(Position(first, e), T0 + 60_000)
    CountingTracker.asked = 0
    held = _held_entries(first, ENTRIES, [(PlainCursor(), TrackedPending(tracker))])
    assert held is not None and list(held) == list(range(1, ENTRIES, 2))
    assert CountingTracker.asked == ENTRIES // 2
