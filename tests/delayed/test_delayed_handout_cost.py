"""The bucket tracker's hand-out does work bounded by what it hands out, not by how many
segments are loaded (a restart loads thousands of first segments while it serves)."""

from __future__ import annotations

import asyncio
import random
from bisect import bisect_left
from typing import Any, SupportsIndex

import pytest
from delayed_testlib import T0, DueCounter, FakeCursor, FakeSnapshotStore, ManualClock

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.bucket_records import ImmutableBucket, SealedBuckets
from broker.delayed.snapshot_format import DecodedSegment
from storage.positions import Position

BUCKETS = 600


class CountingColumn(list[int]):
    """A segment column that counts the elements read from it (bisect reads through this)."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        CountingColumn.reads += 1
        return super().__getitem__(i)


@pytest.fixture
def counted_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    push = SealedBuckets.push_loaded

    def counted(self: SealedBuckets, bucket: ImmutableBucket, segment: DecodedSegment) -> None:
        push(self, bucket, DecodedSegment(CountingColumn(segment.ts),   # type: ignore[arg-type]
                                          CountingColumn(segment.pos),  # type: ignore[arg-type]
                                          segment.cancels))

    monkeypatch.setattr(SealedBuckets, "push_loaded", counted)


def hour_segments(clock: ManualClock, *, min_index: int,
                  per_segment: int) -> BucketDelayedDeliveryTracker:
    """A strict 1 ms bucket tracker on the running loop whose segments are cut by count
    (an hour of deliver times each)."""
    return BucketDelayedDeliveryTracker(
        cursor=FakeCursor(), snapshots=FakeSnapshotStore(), tick_time_ms=1, strict=True,
        on_due=DueCounter(), loop=asyncio.get_running_loop(), clock_ms=clock,
        min_index_count_per_bucket=min_index, time_step_per_segment_ms=3_600_000,
        max_indexes_per_segment=per_segment)


def count_merge_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list counting the merge's steps (``SealedBuckets.take_run`` calls) from now."""
    steps = [0]
    take_run = SealedBuckets.take_run

    def counted(self: SealedBuckets, *args: Any) -> Any:
        steps[0] += 1
        return take_run(self, *args)

    monkeypatch.setattr(SealedBuckets, "take_run", counted)
    return steps


def _reads() -> int:
    return CountingColumn.reads


async def test_a_hand_out_reads_a_bounded_number_of_segment_entries_whatever_is_loaded(
        counted_segments: None) -> None:
    clock = ManualClock()
    t = hour_segments(clock, min_index=2, per_segment=100)
    due: dict[tuple[int, int], int] = {}
    # Two entries per bucket (one ledger each), interleaved in time with every other bucket:
    # every round of the merge crosses to another segment.
    for ledger in range(1, BUCKETS + 1):
        for e, at in enumerate((T0 + 1000 + ledger, T0 + 1000 + BUCKETS + ledger)):
            t.add(Position(ledger, e), at)
            due[(ledger, e)] = at
    t.add(Position(BUCKETS + 1, 0), T0 + 3_000_000)     # seals the last one
    await t.wait_idle()
    assert len(t.sealed.ranges) == BUCKETS
    assert t.sealed.loaded_index_count == 2 * BUCKETS   # every first segment in memory
    clock.now_ms = T0 + 10_000                          # all due
    got: list[tuple[int, int]] = []
    most = 0
    for _ in range(2 * BUCKETS + 10):
        before = _reads()
        batch = t.get_scheduled(1)
        most = max(most, _reads() - before)
        if not batch:
            assert not t.has_message_available()
            break
        got.extend(batch)
    # (due time, position) order across every bucket, each once
    assert got == sorted(due, key=lambda p: (due[p], p))
    # a hand-out of one reads a few entries (its run, the heads it compares), not one per
    # loaded segment (600 here)
    assert most <= 40, most
    await t.close()


async def test_a_large_hand_out_reads_entries_in_proportion_to_what_it_takes(
        counted_segments: None) -> None:
    clock = ManualClock()
    t = hour_segments(clock, min_index=50, per_segment=1000)
    due: dict[tuple[int, int], int] = {}
    for ledger in range(1, 41):
        for e in range(50):
            at = T0 + 1000 + (e * 7919 + ledger * 104_729) % 5000
            t.add(Position(ledger, e), at)
            due[(ledger, e)] = at
    t.add(Position(41, 0), T0 + 3_000_000)
    await t.wait_idle()
    assert t.sealed.loaded_index_count == 2000
    clock.now_ms = T0 + 3000                            # a part of them due
    expected = sorted((p for p in due if due[p] <= clock.now_ms), key=lambda p: (due[p], p))
    got: list[tuple[int, int]] = []
    before = _reads()
    for _ in range(100):
        batch = t.get_scheduled(100)
        if not batch:
            break
        # each batch is the next 100 in (due time, position) order, sorted by position
        assert sorted(batch) == sorted(expected[len(got):len(got) + len(batch)])
        got.extend(batch)
    assert len(got) == len(expected)
    # the merge reads each taken entry a bounded number of times, plus O(log) per run
    assert _reads() - before <= 40 * len(expected), (_reads() - before, len(expected))
    await t.close()


def test_the_counting_column_counts_what_bisect_reads() -> None:
    from bisect import bisect_right
    column = CountingColumn(range(1024))
    before = _reads()
    assert bisect_right(column, 500) == 501
    assert 5 <= _reads() - before <= 12
    idx: SupportsIndex = 3
    assert column[idx] == 3


def test_the_barrier_follows_the_loading_buckets_through_sets_and_removals() -> None:
    import random
    rng = random.Random(7)
    sealed = SealedBuckets()
    buckets = [ImmutableBucket(i, i) for i in range(200)]
    for step in range(3000):
        bucket = rng.choice(buckets)
        if rng.random() < 0.4:
            sealed.loading.pop(bucket, None)
        else:
            sealed.loading[bucket] = T0 + rng.randrange(10_000)
        if step % 500 == 499:
            sealed.loading.clear()
        expected = min(sealed.loading.values()) if sealed.loading else None
        assert sealed.barrier() == expected


def test_the_barrier_heap_stays_bounded_while_one_bucket_keeps_loading() -> None:
    sealed = SealedBuckets()
    stuck, other = ImmutableBucket(1, 1), ImmutableBucket(2, 2)
    sealed.loading[stuck] = T0                  # a read that keeps failing and retrying
    for k in range(10_000):
        sealed.loading[other] = T0 + 1 + k      # segment after segment of another bucket
        sealed.loading.pop(other)
        assert sealed.barrier() == T0
    assert len(sealed.loading._low) <= 2 * len(sealed.loading) + 65


async def test_after_a_restart_each_segments_overdue_run_goes_in_one_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What was due when the tracker recovered is late whatever its order: a hand-out takes a
    segment's whole overdue run in one step instead of merging thousands of segments entry by
    entry; what falls due later keeps the exact (time, position) order across buckets."""
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()

    def make() -> BucketDelayedDeliveryTracker:
        return BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=store, tick_time_ms=1, strict=True, on_due=DueCounter(),
            loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=6,
            time_step_per_segment_ms=3_600_000, max_indexes_per_segment=100)

    t = make()
    due: dict[tuple[int, int], int] = {}
    overdue_per_bucket = 5
    for ledger in range(1, BUCKETS + 1):
        # five entries due before the restart, interleaved in time with every other bucket's,
        # and one due after it, interleaved too
        times = [T0 + 1000 + k * BUCKETS + ledger for k in range(overdue_per_bucket)]
        times.append(T0 + 100_000 + (ledger * 7) % BUCKETS)
        for e, at in enumerate(times):
            t.add(Position(ledger, e), at)
            due[(ledger, e)] = at
    t.add(Position(BUCKETS + 1, 0), T0 + 3_000_000)     # seals the last one
    await t.wait_idle()
    assert len(t.sealed.ranges) == BUCKETS
    await t.close()

    restart_at = T0 + 10_000
    clock.now_ms = restart_at
    t2 = make()
    await t2.recover()
    await t2.wait_idle()                                # every first segment in
    steps = count_merge_steps(monkeypatch)
    overdue = {p for p, at in due.items() if at <= restart_at}
    assert len(overdue) == overdue_per_bucket * BUCKETS
    got: list[tuple[int, int]] = []
    for _ in range(len(overdue)):
        batch = t2.get_scheduled(1000)
        if not batch:
            break
        got.extend(batch)
    assert len(got) == len(set(got)) and set(got) == overdue   # each once, none early
    # one step per segment (a batch boundary may cut a run), not one per entry
    assert steps[0] <= BUCKETS + len(overdue) // 1000 + 1, steps[0]
    # the first hand-out is the run of the segment with the smallest head
    clock.now_ms = T0 + 200_000
    later: list[tuple[int, int]] = []
    for _ in range(3 * BUCKETS):
        batch = t2.get_scheduled(1)
        if not batch:                   # their part of the segment is read again first
            await t2.wait_idle()
            if not t2.has_message_available():
                break
        later.extend(batch)
    rest = [p for p in due if p not in overdue]
    assert later == sorted(rest, key=lambda p: (due[p], p))     # exact order after the restart
    await t2.close()


@pytest.mark.parametrize("round_size", [1, 7, 100, 1000])
async def test_random_delays_go_out_one_step_a_segment_in_the_merge_order(
        monkeypatch: pytest.MonkeyPatch, round_size: int) -> None:
    """Under random delays every sealed segment has an entry or two due each millisecond. A
    take that all of them fit goes one step a segment, not one merge step an entry; a take
    they overflow takes whole runs up to a time they fit before, and the merge the rest. The
    hand-out is exactly the (time, position) order either way."""
    clock = ManualClock()
    t = hour_segments(clock, min_index=400, per_segment=150)
    rnd = random.Random(round_size)
    due: dict[tuple[int, int], int] = {}
    for ledger in range(1, 12):                 # ten sealed buckets and a mutable one
        for e in range(400 if ledger <= 10 else 200):
            at = T0 + 1000 + rnd.randrange(2000)
            t.add(Position(ledger, e), at)
            due[(ledger, e)] = at
    await t.wait_idle()
    assert len(t.sealed.ranges) == 10
    steps = count_merge_steps(monkeypatch)
    got: list[tuple[int, int]] = []
    left = sorted(due.values())                 # the deliver times not handed out
    rounds = 0
    now = T0 + 1000
    while now < T0 + 3000 + 10:
        now += rnd.choice((1, 1, 1, 5, 30))    # mostly every millisecond, sometimes behind
        clock.now_ms = now
        for _ in range(len(due)):
            batch = t.get_scheduled(round_size)
            rounds += 1
            assert batch == sorted(batch)
            assert all(due[p] <= now for p in batch)    # none early
            for p in batch:
                del left[bisect_left(left, due[p])]
            # the earliest first: nothing left is due before anything this batch took
            assert not batch or not left or max(due[p] for p in batch) <= left[0]
            got.extend(batch)
            if len(batch) < round_size:
                break
        await t.wait_idle()                     # segments loaded as the earlier run dry
    # each once (within a millisecond, a bucket still loading its segment holds back only
    # its own entries of that millisecond: position order there is by bucket)
    assert len(got) == len(set(got)) == len(due)
    if round_size >= 100:                       # about 2 due a millisecond: all fit
        assert steps[0] <= rounds // 10, (steps[0], rounds)
    else:                                       # a take of 1 or 7 is cut by the merge
        assert steps[0] > 0
