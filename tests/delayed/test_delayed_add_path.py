"""The add path of the trackers (every delayed message published goes through it): adds behind
an overdue head do not recompute the head, the mutable bucket's add, the packed index's tail
append."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from delayed_testlib import T0, DueCounter, FakeCursor, FakeLoop, FakeSnapshotStore

from broker.delayed import indexed
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.indexed import IndexedPositions, MutableBucket
from broker.delayed.packed import CHUNK, PackedTimeIndex
from broker.delayed.tracker import TimedTracker
from storage.positions import Position


def _in_memory(loop: FakeLoop, due: DueCounter, strict: bool, tick: int) -> TimedTracker:
    return InMemoryDelayedDeliveryTracker(tick_time_ms=tick, strict=strict, on_due=due,
                                          loop=loop, clock_ms=loop.clock_ms,
                                          fixed_delay_lookahead=0)


def _bucket(loop: FakeLoop, due: DueCounter, strict: bool, tick: int) -> TimedTracker:
    # no sealing (min index count above what is added): the timer is the only loop use
    return BucketDelayedDeliveryTracker(cursor=FakeCursor(), snapshots=FakeSnapshotStore(),
                                        tick_time_ms=tick, strict=strict, on_due=due,
                                        loop=loop,  # type: ignore[arg-type]
                                        clock_ms=loop.clock_ms,
                                        min_index_count_per_bucket=1_000_000)


MAKERS: dict[str, Callable[[FakeLoop, DueCounter, bool, int], TimedTracker]] = {
    "in-memory": _in_memory, "bucket": _bucket}


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize(("strict", "tick"), [(True, 1), (False, 100)])
def test_adds_behind_an_overdue_head_skip_the_head_and_the_hand_out_re_aims(
        kind: str, strict: bool, tick: int, monkeypatch: pytest.MonkeyPatch) -> None:
    loop, due = FakeLoop(), DueCounter()
    t = MAKERS[kind](loop, due, strict, tick)
    heads = 0
    head_ts = type(t)._head_ts

    def counted(self: Any) -> int | None:
        nonlocal heads
        heads += 1
        result: int | None = head_ts(self)
        return result

    monkeypatch.setattr(type(t), "_head_ts", counted)
    expected = {Position(1, 0): T0 + 1_000}
    assert t.add(Position(1, 0), T0 + 1_000)
    loop.advance_to(T0 + 5_000)              # fired; the dispatcher is behind: nothing taken
    assert due.calls == 1
    assert not loop.pending
    heads = 0
    for e in range(1, 2_001):               # a publish stream while the head is overdue
        at = T0 + 10_000 + (e * 37) % 4_000
        assert t.add(Position(2, e), at)
        expected[Position(2, e)] = at
    assert heads <= 1                       # the first add finds the head overdue, once
    assert not loop.pending                 # nothing armed while the head is overdue
    # the dispatcher's read takes the overdue head and re-aims at the next deadline
    assert t.get_scheduled(10) == [Position(1, 0)]
    first = min(at for pos, at in expected.items() if pos != Position(1, 0))
    assert [round(h.when * 1000) for h in loop.pending] == [first - (0 if strict else tick)]
    # an add earlier than the armed deadline still re-aims
    assert t.add(Position(3, 0), T0 + 6_000)
    expected[Position(3, 0)] = T0 + 6_000
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 6_000 - (0 if strict else tick)]
    # drain on the timer, a millisecond at a time: everything exactly once, when the timer
    # says so, nothing before its time (minus the tick when not strict), none late by more
    # than the timer's spacing
    got: dict[Position, int] = {Position(1, 0): T0 + 5_000}
    for _ in range(20_000):
        fired = due.calls
        loop.advance(1)
        if due.calls > fired:
            for pos in t.get_scheduled(100_000):
                assert pos not in got
                got[pos] = loop.now_ms
        if len(got) == len(expected):
            break
    assert got.keys() == expected.keys()
    del expected[Position(1, 0)]             # taken late on purpose (the dispatcher was behind)
    for pos, at in expected.items():
        assert at - (0 if strict else tick) <= got[pos] <= at + 2 * tick, (pos, got[pos], at)
    assert len(t) == 0
    asyncio.run(t.close())


def test_mutable_bucket_add_tracks_members_range_count_and_time_order() -> None:
    rnd = random.Random(11)
    bucket, model = MutableBucket(), IndexedPositions()
    first: int | None = None
    for _ in range(20_000):
        ledger, entry, at = rnd.randrange(5, 40), rnd.randrange(300), T0 + rnd.randrange(10_000)
        first = ledger if first is None else first
        assert bucket.add(at, ledger, entry) == model.add(at, ledger, entry)
        if rnd.random() < 0.2:
            drop = rnd.randrange(5, 40), rnd.randrange(300)
            assert bucket.discard(*drop) == model.discard(*drop)
    assert bucket.count == model.count == sum(len(bm) for bm in bucket.members.values())
    assert bucket.members == model.members
    assert bucket.start == first            # where it began (the tracker adds no lower ledger)
    assert bucket.end == max(bucket.members)
    assert bucket.live_columns() == model.live_columns()
    start, end, ts_col, pos_col, members = bucket.take_all()
    assert (len(ts_col), list(ts_col)) == (model.count, sorted(ts_col))
    assert sorted(pos_col) == sorted(ledger << 32 | e for ledger, bm in members.items() for e in bm)
    assert start == first and end == max(members)
    assert (bucket.count, bucket.start, bucket.end, bucket.members) == (0, -1, -1, {})
    # empty again: the range starts afresh at the next ledger added
    assert bucket.add(T0 + 1, 90, 0) and (bucket.start, bucket.end) == (90, 90)
    assert bucket.add(T0 + 2, 92, 0) and (bucket.start, bucket.end) == (90, 92)
    assert not bucket.add(T0 + 3, 92, 0)     # tracked already: nothing changes
    assert bucket.add(T0 + 3, 91, 0) and (bucket.start, bucket.end) == (90, 92)
    assert len(bucket.index) == bucket.count == 3


def test_mutable_bucket_adds_during_a_sweep_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexed, "SWEEP_STEP", 100)    # a sweep of many steps
    bucket = MutableBucket()
    for e in range(10_000):
        bucket.add(T0 + e, 7, e)
    drops = iter(range(0, 10_000, 2))
    while bucket._sweep is None:            # white-box: the case this test is about
        assert bucket.discard(7, next(drops))
    for e in range(10_000, 10_050):
        bucket.add(T0 + e, 8, e)            # added while the sweep runs
    for e in drops:                         # each drop runs a step of the sweep
        assert bucket.discard(7, e)
    assert bucket._sweep is None
    assert len(bucket.index) - bucket.count <= max(bucket.count, 4096)
    live = {(7, e) for e in bucket.members[7]} | {(8, e) for e in range(10_000, 10_050)}
    assert bucket.count == len(live)
    out: list[Position] = []
    bucket.pop_upto(T0 + 20_000, 100_000, out)
    assert len(out) == len(set(out)) and set(out) == live
    assert [p for p in out if p.ledger_id == 8] == [Position(8, e) for e in range(10_000, 10_050)]


def test_packed_index_tail_appends_split_and_keep_order_with_a_consumed_head() -> None:
    index = PackedTimeIndex()
    model: list[tuple[int, int]] = []
    ts = 0
    for step in range(6 * CHUNK):
        ts += step % 3 == 0                 # runs of equal times at the tail
        index.push(ts, step)
        model.append((ts, step))
        if step == 3 * CHUNK:               # consume part of the head chunk, then go on
            out: list[int] = []
            index.pop_upto(ts, CHUNK // 2, out)
            assert out == [p for _, p in model[:CHUNK // 2]]
            model = model[CHUNK // 2:]
    index.push(ts, 0)                        # same time, smaller position: not at the tail
    model.append((ts, 0))
    model.sort()
    assert list(index.items()) == model
    assert all(len(col) <= 2 * CHUNK for col in index._ts)
    assert len(index) == len(model)
