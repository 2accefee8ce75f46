"""Bucket tracker recovery: messages already due at the restart go out as soon as their own
bucket's first segment is in, without waiting for other buckets (only what falls due later
keeps the order across buckets); segments in the packed layout and stores whose snapshots
hold protobuf segments (an older version's) both recover completely."""

from __future__ import annotations

import asyncio
from array import array
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from delayed_testlib import T0, DueCounter, ManualClock
from test_delayed_restart_format import GatedSegments, build, drain, make, reopen, sealed
from waiting import wait_until_async

import broker.delayed.bucket_snapshots as bucket_snapshots
from broker.delayed.bucket import BucketDelayedDeliveryTracker, parse_bucket_key
from broker.delayed.bucket_segments import RetryDelays
from broker.delayed.snapshot_format import (
    decode_metadata,
    decode_segment,
    encode_packed_segment,
    encode_snapshot,
    is_packed_segment,
)
from storage.config import StorageConfig
from storage.positions import Position


def test_packed_segment_round_trip_and_old_layout() -> None:
    ts = array("q", [T0, T0, T0 + 5, T0 + 900_000])
    pos = array("Q", [(7 << 32) | 1, (7 << 32) | 4, (9 << 32) | 0, (11 << 32) | 123456])
    cancels = [(3 << 32) | 2]
    _, packed = encode_snapshot([(ts, pos)], cancels)
    _, old = encode_snapshot([(ts, pos)], cancels, packed=False)
    assert is_packed_segment(packed[0]) and not is_packed_segment(old[0])
    for data in (packed[0], old[0]):
        seg = decode_segment(data)
        assert list(seg.ts) == list(ts) and list(seg.pos) == list(pos)
        assert seg.cancels == cancels
    empty = decode_segment(encode_packed_segment(array("q"), array("Q"), []))
    assert len(empty.ts) == 0 and len(empty.pos) == 0 and empty.cancels == []
    with pytest.raises(ValueError):
        decode_segment(packed[0][:-3])                  # truncated
    with pytest.raises(ValueError):
        decode_segment(packed[0][:6])                   # short header


async def test_overdue_entries_go_out_as_their_bucket_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one segment per read job: a held read holds back only its own bucket
    monkeypatch.setattr(bucket_snapshots, "RECOVERY_BATCH", 1)
    config = StorageConfig(fsync=False, max_entries_per_ledger=20)
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config, clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config)
    sealed_positions = sealed(positions, cursor)
    in_bucket: dict[str, list[Position]] = {}
    for key in cursor.properties:
        if (r := parse_bucket_key(key)) is not None:
            in_bucket[key] = [p for p in positions if r[0] <= p.ledger_id <= r[1]]
    first = {k: min(deliver_at[p] for p in ps) for k, ps in in_bucket.items()}
    restart_at = T0 + 200_010            # buckets 10 s apart: some wholly due, one in part
    straddle = next(k for k, ps in in_bucket.items()
                    if first[k] <= restart_at < max(deliver_at[p] for p in ps))
    overdue_buckets = sorted((k for k in in_bucket
                              if max(deliver_at[p] for p in in_bucket[k]) <= restart_at),
                             key=first.__getitem__)
    assert len(overdue_buckets) >= 3
    opened = overdue_buckets[len(overdue_buckets) // 2]     # not the earliest: held back
    gated = GatedSegments(store.snapshots)
    gated.open_ids = {int(cursor.properties[opened]), int(cursor.properties[straddle])}
    clock.now_ms = restart_at
    t = make(cursor, gated, clock)
    await asyncio.wait_for(t.recover(), 60)
    expect = set(in_bucket[opened]) | {p for p in in_bucket[straddle]
                                       if deliver_at[p] <= restart_at}
    got: list[Position] = []

    def take() -> bool:
        got.extend(Position(*p) for p in t.get_scheduled(100))
        return len(got) >= len(expect)

    await wait_until_async(take, timeout_s=60)
    # the two open buckets' overdue entries are out while every other first segment
    # (the earliest-due bucket's among them) is still held
    assert set(got) == expect and len(got) == len(expect)
    assert not gated.release.is_set() and t.sealed.loading
    assert all(deliver_at[p] <= restart_at for p in got), "handed out early"
    # what falls due after the restart keeps the order across buckets: the straddling
    # bucket's later entries wait while buckets with earlier entries are still loading
    later = [p for p in in_bucket[straddle] if deliver_at[p] > restart_at]
    assert later
    clock.now_ms = max(deliver_at[p] for p in later)
    assert t.get_scheduled(100) == []
    for pos in got:
        cursor.delete([pos])

    gated.release.set()
    rest = await drain(t, clock, cursor, deliver_at, T0 + 400_000)
    assert not set(rest) & set(got)
    assert sorted(set(got) | set(rest)) == sorted(sealed_positions)
    await t.close()
    await store.close()


async def test_store_with_protobuf_segments_recovers(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose snapshots an older version wrote (protobuf segments, no packed one)."""
    config = StorageConfig(fsync=False, max_entries_per_ledger=20)
    clock = ManualClock(T0)
    with monkeypatch.context() as patched:
        patched.setattr(bucket_snapshots, "encode_snapshot",
                        partial(encode_snapshot, packed=False))
        deliver_at, positions = await build(tmp_path, config, clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config)
    snapshot_ids = [int(v) for k, v in cursor.properties.items() if parse_bucket_key(k)]
    assert len(snapshot_ids) >= 10
    sealed_positions = sealed(positions, cursor)
    for snapshot_id in snapshot_ids:
        infos = decode_metadata(await store.snapshots.load_metadata(snapshot_id))
        for number in range(1, len(infos) + 1):
            assert not is_packed_segment(await store.snapshots.load_segment(snapshot_id, number))
    clock.now_ms = T0 + 200_000                 # half of them due while down
    t = make(cursor, store.snapshots, clock)
    await t.recover()
    handed = await drain(t, clock, cursor, deliver_at, T0 + 400_000)
    assert len(handed) == len(set(handed))
    assert sorted(handed) == sorted(sealed_positions)
    await t.close()
    await store.close()


class CountedJobs:
    """The real snapshot store, recording each ``load_parts`` job; the first segment read of
    the snapshots in ``fail_once`` fails once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.jobs: list[list[tuple[int, int]]] = []
        self.fail_once: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def load_parts(self, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
        self.jobs.append(list(parts))
        got: list[bytes | Exception] = await self._inner.load_parts(parts)
        for k, (snapshot_id, index) in enumerate(parts):
            if index > 0 and snapshot_id in self.fail_once:
                self.fail_once.discard(snapshot_id)
                got[k] = OSError("injected read failure")
        return got


async def test_recovery_reads_in_batches_and_retries_a_failed_part(tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=20)
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config, clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config)
    sealed_positions = sealed(positions, cursor)
    ids = sorted(int(v) for k, v in cursor.properties.items() if parse_bucket_key(k))
    counted = CountedJobs(store.snapshots)
    counted.fail_once = {ids[len(ids) // 2]}
    clock.now_ms = T0 + 400_000                     # everything due: every first segment read
    t = BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=counted, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=20,
        time_step_per_segment_ms=1000, max_indexes_per_segment=100,
        retry=RetryDelays(load_s=0.05))
    await t.recover()
    await t.wait_idle()
    await wait_until_async(lambda: not t.sealed.loading, timeout_s=60)   # the retry landed
    metadata_jobs = [job for job in counted.jobs if job[0][1] == 0]
    segment_jobs = [job for job in counted.jobs if job[0][1] > 0]
    # the summaries order the buckets: the one due soonest alone first, then the rest in one
    # job, each bucket's membership and first segment read together (one open per file)
    assert [len(job) for job in metadata_jobs] == [2, 2 * (len(ids) - 1)]
    for job in metadata_jobs:
        assert job[0::2] == [(sid, 0) for sid, _ in job[0::2]]
        assert job[1::2] == [(sid, 1) for sid, _ in job[0::2]]
    assert sorted(p[0] for job in metadata_jobs for p in job[0::2]) == ids
    # the part that failed once is read again on its own
    failed = ids[len(ids) // 2]
    assert segment_jobs == [[(failed, 1)]]
    assert not counted.fail_once
    handed = await drain(t, clock, cursor, deliver_at, T0 + 400_000)
    assert len(handed) == len(set(handed))
    assert sorted(handed) == sorted(sealed_positions)
    await t.close()
    await store.close()


def test_bucket_keys_are_parsed_strictly_and_bad_ones_never_raise() -> None:
    from broker.delayed.bucket_rebuild import live_ranges
    from broker.delayed.bucket_records import BUCKET_KEY_PREFIX, bucket_key

    assert parse_bucket_key(bucket_key(12, 345)) == (12, 345)
    for tail in ("_1_2_3", "_1", "_a_2", "__2", "_1_", "1_2", "_1_2x", "_\u00b2_1", "_1_\u00b2",
                 "_-1_2", "_ 1_2"):
        assert parse_bucket_key(BUCKET_KEY_PREFIX + tail) is None, tail
    assert parse_bucket_key("x" + bucket_key(1, 2)) is None
    properties = {bucket_key(1, 2): "10", bucket_key(3, 4): "\u00b2", bucket_key(5, 6): "-7",
                  BUCKET_KEY_PREFIX + "_\u00b2_9": "11", bucket_key(7, 8): "12", "other": "1"}
    kept, stale = live_ranges(properties)
    assert kept == [(1, 2, 10, bucket_key(1, 2)), (7, 8, 12, bucket_key(7, 8))] and not stale


def test_pending_shares_the_indexed_set_until_its_first_change() -> None:
    """A recovered bucket holds one bitmap per ledger until something is taken from it; then
    ``pending`` gets its own copy and ``indexed`` keeps every entry (a re-read skips them)."""
    from pyroaring import BitMap

    from broker.delayed.bucket_rebuild import recovered_bucket
    from broker.delayed.bucket_records import SealedBuckets
    from broker.delayed.packed import POSITION_BITS
    from broker.delayed.snapshot_format import DecodedSegment, SegmentInfo

    infos = [SegmentInfo(T0, T0 + 9, {7: BitMap(range(10)), 8: BitMap(range(5))})]
    bucket = recovered_bucket(7, 8, 1, 100, infos, Position(6, 0))
    assert bucket.pending[7] is bucket.indexed[7] and bucket.pending[8] is bucket.indexed[8]
    sealed = SealedBuckets()
    sealed.insert(bucket)
    shared_bytes = sealed.memory_bytes
    assert sealed.take(7, 3) is bucket                  # a cancel
    assert bucket.pending[7] is not bucket.indexed[7] and 3 not in bucket.pending[7]
    assert bucket.indexed[7] == BitMap(range(10)) and sealed.holds(7, 3)
    assert bucket.pending[8] is bucket.indexed[8]
    assert sealed.memory_bytes > shared_bytes           # the copy is counted
    assert not sealed.take(7, 3) and bucket.remaining == 14
    # the hand-out of a loaded segment copies on its first take too
    ts = array("q", [T0 + e for e in range(5)])
    pos = array("Q", [(8 << POSITION_BITS) | e for e in range(5)])
    sealed.push_loaded(bucket, DecodedSegment(ts, pos, []))
    out: list[Position] = []
    sealed.take_run(2, out, lambda p: False)
    assert out == [Position(8, 0), Position(8, 1)]
    assert bucket.indexed[8] == BitMap(range(5)) and bucket.pending[8] == BitMap([2, 3, 4])
    assert sealed.holds(8, 0) and not bucket.is_pending(8, 0) and bucket.remaining == 12
