"""Tracker-level cancel (PIP-423 first form): verdicts, counters, the cancels in flight, and what
keeps a cancelled message out across a restart: its acknowledgement on the cursor, nothing the
tracker persists. Also the one-time retirement of an earlier version's cancel journal."""

from __future__ import annotations

import asyncio
from typing import Any

from delayed_testlib import T0, DueCounter, FakeCursor, FakeLoop, FakeSnapshotStore, ManualClock
from pyroaring import BitMap

from broker.delayed.bucket import BucketDelayedDeliveryTracker, bucket_key
from broker.delayed.bucket_segments import RetryDelays
from broker.delayed.cancel_journal import CANCELS_KEY
from broker.delayed.cancels import SLOT_SHIFT, CancelResult, journal_targets
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from protocol.generated import delayed_index_pb2
from storage.positions import Position

FAR = T0 + 3_600_000
_dpb: Any = delayed_index_pb2


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


def cancel_and_ack(t: Any, cursor: FakeCursor, position: Position, at: int) -> CancelResult:
    """What the subscription does (broker.subscriptions.cancel): the verdict, then an accepted
    target acknowledged on the cursor and settled."""
    result: CancelResult = t.cancel_delayed(position, at)
    if result.accepted:
        cursor.deleted.add((position.ledger_id, position.entry_id))
        t.cancel_settled(position)
    return result


def read(t: Any, cursor: FakeCursor, position: Position, at: int) -> bool:
    """A dispatcher's read of an entry: an acknowledged one is skipped, never added."""
    return bool(cursor.is_deleted(position) or t.add(position, at))


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


def journal(*targets: tuple[int, int, int]) -> bytes:
    """An earlier version's cancel journal: one metadata entry per deliver-time slot."""
    slots: dict[int, dict[int, BitMap]] = {}
    for ledger_id, entry_id, at in targets:
        slots.setdefault(at >> SLOT_SHIFT, {}).setdefault(ledger_id, BitMap()).add(entry_id)
    metadata = _dpb.SnapshotMetadata()
    for slot in sorted(slots):
        meta = metadata.metadata_list.add(min_schedule_timestamp=slot << SLOT_SHIFT,
                                          max_schedule_timestamp=((slot + 1) << SLOT_SHIFT) - 1)
        for ledger_id, bm in slots[slot].items():
            meta.delayed_index_bit_map[ledger_id] = bm.serialize()
    return bytes(metadata.SerializeToString())


# --- in-memory tracker ------------------------------------------------------------------------

def test_in_memory_cancel_results_and_counters() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=lambda: None,
                                       loop=loop, clock_ms=loop.clock_ms)
    t.add(Position(1, 1), T0 + 100)
    assert t.cancel_delayed(Position(1, 1), T0 + 100) is CancelResult.APPLIED
    assert t.cancel_delayed(Position(1, 2), T0 + 200) is CancelResult.PENDING
    assert t.cancel_delayed(Position(1, 3), T0) is CancelResult.REFUSED_PAST
    # in flight (the acknowledgement not on the cursor yet): a read meeting it holds it back
    assert t.add(Position(1, 2), T0 + 200) is True
    assert not t.contains(Position(1, 2))
    assert t.add_run([Position(1, 1), Position(1, 4)], [T0 + 100, T0 + 300]) == []
    assert not t.contains(Position(1, 1)) and t.contains(Position(1, 4))
    assert t.cancel_delayed(Position(1, 1), T0 + 100) is CancelResult.APPLIED   # again
    loop.now_ms = T0 + 1000
    assert t.get_scheduled(10) == [Position(1, 4)]
    stats = t.cancel_stats()
    assert (stats.applied_total, stats.refused_total, stats.pending) == (1, 1, 1)
    assert set(t.cancels.in_flight) == {Position(1, 1), Position(1, 2)}


def test_in_memory_settled_cancel_is_the_cursors_and_the_gauge_expires() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=10, strict=True, on_due=lambda: None,
                                       loop=loop, clock_ms=loop.clock_ms)
    cursor = FakeCursor()
    assert cancel_and_ack(t, cursor, Position(1, 2), T0 + 200) is CancelResult.PENDING
    assert not t.cancels.in_flight                  # nothing per cancel once acknowledged
    assert read(t, cursor, Position(1, 2), T0 + 200) and not t.contains(Position(1, 2))
    assert t.cancel_stats().pending == 1
    loop.now_ms = T0 + 200 + (2 << SLOT_SHIFT)
    t.get_scheduled(10)
    assert t.cancel_stats().pending == 0
    assert t.cancels.memory_bytes < 1000


def test_in_memory_wide_positions_are_cancelled_or_not_found() -> None:
    loop = FakeLoop()
    t = InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=lambda: None,
                                       loop=loop, clock_ms=loop.clock_ms)
    wide = Position(1 << 40, 1)
    assert t.cancel_delayed(wide, T0 + 100) is CancelResult.NOT_FOUND
    t.add(wide, T0 + 100)
    assert t.cancel_delayed(wide, T0 + 100) is CancelResult.APPLIED
    assert not t.contains(wide) and t.add(wide, T0 + 100) is True and not t.contains(wide)


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
    assert not t.cancels.in_flight
    await t.close()


async def test_bucket_cancel_persists_nothing_of_its_own() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    t.add(Position(1, 0), T0 + 100)
    properties, snapshots, flushes = dict(cursor.properties), dict(store.snapshots), cursor.flushes
    assert t.cancel_delayed(Position(1, 0), T0 + 100) is CancelResult.APPLIED
    assert t.cancel_delayed(Position(1, 1), T0 + 200) is CancelResult.PENDING
    await t.wait_idle()
    assert cursor.properties == properties and dict(store.snapshots) == snapshots
    assert cursor.flushes == flushes
    await t.close()


async def test_cancel_in_flight_holds_its_target_back_until_settled() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    t.add(Position(1, 0), T0 + 100)
    assert t.cancel_delayed(Position(1, 0), T0 + 100) is CancelResult.APPLIED
    assert t.cancel_delayed(Position(1, 0), T0 + 100) is CancelResult.APPLIED  # a second one
    clock.now_ms = T0 + 100
    assert t.add(Position(1, 0), T0 + 100) is True      # due now, yet held back: never out
    assert await drain(t, clock, T0 + 1000) == []
    cursor.deleted.add((1, 0))
    t.cancel_settled(Position(1, 0))
    assert not t.cancels.in_flight
    assert t.cancel_delayed(Position(1, 0), FAR) is CancelResult.NOT_FOUND     # acknowledged
    assert t.cancel_stats().applied_total == 1
    await t.close()


async def test_cancel_survives_restart_while_its_target_is_in_the_mutable_bucket() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock)
    for e in range(3):
        t.add(Position(1, e), T0 + 100 + e)
    assert cancel_and_ack(t, cursor, Position(1, 1), T0 + 101) is CancelResult.APPLIED
    t2 = await restart(t, cursor, store, clock)
    for e in range(3):                              # the dispatcher reads the backlog again
        assert read(t2, cursor, Position(1, e), T0 + 100 + e) is True
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
    assert cancel_and_ack(t, cursor, Position(2, 1), T0 + 400) is CancelResult.PENDING
    assert t.cancel_stats().pending == 1
    t2 = await restart(t, cursor, store, clock, min_index=2)
    assert t2.cancel_stats().pending == 0                     # a gauge, not a record
    assert read(t2, cursor, Position(2, 0), T0 + 300) is True
    assert read(t2, cursor, Position(2, 1), T0 + 400) is True  # acknowledged: skipped
    assert not t2.contains(Position(2, 1))
    assert await drain(t2, clock, T0 + 1000) == [(1, 0), (1, 1), (2, 0)]
    await t2.close()


async def test_cancel_in_a_sealed_bucket_survives_restart_without_a_replay() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, min_index=2)
    t.add(Position(1, 0), FAR)
    t.add(Position(1, 1), FAR + 1)
    t.add(Position(2, 0), T0 + 100)                           # seals [1, 1] (late targets)
    assert cancel_and_ack(t, cursor, Position(1, 1), FAR + 1) is CancelResult.APPLIED
    t.add(Position(2, 1), T0 + 101)
    t.add(Position(3, 0), T0 + 200)                           # seals [2, 2] (early, after the cancel)
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1), (2, 2)]
    assert await drain(t, clock, T0 + 150) == [(2, 0), (2, 1)]
    await t.wait_idle()
    assert t.sealed.ranges == [(1, 1)]           # [2, 2] finished and deleted
    assert bucket_key(2, 2) not in cursor.properties
    t2 = await restart(t, cursor, store, clock, min_index=2)
    assert t2.contains(Position(1, 0))
    assert read(t2, cursor, Position(3, 0), T0 + 200) is True
    assert await drain(t2, clock, FAR + 10) == [(1, 0), (3, 0)]
    await t2.close()


# --- an earlier version's cancel journal --------------------------------------------------------

async def test_a_leftover_cancel_journal_becomes_acknowledgements_once() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    t = bucket(cursor, store, clock, min_index=2)
    for e in range(3):
        t.add(Position(1, e), T0 + 100 + e)
    t.add(Position(2, 0), T0 + 300)                           # seals [1, 1]
    await t.wait_idle()
    await t.close()
    # what an earlier version left: (1, 1) cancelled, (2, 1) cancelled before it was read
    data = journal((1, 1, T0 + 101), (2, 1, T0 + 400))
    assert {k: list(v) for k, v in journal_targets(data).items()} == {1: [1], 2: [1]}
    sid = await store.create(data, [])
    cursor.set_property(CANCELS_KEY, str(sid))
    flushes = cursor.flushes
    t2 = bucket(cursor, store, clock, min_index=2)
    await t2.recover()
    assert {(1, 1), (2, 1)} <= cursor.deleted                 # acknowledged before any hand-out
    assert CANCELS_KEY not in cursor.properties and cursor.flushes > flushes
    assert sid not in store.snapshots
    assert read(t2, cursor, Position(2, 0), T0 + 300) and read(t2, cursor, Position(2, 1), T0 + 400)
    assert await drain(t2, clock, T0 + 1000) == [(1, 0), (1, 2), (2, 0)]
    await t2.close()


async def test_retiring_the_journal_again_after_a_crash_is_harmless() -> None:
    cursor, store, clock = FakeCursor(), FakeSnapshotStore(), ManualClock()
    sid = await store.create(journal((4, 2, FAR)), [])
    cursor.deleted.add((4, 2))                 # the acks landed; the property was not removed
    cursor.set_property(CANCELS_KEY, str(sid))
    t = bucket(cursor, store, clock)
    await t.recover()
    assert cursor.deleted == {(4, 2)} and CANCELS_KEY not in cursor.properties
    await t.close()
    cursor.set_property(CANCELS_KEY, str(sid))  # its snapshot gone: the property just goes
    t2 = bucket(cursor, store, clock)
    await t2.recover()
    assert CANCELS_KEY not in cursor.properties and cursor.deleted == {(4, 2)}
    await t2.close()
