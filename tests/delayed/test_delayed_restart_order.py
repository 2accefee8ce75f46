"""Bucket tracker recovery reads snapshots concurrently, bounded, the bucket due soonest first."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from delayed_testlib import T0, DueCounter, ManualClock

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.bucket_snapshots import RECOVERY_READS
from storage import SegmentStore
from storage.config import StorageConfig
from storage.positions import Position

TOPIC = "persistent://public/default/delayed-restart-order"
N = 2400
PER_BUCKET = 50


class Recording:
    """The real snapshot store, recording which segments are read and how many at once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.segment_reads: list[int] = []      # snapshot ids, in the order reads started
        self.in_flight = 0
        self.max_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _counted(self, coro: Any) -> bytes:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.002)          # a disk that takes a moment
            result: bytes = await coro
            return result
        finally:
            self.in_flight -= 1

    async def load_metadata(self, snapshot_id: int) -> bytes:
        return await self._counted(self._inner.load_metadata(snapshot_id))

    async def load_segment(self, snapshot_id: int, index: int) -> bytes:
        self.segment_reads.append(snapshot_id)
        return await self._counted(self._inner.load_segment(snapshot_id, index))

    async def load_parts(self, parts: list[tuple[int, int]]) -> Any:
        """One read job of several parts: counted once in flight."""
        self.segment_reads.extend(sid for sid, index in parts if index > 0)
        return await self._counted(self._inner.load_parts(parts))


def make(cursor: Any, snapshots: Any, clock: ManualClock) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=snapshots, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=PER_BUCKET,
        time_step_per_segment_ms=5000, max_indexes_per_segment=100, max_num_buckets=-1)


async def test_recovery_reads_first_segments_earliest_due_first_and_bounded(
        tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=PER_BUCKET)
    clock = ManualClock(T0)
    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    positions = [await ledger.append(b"m%d" % i) for i in range(N)]
    # later positions fall due earlier: bucket (position) order is the reverse of due order,
    # and each bucket's times interleave with its neighbours' a little
    deliver_at = {pos: T0 + 600_000 - i * 200 + (i * 7919) % 150
                  for i, pos in enumerate(positions)}
    t1 = make(cursor, store.snapshots, clock)
    for pos in positions:
        assert t1.add(pos, deliver_at[pos]) is True
    cursor.read_position = ledger.next_position(positions[-1])
    await t1.wait_idle()
    assert len(t1.sealed.ranges) > 2 * RECOVERY_READS
    await t1.close()
    await store.close()                           # what a kill -9 leaves: snapshots + properties

    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    cursor.read_position = ledger.next_position(cursor.mark_delete_position)
    recording = Recording(store.snapshots)
    t2 = make(cursor, recording, clock)
    await t2.recover()
    buckets = {b.snapshot_id: b for b in t2.sealed}
    first_times = [buckets[sid].segment_min_ts[0] for sid in recording.segment_reads
                   if sid in buckets]
    assert len(first_times) == len(buckets) > 2 * RECOVERY_READS
    assert first_times == sorted(first_times), "first segments not read earliest due first"
    assert 1 < recording.max_in_flight <= RECOVERY_READS

    # and what recovery serves is right: everything comes out once, in time, none early
    seen: set[Position] = set()
    clock.now_ms = T0 + 700_000
    for _ in range(10_000):
        await t2.wait_idle()
        batch = t2.get_scheduled(500)
        for ledger_id, entry_id in batch:
            pos = Position(ledger_id, entry_id)
            assert pos not in seen
            seen.add(pos)
            cursor.delete([pos])
        if not batch and not t2.has_message_available() and not t2.sealed.loading:
            break
    assert len(seen) >= N - 2 * PER_BUCKET - 100    # all but the unsealed tail
    await t2.close()
    await store.close()
