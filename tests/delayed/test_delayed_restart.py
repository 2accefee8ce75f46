"""Bucket tracker restart against the real storage: each message once, none early, none lost."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from delayed_testlib import T0, DueCounter, ManualClock

from broker.delayed.bucket import BUCKET_KEY_PREFIX, BucketDelayedDeliveryTracker
from storage import SegmentStore
from storage.config import StorageConfig
from storage.positions import Position

TOPIC = "persistent://public/default/delayed-restart"
N = 3000
STEP_MS = 250


def make(cursor, snapshots, clock: ManualClock, max_buckets: int  # type: ignore[no-untyped-def]
         ) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=snapshots, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=400,
        time_step_per_segment_ms=5000, max_indexes_per_segment=100,
        max_num_buckets=max_buckets)


class Consumer:
    """Acks everything it gets; records (position, time) and checks it was not early."""

    def __init__(self, deliver_at: dict[Position, int], clock: ManualClock) -> None:
        self.deliver_at = deliver_at
        self.clock = clock
        self.received: list[Position] = []
        self.max_lateness = 0

    def deliver(self, cursor, pos: Position) -> None:  # type: ignore[no-untyped-def]
        now = self.clock.now_ms
        assert self.deliver_at[pos] <= now, f"{pos} delivered {self.deliver_at[pos] - now} ms early"
        self.max_lateness = max(self.max_lateness, now - self.deliver_at[pos])
        self.received.append(pos)
        cursor.delete([pos])


async def drain_now(t: BucketDelayedDeliveryTracker, cursor, consumer: Consumer) -> None:  # type: ignore[no-untyped-def]
    """What a dispatcher does on on_due: take what is due, again after each segment load."""
    for _ in range(1000):
        await t.wait_idle()
        batch = t.get_scheduled(500)
        for ledger_id, entry_id in batch:
            consumer.deliver(cursor, Position(ledger_id, entry_id))
        if not batch and not t.has_message_available() and not t.sealed.loading:
            break


async def run_until(t: BucketDelayedDeliveryTracker, cursor, consumer: Consumer,  # type: ignore[no-untyped-def]
                    clock: ManualClock, end_ms: int) -> None:
    while clock.now_ms < end_ms:
        clock.now_ms += STEP_MS
        await drain_now(t, cursor, consumer)


@pytest.mark.parametrize("max_buckets", [-1, 3], ids=["no-merge", "merging"])
async def test_restart_mid_schedule_delivers_each_message_once_never_early(
        tmp_path: Path, max_buckets: int) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=500)
    clock = ManualClock(T0)
    rnd = random.Random(11)

    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    positions = [await ledger.append(b"m%d" % i) for i in range(N)]
    deliver_at = {pos: T0 + 1000 + rnd.randrange(60_000) for pos in positions}
    assert len({p.ledger_id for p in positions}) >= 6
    consumer = Consumer(deliver_at, clock)

    # run 1: the dispatcher reads everything and indexes it; a third becomes due and is acked
    t1 = make(cursor, store.snapshots, clock, max_buckets)
    for pos in positions:
        assert t1.add(pos, deliver_at[pos]) is True
    cursor.read_position = ledger.next_position(positions[-1])
    await t1.wait_idle()
    sealed = t1.sealed.ranges
    if max_buckets > 0:
        assert t1.op_count[("merge", "succeed")] >= 1
        assert len(sealed) <= max_buckets + 1
    else:
        assert len(sealed) >= 5
    await run_until(t1, cursor, consumer, clock, T0 + 20_000)
    first_run = len(consumer.received)
    assert 0 < first_run < N
    await t1.close()
    await store.close()

    # downtime: some messages become due while the broker is down
    clock.now_ms += 5000

    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    assert [k for k in cursor.properties if k.startswith(BUCKET_KEY_PREFIX)]
    cursor.read_position = ledger.next_position(cursor.mark_delete_position)
    t2 = make(cursor, store.snapshots, clock, max_buckets)
    await t2.recover()
    # recovery read metadata + first segment per bucket (and, read ahead, at most the next
    # one), not the backlog
    buckets = len(t2.sealed.ranges)
    assert 2 * buckets <= t2.op_count[("load", "succeed")] <= 3 * buckets
    assert len(t2) >= N - first_run - 400 * 2          # all but the unsealed tail
    # the dispatcher's first round replays what is due now ...
    await drain_now(t2, cursor, consumer)
    # ... then reads the backlog again from the mark-delete position
    for pos in positions:
        if cursor.is_deleted(pos):
            continue
        if not t2.add(Position(pos.ledger_id, pos.entry_id), deliver_at[pos]):
            consumer.deliver(cursor, pos)               # due: delivered by the normal read
    await run_until(t2, cursor, consumer, clock, T0 + 70_000)
    await t2.close()

    assert len(consumer.received) == len(set(consumer.received)), "duplicates"
    assert set(consumer.received) == set(positions), "lost messages"
    assert consumer.max_lateness <= 5000                 # only the downtime makes them late
    await t2.wait_idle()
    assert t2.sealed.ranges == []
    assert store.snapshots.ids() == []
    await store.close()
