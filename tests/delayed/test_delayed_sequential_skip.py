"""``sequential_skip``: the dispatcher jumps over positions a tracker already holds instead of
reading them again (a restart of a bucket-tracker broker would re-read every sealed ledger)."""

from __future__ import annotations

from delayed_testlib import (
    T0,
    DueCounter,
    FakeCursor,
    FakeLoop,
    FakeSnapshotStore,
    ManualClock,
    bucket_tracker,
)
from pyroaring import BitMap

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.packed import run_end
from storage.positions import Position


def test_run_end_finds_the_first_value_missing_from_a_bitmap() -> None:
    bm = BitMap(range(10, 50_000))
    bm.discard(700)
    assert run_end(None, 5) == 5
    assert run_end(bm, 5) == 5
    assert run_end(bm, 10) == 700
    assert run_end(bm, 701) == 50_000
    assert run_end(bm, 49_999) == 50_000
    assert run_end(BitMap([3]), 3) == 4
    assert run_end(bm, 1 << 40) == 1 << 40      # beyond uint32: never tracked in a bitmap


def test_in_memory_skips_tracked_runs_only() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=DueCounter(),
                                       loop=loop, clock_ms=loop.clock_ms)
    for e in (0, 1, 2, 4):
        assert t.add(Position(7, e), T0 + 1000)
    assert t.sequential_skip(Position(7, 0)) == 3
    assert t.sequential_skip(Position(7, 3)) == 3
    assert t.sequential_skip(Position(7, 4)) == 5
    assert t.sequential_skip(Position(8, 0)) == 0
    loop.advance(1000)
    assert t.get_scheduled(10) == [(7, 0), (7, 1), (7, 2), (7, 4)]
    assert t.sequential_skip(Position(7, 0)) == 0        # handed out: not tracked any more


async def test_bucket_skips_a_recovered_sealed_ledger_and_forgets_it_only_on_a_reset() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()

    def make() -> BucketDelayedDeliveryTracker:
        return bucket_tracker(cursor, store, clock)

    t = make()
    for e in range(20):                          # ledger 1: 0..19 delayed, except 12
        if e != 12:
            t.add(Position(1, e), T0 + 10_000 + e)
    t.add(Position(2, 0), T0 + 10_000)                     # seals [1, 1]
    await t.wait_idle()
    await t.close()

    r = make()                                   # "restart"
    await r.recover()
    assert len(r) == 19
    assert r.sequential_skip(Position(1, 0)) == 12         # 12 was not delayed: it must be read
    assert r.sequential_skip(Position(1, 13)) == 20
    assert r.sequential_skip(Position(2, 0)) == 0          # the mutable bucket was not persisted
    clock.now_ms = T0 + 10_000 + 2
    assert r.get_scheduled(100) == [(1, 0), (1, 1), (1, 2)]
    assert r.sequential_skip(Position(1, 0)) == 12         # handed out since the last reset: skipped
    cursor.revision += 1                         # an ack or skip elsewhere: still skipped
    assert r.sequential_skip(Position(1, 0)) == 12
    r.clear()                                    # a cursor reset: everything is read again
    assert r.sequential_skip(Position(1, 0)) == 0
    assert r.sequential_skip(Position(1, 3)) == 3
    await r.close()
