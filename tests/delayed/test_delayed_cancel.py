"""Tracker-level cancel (PIP-423 first form): results, counters, expiry, and durability of the
bucket tracker's cancels across a restart in the three cases that used to lose them."""

from __future__ import annotations

import asyncio

from delayed_testlib import T0, DueCounter, FakeCursor, FakeLoop, FakeSnapshotStore, ManualClock
from waiting import wait_until_async

from broker.delayed.bucket import BucketDelayedDeliveryTracker, bucket_key
from broker.delayed.bucket_segments import RetryDelays
from broker.delayed.cancel_journal import CANCELS_KEY
from broker.delayed.cancels import SLOT_SHIFT, CancelResult, CancelSet
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from storage.positions import Position

FAR = T0 + 3_600_000


def bucket(cursor: FakeCursor, store: FakeSnapshotStore, clock: ManualClock, *,
           min_index: int = 1000) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=min_index,
        time_step_per_segment_ms=1000, max_indexes_per_segment=4,
        retry=RetryDelays(load_s=0.01, create_first_s=0.001, create_max_s=0.004))


async def restart(t: BucketDelayedDeliveryTracker, cursor: FakeCursor, store: FakeSnapshotStore,
                  clock: ManualClock, *, min_index: int = 1000) -> BucketDelayedDeliveryTracker:
    """Close (as a broker stop would) and recover a new tracker from the same storage."""
    await t.close()
    cursor.revision += 1                # the subscription rewinds on load
    fresh = bucket(cursor, store, clock, min_index=min_index)
    await fresh.recover()
    return fresh


async def drain(t: BucketDelayedDeliveryTracker, clock: ManualClock, now: int
                ) -> list[tuple[int, int]]:
    clock.now_ms = now
    out: list[tuple[int, int]] = []
    for _ in range(100):
        await t.wait_idle()
        batch = t.get_scheduled(1_000_000)
        out.extend(batch)
        await t.wait_idle()
        if not batch and not t.sealed.loading:
            break
    return sorted(out)


# --- in-memory tracker ------------------------------------------------------------------------

def test_in_memory_cancel_results_and_counters() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=lambda: None,
                                       loop=loop, clock_ms=loop.clock_ms)
    t.add(Position(1, 1), T0 + 100)
    assert t.cancel_delayed(Position(1, 1), T0 + 100) is CancelResult.APPLIED
    assert t.cancel_delayed(Position(1, 2), T0 + 200) is CancelResult.PENDING
    assert t.cancel_delayed(Position(1, 3), T0) is CancelResult.REFUSED_PAST
    assert t.add(Position(1, 2), T0 + 200) is True            # met later: held, never delivered
    assert not t.contains(Position(1, 2))
    loop.now_ms = T0 + 1000
    assert t.get_scheduled(10) == []
    stats = t.cancel_stats()
    assert (stats.applied_total, stats.refused_total, stats.pending) == (2, 1, 0)


def test_in_memory_cancels_expire_two_ticks_after_their_time() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=10, strict=True, on_due=lambda: None,
                                       loop=loop, clock_ms=loop.clock_ms)
    assert t.cancel_delayed(Position(1, 2), T0 + 200) is CancelResult.PENDING
    loop.now_ms = T0 + 200 + (2 << SLOT_SHIFT)
    t.get_scheduled(10)
    assert t.cancel_stats().pending == 0
    assert t.add(Position(1, 2), loop.now_ms + 100) is True    # an ordinary delayed message again
    assert t.contains(Position(1, 2))


def test_cancel_set_keeps_slots_in_time_order_and_round_trips() -> None:
    cancels = CancelSet()
    assert cancels.add(1, 5, T0 + 10) and not cancels.add(1, 5, T0 + 10)
    cancels.add(2, 7, T0 + 10_000_000)
    back = CancelSet.decode(cancels.encode())
    assert len(back) == 2 and back.contains(1, 5, T0 + 10) and back.contains(2, 7, T0 + 10_000_000)
    assert not back.contains(1, 5, T0 + 10_000_000)
    assert [t[:2] for t in back.targets()] == [(1, 5), (2, 7)]
    assert back.expire(T0 + 5_000_000) == 1 and len(back) == 1


# --- bucket tracker ---------------------------------------------------------------------------

async def test_bucket_cancel_refuses_past_and_reports_acked_or_handed_out_as_not_found() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, min_index=2)
    for e in range(2):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 500)                           # seals [1, 1]
    await t.wait_idle()
    assert await drain(t, clock, T0 + 100) == [(1, 0)]
    assert t.cancel_delayed(Position(1, 0), FAR) is CancelResult.NOT_FOUND        # handed out
    cursor.deleted.add((1, 1))
    assert t.cancel_delayed(Position(1, 1), FAR) is CancelResult.NOT_FOUND        # acknowledged
    assert t.cancel_delayed(Position(2, 0), T0) is CancelResult.REFUSED_PAST
    assert t.cancel_stats().refused_total == 1
    assert CANCELS_KEY not in cursor.properties     # nothing recorded
    await t.close()


async def test_cancel_survives_restart_while_its_target_is_in_the_mutable_bucket() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    for e in range(3):
        t.add(Position(1, e), T0 + 100 + e)
    assert await t.cancel_delayed_message(Position(1, 1), T0 + 101) is CancelResult.APPLIED
    assert CANCELS_KEY in cursor.properties         # durable before the answer
    t2 = await restart(t, cursor, store, clock)
    for e in range(3):                              # the dispatcher reads the backlog again
        assert t2.add(Position(1, e), T0 + 100 + e) is True
    assert not t2.contains(Position(1, 1)) and len(t2) == 2
    assert await drain(t2, clock, T0 + 1000) == [(1, 0), (1, 2)]
    await t2.close()


async def test_pending_cancel_survives_restart_when_no_later_bucket_was_sealed() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, min_index=2)
    for e in range(2):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 300)                           # seals [1, 1]; (2, 1) not read yet
    await t.wait_idle()
    assert await t.cancel_delayed_message(Position(2, 1), T0 + 400) is CancelResult.PENDING
    assert t.cancel_stats().pending == 1
    t2 = await restart(t, cursor, store, clock, min_index=2)
    assert t2.cancel_stats().pending == 1
    assert t2.add(Position(2, 0), T0 + 300) is True
    assert t2.add(Position(2, 1), T0 + 400) is True           # met: dropped
    assert t2.cancel_stats().pending == 0 and t2.cancel_stats().applied_total == 1
    assert await drain(t2, clock, T0 + 1000) == [(1, 0), (1, 1), (2, 0)]
    await t2.close()


async def test_cancel_survives_restart_after_the_bucket_sealed_with_it_finished_first() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, min_index=2)
    t.add(Position(1, 0), FAR)
    t.add(Position(1, 1), FAR + 1)
    t.add(Position(2, 0), T0 + 100)                           # seals [1, 1] (late targets)
    assert await t.cancel_delayed_message(Position(1, 1), FAR + 1) is CancelResult.APPLIED
    t.add(Position(2, 1), T0 + 101)
    t.add(Position(3, 0), T0 + 200)                           # seals [2, 2] (early, after the cancel)
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1), (2, 2)]
    assert await drain(t, clock, T0 + 150) == [(2, 0), (2, 1)]
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1)]           # [2, 2] finished and deleted
    assert bucket_key(2, 2) not in cursor.properties
    t2 = await restart(t, cursor, store, clock, min_index=2)
    assert not t2.contains(Position(1, 1)) and t2.contains(Position(1, 0))
    assert t2.add(Position(3, 0), T0 + 200) is True
    assert await drain(t2, clock, FAR + 10) == [(1, 0), (3, 0)]
    await t2.close()


async def test_used_cancels_expire_and_the_cancel_snapshot_goes_with_them() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    t.add(Position(1, 0), T0 + 100)
    t.add(Position(1, 1), T0 + 200)
    assert await t.cancel_delayed_message(Position(1, 0), T0 + 100) is CancelResult.APPLIED
    sid = int(cursor.properties[CANCELS_KEY])
    assert await drain(t, clock, T0 + 200 + (2 << SLOT_SHIFT)) == [(1, 1)]
    await t.persist_cancels()
    assert CANCELS_KEY not in cursor.properties and sid not in store.snapshots
    await t.close()


async def test_a_waiting_cancel_outlives_its_time_until_the_target_is_acknowledged() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    assert t.cancel_delayed(Position(5, 5), T0 + 100) is CancelResult.PENDING
    clock.now_ms = T0 + (3 << SLOT_SHIFT)
    t.get_scheduled(10)
    assert t.cancel_stats().pending == 1            # a slow reader may still meet it
    assert t.add(Position(5, 5), T0 + 100) is True
    cursor.mark_delete_position = Position(5, 5)
    assert t.cancel_delayed(Position(5, 6), clock.now_ms + 10) is CancelResult.PENDING
    clock.now_ms += 3 << SLOT_SHIFT
    t.get_scheduled(10)
    assert t.cancel_stats().pending == 1            # (5, 6): not acknowledged yet
    cursor.mark_delete_position = Position(5, 6)
    clock.now_ms += 2000
    t.get_scheduled(10)
    assert t.cancel_stats().pending == 0
    await t.close()


async def test_cancel_persistence_is_retried_when_the_store_fails() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    t.add(Position(1, 0), T0 + 100)
    store.fail_create = True
    task = asyncio.ensure_future(t.cancel_delayed_message(Position(1, 0), T0 + 100))
    await wait_until_async(lambda: t.cancel_journal_failures >= 2, interval_s=0.001,
                           message="the cancel snapshot write is retried")
    assert not task.done()                          # not answered before it is durable
    store.fail_create = False
    assert await asyncio.wait_for(task, 5) is CancelResult.APPLIED
    assert CANCELS_KEY in cursor.properties
    await t.close()
