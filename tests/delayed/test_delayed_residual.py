"""Residual snapshots of a deleted subscription are removed (Pulsar's cleanResidualSnapshots),
the late-entry index is bounded, and the tracker forgets nothing on the way."""

from __future__ import annotations

import asyncio

from delayed_testlib import T0, DueCounter, FakeCursor, FakeSnapshotStore, ManualClock

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.cancel_journal import CANCELS_KEY
from broker.delayed.residual import delete_residual_snapshots, is_snapshot_key, snapshot_ids
from storage.positions import Position


def bucket(cursor: FakeCursor, store: FakeSnapshotStore, clock: ManualClock,
           **kw: int) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=2,
        time_step_per_segment_ms=1000, max_indexes_per_segment=4, **kw)


async def test_deleting_a_subscription_removes_its_bucket_and_cancel_snapshots() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    other = await store.create(b"another subscription's", [])
    t = bucket(cursor, store, clock)
    for ledger in (1, 2):
        t.add(Position(ledger, 0), T0 + 100)
        t.add(Position(ledger, 1), T0 + 100)
    t.add(Position(3, 0), T0 + 100)
    # an earlier version's cancel journal, left unretired
    cursor.set_property(CANCELS_KEY, str(await store.create(b"cancel journal", [])))
    await t.close()
    properties = cursor.properties
    assert CANCELS_KEY in properties and len(snapshot_ids(properties)) == 3
    assert await delete_residual_snapshots(properties, store) == 3
    assert store.ids() == [other]


async def test_every_snapshot_the_tracker_keeps_is_named_by_a_snapshot_key() -> None:
    # The start-up sweep (SegmentStore.open with is_snapshot_key) keeps exactly these.
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    orphan = await store.create(b"left by a crash", [])
    t = bucket(cursor, store, clock)
    for ledger in (1, 2):
        t.add(Position(ledger, 0), T0 + 100)
        t.add(Position(ledger, 1), T0 + 100)
    await t.close()
    named = {int(v) for k, v in cursor.properties.items() if is_snapshot_key(k)}
    assert named == snapshot_ids(cursor.properties)
    assert named == set(store.ids()) - {orphan}
    assert not is_snapshot_key("producer-0")  # dedup's sequence ids name no snapshot


async def test_the_late_entry_index_is_bounded_by_pausing_new_reads() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, max_late_index_count=3)
    for e in range(2):
        t.add(Position(1, e), T0 + 100)
    t.add(Position(2, 0), T0 + 100)                       # seals [1, 1]
    await t.wait_idle()
    for e in range(10, 13):                     # late entries of the sealed ledger 1
        assert t.add(Position(1, e), T0 + 200) is True
    assert t.should_pause_all_deliveries()
    clock.now_ms = T0 + 200
    await t.wait_idle()
    due: list[tuple[int, int]] = []
    for _ in range(10):
        due.extend(t.get_scheduled(100))
        await t.wait_idle()
    assert sorted(due) == [(1, 0), (1, 1), (1, 10), (1, 11), (1, 12), (2, 0)]
    assert not t.should_pause_all_deliveries()
    await t.close()
