"""Bucket tracker (PIP-195): seal, segments, load, merge, delete, dedup, cancel, metrics."""

from __future__ import annotations

import asyncio

from delayed_testlib import (
    T0,
    FakeCursor,
    FakeSnapshotStore,
    ManualClock,
)
from delayed_testlib import bucket_tracker as make
from waiting import wait_until_async

from broker.config import BrokerConfig
from broker.delayed import create_tracker
from broker.delayed.bucket import BUCKET_KEY_PREFIX, BucketDelayedDeliveryTracker, bucket_key
from broker.delayed.bucket_segments import RetryDelays
from broker.delayed.policy import resolve_policy
from broker.delayed.snapshot_format import decode_metadata, decode_segment
from storage.positions import Position


async def drain_until(t: BucketDelayedDeliveryTracker, clock: ManualClock, now: int
                      ) -> list[tuple[int, int]]:
    """Everything due at ``now``, letting segment loads finish in between."""
    clock.now_ms = now
    out: list[tuple[int, int]] = []
    for _ in range(1000):
        await t.wait_idle()
        batch = t.get_scheduled(1_000_000)
        out.extend(batch)
        await t.wait_idle()
        if not batch and not t.has_message_available() and not t.sealed.loading:
            break
    return out


async def test_seals_on_a_ledger_boundary_once_the_min_index_count_is_reached() -> None:
    cursor, store = FakeCursor(), FakeSnapshotStore()
    t = make(cursor, store, min_index=10)
    for e in range(5):
        t.add(Position(1, e), T0 + 100 + e)
    for e in range(15):                        # ledger 2 joins the mutable bucket [1, 2] ...
        t.add(Position(2, e), T0 + 100 + e)
    assert t.sealed.ranges == []            # ... and is never sealed mid-ledger
    t.add(Position(3, 0), T0 + 50)                       # ledger 3 past the end, 20 >= 10: seal [1, 2]
    assert t.sealed.ranges == [(1, 2)]
    assert t.add(Position(2, 15), T0 + 100) is True      # a late entry of a sealed ledger: in memory
    assert t.sealed.ranges == [(1, 2)]
    await t.wait_idle()
    key = bucket_key(1, 2)
    assert key == f"{BUCKET_KEY_PREFIX}_1_2" == "#pulsar.internal.delayed.bucket_1_2"
    assert int(cursor.properties[key]) in store.snapshots
    assert cursor.flushes >= 1
    assert t.op_count[("create", "succeed")] == 1
    assert t.bucket_count == 2
    assert len(t) == 22
    assert t.snapshot_size_bytes == store.size_bytes(int(cursor.properties[key]))
    await t.close()


async def test_segments_are_cut_by_time_step_and_index_count() -> None:
    cursor, store = FakeCursor(), FakeSnapshotStore()
    t = make(cursor, store, min_index=1, step_ms=1000, per_segment=4)
    times = [100, 200, 300, 400, 500, 600, 1200, 5000, 5001]
    for e, dt in enumerate(times):
        t.add(Position(1, e), T0 + dt)
    t.add(Position(2, 0), T0 + 10)
    await t.wait_idle()
    parts = store.snapshots[int(cursor.properties[bucket_key(1, 1)])]
    infos = decode_metadata(parts[0])
    segments = [decode_segment(p) for p in parts[1:]]
    assert [list(s.ts) for s in segments] == [
        [T0 + 100, T0 + 200, T0 + 300, T0 + 400], [T0 + 500, T0 + 600, T0 + 1200],
        [T0 + 5000, T0 + 5001]]
    assert [(i.min_ts, i.max_ts) for i in infos] == [
        (T0 + 100, T0 + 400), (T0 + 500, T0 + 1200), (T0 + 5000, T0 + 5001)]
    assert [sorted(i.bitmaps[1]) for i in infos] == [[0, 1, 2, 3], [4, 5, 6], [7, 8]]
    await t.close()


async def test_delivers_across_buckets_in_time_order_loading_one_segment_at_a_time() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=8, per_segment=2, step_ms=10_000)
    expected = {}
    for ledger in (1, 2, 3):
        for e in range(8):
            at = T0 + 1000 + ((e * 37 + ledger * 11) % 97) * 10
            t.add(Position(ledger, e), at)
            expected[(ledger, e)] = at
    t.add(Position(4, 0), T0 + 99_999)
    expected[(4, 0)] = T0 + 99_999
    await t.wait_idle()
    assert len(t.sealed.ranges) == 3
    assert t.loaded_index_count <= 3 * 2 + 1   # one segment per bucket + mutable
    got = []
    for now in range(T0 + 1000, T0 + 2000, 7):
        for pos in await drain_until(t, clock, now):
            assert expected[pos] <= now
            got.append(pos)
    assert sorted(got) == sorted(p for p in expected if p[0] != 4)
    assert t.op_count[("load", "succeed")] >= 3 * 3   # segments 2..4 of each bucket
    await t.wait_idle()
    assert t.sealed.ranges == []            # fully scheduled: deleted
    assert store.snapshots == {}
    assert not [k for k in cursor.properties if k.startswith(BUCKET_KEY_PREFIX)]
    assert t.op_count[("delete", "succeed")] == 3
    assert sum(t.op_latency_buckets["load"]) == t.op_count[("load", "succeed")]
    assert len(t) == 1
    await t.close()


async def test_merges_the_two_least_populated_adjacent_buckets() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=4, per_segment=3, max_buckets=2)
    sizes = {1: 9, 2: 4, 3: 5, 4: 9}
    expected = {}
    for ledger, n in sizes.items():
        for e in range(n):
            expected[(ledger, e)] = T0 + 1000 + e * 100 + ledger
            t.add(Position(ledger, e), expected[(ledger, e)])
        await t.wait_idle()
    t.add(Position(5, 0), T0 + 50_000)
    await t.wait_idle()
    assert t.op_count[("merge", "succeed")] >= 1
    assert len(t.sealed.ranges) <= 2
    assert (2, 3) in t.sealed.ranges or (1, 3) in t.sealed.ranges
    keys = sorted(k for k in cursor.properties if k.startswith(BUCKET_KEY_PREFIX))
    assert len(keys) == len(t.sealed.ranges)
    assert len(store.snapshots) == len(keys)
    assert len(t) == sum(sizes.values()) + 1
    got = await drain_until(t, clock, T0 + 10_000)
    assert sorted(got) == sorted(expected)
    await t.close()


async def test_a_re_read_entry_is_not_indexed_twice() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=3)
    for e in range(3):
        t.add(Position(1, e), T0 + 100)
    t.add(Position(2, 0), T0 + 100)
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1)]
    assert t.add(Position(1, 1), T0 + 100) is True       # pending in the sealed bucket
    assert t.add(Position(2, 0), T0 + 100) is True       # pending in the mutable bucket
    assert len(t) == 4
    clock.now_ms = T0 + 100
    assert t.get_scheduled(10) == [(1, 0), (1, 1), (1, 2), (2, 0)]
    # re-read without a cursor reset: already handed out, skipped (no duplicate)
    assert t.add(Position(1, 0), T0 + 100) is True
    cursor.revision += 1                        # an ack or skip elsewhere: still suppressed
    assert t.add(Position(1, 0), T0 + 100) is True
    t.clear()                                   # a cursor reset: the dispatcher delivers it again
    assert t.add(Position(1, 0), T0 + 100) is False
    await t.close()


async def test_cancel_in_the_mutable_bucket_is_dropped_from_the_next_snapshot() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=2)
    for e in range(4):
        t.add(Position(1, e), T0 + 100 + e)
    assert t.cancel(Position(1, 2))
    t.add(Position(2, 0), T0 + 50)
    await t.wait_idle()
    infos = decode_metadata(store.snapshots[int(cursor.properties[bucket_key(1, 1)])][0])
    assert sorted(e for i in infos for e in i.bitmaps[1]) == [0, 1, 3]
    assert sorted(await drain_until(t, clock, T0 + 1000)) == [(1, 0), (1, 1), (1, 3), (2, 0)]
    await t.close()


async def test_a_failed_snapshot_create_is_retried_with_backoff_while_serving_from_memory(
) -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    store.fail_create = True
    t = make(cursor, store, clock, min_index=3, per_segment=1,
             retry=RetryDelays(load_s=0.01, create_first_s=0.001, create_max_s=0.004))
    for e in range(3):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 500)
    await wait_until_async(lambda: t.op_count[("create", "failed")] >= 4, interval_s=0,
                           message="the snapshot create is retried")
    assert not [k for k in cursor.properties if k.startswith(BUCKET_KEY_PREFIX)]
    clock.now_ms = T0 + 100
    assert t.get_scheduled(10) == [(1, 0)]       # served from memory meanwhile
    store.fail_create = False
    await t.wait_idle()
    assert cursor.properties.get(bucket_key(1, 1)) is not None
    assert t.op_count[("create", "succeed")] == 1
    assert sorted(await drain_until(t, clock, T0 + 1000)) == [(1, 1), (1, 2), (2, 0)]
    await t.close()


async def test_close_stops_a_snapshot_create_waiting_to_retry() -> None:
    store = FakeSnapshotStore()
    store.fail_create = True
    t = make(None, store, min_index=1,
             retry=RetryDelays(create_first_s=3600.0, create_max_s=3600.0))
    t.add(Position(1, 0), T0 + 100)
    t.add(Position(2, 0), T0 + 200)
    await wait_until_async(lambda: t.op_count[("create", "failed")] >= 1, interval_s=0,
                           message="the snapshot create fails")
    await asyncio.wait_for(t.close(), 5)
    assert t.op_count[("create", "succeed")] == 0


async def test_a_failed_segment_load_is_retried_and_nothing_is_lost() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=4, per_segment=1)
    for e in range(4):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 5000)
    await t.wait_idle()
    store.fail_load = True
    clock.now_ms = T0 + 1000
    # segment 2 was read ahead; segment 3 must come from the store
    assert t.get_scheduled(100) == [(1, 0), (1, 1)]
    await t.wait_idle()
    assert t.op_count[("load", "failed")] >= 1
    assert t.get_scheduled(100) == []           # blocked behind the barrier, not skipped
    store.fail_load = False
    loads = len(store.loads)
    await wait_until_async(lambda: len(store.loads) > loads, timeout_s=5,
                           message="the failed segment load is retried")
    got = await drain_until(t, clock, T0 + 1000)
    assert sorted(got) == [(1, 2), (1, 3)]
    await t.close()


async def test_clear_deletes_every_snapshot_and_property() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=2)
    for ledger in (1, 2, 3):
        for e in range(2):
            t.add(Position(ledger, e), T0 + 100)
    await t.wait_idle()
    assert store.snapshots
    t.clear()
    await t.wait_idle()
    assert len(t) == 0 and store.snapshots == {}
    assert not [k for k in cursor.properties if k.startswith(BUCKET_KEY_PREFIX)]
    clock.now_ms = T0 + 1000
    assert t.get_scheduled(10) == []
    await t.close()


async def test_memory_counts_only_loaded_segments_and_bitmaps() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=5000, per_segment=500, step_ms=300_000)
    n = 0
    for ledger in range(1, 21):
        for e in range(5000):
            t.add(Position(ledger, e), T0 + 1000 + (e * 7919 % 3_600_000))
            n += 1
    await t.wait_idle()
    assert len(t) == n
    assert t.loaded_index_count <= 19 * 500 + 5000
    assert t.memory_bytes / n < 4
    await t.close()


async def test_factory_builds_the_bucket_tracker_from_pulsars_class_name() -> None:
    config = BrokerConfig(
        delayed_delivery_tracker_factory_class_name=(
            "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"),
        delayed_delivery_min_index_count_per_bucket=7)
    policy = resolve_policy(config, None, None)
    loop = asyncio.get_running_loop()
    tracker = create_tracker(config, policy, on_due=lambda: None, loop=loop,
                             cursor=FakeCursor(), snapshots=FakeSnapshotStore())
    assert isinstance(tracker, BucketDelayedDeliveryTracker)
    await tracker.close()
    reader = create_tracker(config, policy, on_due=lambda: None, loop=loop)
    assert not isinstance(reader, BucketDelayedDeliveryTracker)   # no cursor: in-memory
    await reader.close()
    short = BrokerConfig(delayed_delivery_tracker_factory_class_name="bucket")
    tracker = create_tracker(short, policy, on_due=lambda: None, loop=loop,
                             cursor=FakeCursor(), snapshots=FakeSnapshotStore())
    assert isinstance(tracker, BucketDelayedDeliveryTracker)
    await tracker.close()


async def test_recovery_drops_ranges_left_by_an_interrupted_merge_and_acked_entries() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=2)
    for ledger in (1, 2, 3):
        for e in range(3):
            t.add(Position(ledger, e), T0 + 100 + e)
    t.add(Position(4, 0), T0 + 100)
    await t.wait_idle()
    await t.close()
    assert t.sealed.ranges == [(1, 1), (2, 2), (3, 3)]
    # a merge of [1, 1] and [2, 2] that wrote its snapshot and property, then crashed
    merged_sid = 5000
    store.snapshots[merged_sid] = list(store.snapshots[int(cursor.properties[bucket_key(2, 2)])])
    cursor.set_property(bucket_key(1, 2), str(merged_sid))
    leftover = int(cursor.properties[bucket_key(1, 1)])
    cursor.mark_delete_position = Position(2, 1)        # everything up to 2:1 acknowledged
    cursor.deleted.add((3, 1))                          # and 3:1 individually
    t2 = make(cursor, store, clock, min_index=2)
    await t2.recover()
    await t2.wait_idle()
    assert t2.sealed.ranges == [(1, 2), (3, 3)]
    assert bucket_key(1, 1) not in cursor.properties
    assert bucket_key(2, 2) not in cursor.properties
    assert leftover not in store.snapshots
    assert sorted(await drain_until(t2, clock, T0 + 1000)) == [(2, 2), (3, 0), (3, 2)]
    await t2.close()


async def test_a_revision_bump_after_restart_keeps_handed_out_entries_suppressed() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=3)
    for e in range(3):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 500)
    await t.wait_idle()
    await t.close()
    cursor.revision += 1                        # the subscription rewinds on load
    t2 = make(cursor, store, clock, min_index=3)
    await t2.recover()
    assert await drain_until(t2, clock, T0 + 101) == [(1, 0), (1, 1)]   # held unacked
    cursor.revision += 1                        # an admin skip of another message
    # the dispatcher's sequential read meets the handed-out entries again: not re-delivered
    assert t2.add(Position(1, 0), T0 + 100) is True and t2.add(Position(1, 1), T0 + 101) is True
    assert t2.sequential_skip(Position(1, 0)) == 3
    assert await drain_until(t2, clock, T0 + 1000) == [(1, 2)]
    await t2.close()


async def test_segments_not_due_soon_stay_on_disk_and_come_in_time_order() -> None:
    # Fixed delays: each bucket holds later times than the one before. Only the buckets whose
    # next segment falls due within the preload window are in memory; the others are parked.
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=10, per_segment=5, step_ms=1000)
    expected = {}
    for ledger in range(1, 9):
        for e in range(10):
            at = T0 + 120_000 * ledger + 100 * e        # ledger k due from k * 2 minutes on
            t.add(Position(ledger, e), at)
            expected[(ledger, e)] = at
    t.add(Position(9, 0), T0 + 10_000_000)
    await t.wait_idle()
    assert len(t.sealed.ranges) == 8
    assert t.loaded_index_count == 1                    # the mutable bucket's entry only
    assert t.next_due_ms() == T0 + 120_000              # a parked segment's first time counts
    assert t.get_scheduled(100) == []
    got: list[tuple[int, int]] = []
    for now in range(T0 + 100_000, T0 + 1_100_000, 20_000):
        batch = await drain_until(t, clock, now)
        assert all(expected[p] <= now for p in batch)
        assert not [p for p, at in expected.items() if at <= now and p not in got + batch]
        got.extend(batch)
        assert t.loaded_index_count <= 2 * 5 + 1        # at most two buckets' segments
    assert sorted(got) == sorted(expected)
    await t.close()


async def test_a_long_segment_is_held_only_in_part_and_recovers_after_a_restart() -> None:
    # Dense times over 20 minutes in one segment: only what falls due within two preload
    # windows is loaded; the rest is read again later, from memory or from disk.
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=1200, per_segment=5000, step_ms=3_600_000)
    expected = {}
    for e in range(1200):
        at = T0 + 1000 + (e * 7919 % 1200) * 1000       # one a second, shuffled
        t.add(Position(1, e), at)
        expected[(1, e)] = at
    t.add(Position(2, 0), T0 + 10_000_000)
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1)]
    assert 0 < t.loaded_index_count <= 70                # ~61 s of 1200 s, + the mutable one
    first = await drain_until(t, clock, T0 + 30_000)
    assert sorted(first) == sorted(p for p, at in expected.items() if at <= T0 + 30_000)
    await t.close()
    t2 = make(cursor, store, clock, min_index=1200, per_segment=5000, step_ms=3_600_000)
    await t2.recover()
    assert t2.loaded_index_count <= 100                  # due by now (+30 s) + 60 s
    got = list(first)
    for now in range(T0 + 40_000, T0 + 1_300_000, 45_000):
        batch = await drain_until(t2, clock, now)
        assert all(expected[p] <= now for p in batch)
        got.extend(batch)
        assert t2.loaded_index_count <= 100
    # The restart hands out again what was handed out but not acknowledged (nothing was).
    assert sorted(set(got)) == sorted(p for p in expected if p[0] == 1)
    await t2.close()


def test_sparse_times_make_segments_of_a_tenth_of_the_cap_at_least() -> None:
    from array import array

    from broker.delayed.snapshot_format import cut_columns, cut_segments
    ts = array("q", (T0 + 3_600_000 * k for k in range(100)))      # one an hour
    pos = array("Q", range(100))
    by_columns = cut_columns(ts, pos, 300_000, 50)
    by_items = cut_segments(zip(ts, pos, strict=True), 300_000, 50)
    assert [len(s[0]) for s in by_columns] == [len(s[0]) for s in by_items] == [5] * 20
    dense = array("q", (T0 + k for k in range(100)))
    assert [len(s[0]) for s in cut_columns(dense, pos, 10, 50)] == [10] * 10


async def test_due_positions_come_out_in_time_then_position_order_across_every_bucket() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=2)
    t.add(Position(1, 0), T0 + 100)
    t.add(Position(1, 1), T0 + 100)
    t.add(Position(2, 0), T0 + 50)              # bucket [2, 2] falls due first ...
    t.add(Position(2, 1), T0 + 100)             # ... and then at the same ms as [1, 1]
    t.add(Position(3, 0), T0 + 100)
    await t.wait_idle()
    await t.close()
    assert t.sealed.ranges == [(1, 1), (2, 2)]
    t2 = make(cursor, store, clock, min_index=2)
    await t2.recover()                          # [2, 2] is recovered (loaded) first
    await t2.wait_idle()
    t2.add(Position(3, 0), T0 + 100)            # the mutable bucket, re-read
    clock.now_ms = T0 + 100
    got: list[tuple[int, int]] = []
    for _ in range(10):
        await t2.wait_idle()
        got.extend(t2.get_scheduled(1))
    assert got == [(2, 0), (1, 0), (1, 1), (2, 1), (3, 0)]
    await t2.close()


async def test_a_late_entry_of_a_sealed_ledger_goes_before_newer_ones_of_the_same_ms() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=2)
    for ledger in (1, 2):
        for e in range(2):
            t.add(Position(ledger, e), T0 + 100 + 100 * ledger)
    t.add(Position(3, 0), T0 + 100)             # seals [2, 2]; the mutable bucket is [3, 3]
    t.add(Position(3, 1), T0 + 100)
    t.add(Position(2, 5), T0 + 100)             # a sealed ledger's entry: the late-entry index
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1), (2, 2)]
    clock.now_ms = T0 + 1000
    got: list[list[tuple[int, int]]] = []
    for size in (2, 1, 2, 2):
        await t.wait_idle()
        got.append(list(t.get_scheduled(size)))
    assert got == [[(2, 5), (3, 0)], [(3, 1)], [(1, 0), (1, 1)], [(2, 0), (2, 1)]]
    await t.close()


async def test_the_next_segment_is_read_ahead_and_served_without_waiting_for_a_read() -> None:
    """A bucket serving a segment has its next one read in the background: when the loaded
    one runs dry the next serves at once, in the same hand-out, instead of holding every
    later message behind a disk read. What is read ahead is counted in the memory, and
    dropped with the bucket."""
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=30, per_segment=10, step_ms=100_000)
    for e in range(30):
        t.add(Position(1, e), T0 + 1000 + e)
    t.add(Position(2, 0), T0 + 99_000)          # seals bucket 1: three segments of ten
    await t.wait_idle()
    (bucket,) = list(t.sealed)
    assert bucket.mem_segments is None          # persisted: its next segments come from it
    assert bucket.read_ahead is not None and bucket.read_ahead[0] == 2
    with_ahead = t.memory_bytes
    clock.now_ms = T0 + 1000 + 14
    # segments 1 and 2 in one call: no load in between
    assert t.get_scheduled(100) == [(1, e) for e in range(15)]
    await t.wait_idle()
    assert bucket.read_ahead is not None and bucket.read_ahead[0] == 3
    clock.now_ms = T0 + 1000 + 29
    assert t.get_scheduled(100) == [(1, e) for e in range(15, 30)]
    await t.wait_idle()
    assert not bucket.alive and bucket.read_ahead is None
    assert t.memory_bytes < with_ahead
    await t.close()


async def test_the_rest_of_a_segment_kept_in_part_is_read_ahead_once_the_horizon_reaches_it(
        ) -> None:
    """Of a long segment only what falls due within twice the preload is kept; the rest is read
    ahead once the horizon reaches its first time, while the kept part still serves, and goes
    on in the same hand-out when the kept part runs dry."""
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = make(cursor, store, clock, min_index=600, per_segment=1000, step_ms=300_000)
    for e in range(600):                        # one segment over 120 s
        t.add(Position(1, e), T0 + 1000 + e * 200)
    t.add(Position(2, 0), T0 + 299_000)
    await t.wait_idle()
    (bucket,) = list(t.sealed)
    assert bucket.skip == 296                   # kept: due by T0 + 60 s
    assert bucket.read_ahead is None            # the rest is not due within the horizon
    clock.now_ms = T0 + 31_000                  # the horizon passes the rest's first time
    assert t.get_scheduled(1000) == [(1, e) for e in range(151)]
    await t.wait_idle()
    assert bucket.read_ahead is not None and bucket.read_ahead[:2] == (1, 296)
    clock.now_ms = T0 + 1000 + 400 * 200
    assert t.get_scheduled(1000) == [(1, e) for e in range(151, 401)]
    await t.close()
