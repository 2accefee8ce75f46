"""Property test: both trackers behave like a sorted list of (deliver_at, position)."""

from __future__ import annotations

import asyncio
import os
from unittest import mock

from delayed_testlib import T0, DueCounter, FakeCursor, FakeLoop, FakeSnapshotStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.delayed import bucket, indexed
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.tracker import DelayedDeliveryTracker
from storage.positions import Position

# ops: ("add", delay_ms, new_ledger) | ("readd",) | ("advance", ms) | ("get", n) | ("cancel", k)
#      | ("reschedule", k, delay_ms): cancel a pending position, add a new one (a new version)
#      | ("burst", n, delay_ms): n adds at delay_ms + 0, 7, 14, ... (mod 3000)
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(-50, 3000), st.booleans()),
    st.tuples(st.just("readd"), st.integers(0, 10_000)),
    st.tuples(st.just("advance"), st.integers(0, 700)),
    st.tuples(st.just("get"), st.integers(1, 8)),
    st.tuples(st.just("cancel"), st.integers(0, 10_000)),
    st.tuples(st.just("reschedule"), st.integers(0, 10_000), st.integers(1, 3000)),
    st.tuples(st.just("burst"), st.integers(1, 40), st.integers(1, 3000)),
), max_size=120)
#: The index compaction floor under test: 0 compacts as soon as stale slots outnumber live ones.
FLOORS = st.sampled_from([0, 2, indexed.COMPACT_FLOOR])
#: Entries per incremental compaction step: 1 makes a sweep copy one ledger per step.
STEPS = st.sampled_from([1, indexed.SWEEP_STEP])


class Model:
    def __init__(self, strict: bool, tick: int) -> None:
        self.strict = strict
        self.tick = tick
        self.items: dict[tuple[int, int], int] = {}

    def cutoff(self, now: int) -> int:
        return now if self.strict else now + self.tick


async def run(tracker: DelayedDeliveryTracker, loop: FakeLoop, ops: list[tuple], strict: bool,  # type: ignore[type-arg]
              tick: int, settle) -> None:  # type: ignore[no-untyped-def]
    model = Model(strict, tick)
    ledger, entry = 1, 0
    for op in ops:
        kind = op[0]
        if kind == "add":
            if op[2]:
                ledger, entry = ledger + 1, 0
            pos = (ledger, entry)
            entry += 1
            at = loop.now_ms + op[1]
            expect = at > model.cutoff(loop.now_ms)
            assert tracker.add(Position(*pos), at) is expect
            if expect:
                model.items[pos] = at
        elif kind == "readd" and model.items:
            pos = sorted(model.items)[op[1] % len(model.items)]
            assert tracker.add(Position(*pos), model.items[pos]) is True
        elif kind == "advance":
            loop.now_ms += op[1]
        elif kind == "get":
            due = sorted(at for at in model.items.values() if at <= model.cutoff(loop.now_ms))
            got: list[tuple[int, int]] = []
            for _ in range(50):
                await settle()
                got += tracker.get_scheduled(op[1] - len(got))
                if len(got) >= min(op[1], len(due)):
                    break
            assert len(got) == min(op[1], len(due))
            assert len(set(got)) == len(got)
            for pos in got:
                assert model.items[pos] <= model.cutoff(loop.now_ms), "early"
            # earliest first: nothing left behind is due before what was handed out
            if got:
                latest = max(model.items[p] for p in got)
                for pos in got:
                    del model.items[pos]
                left = [at for at in model.items.values() if at <= model.cutoff(loop.now_ms)]
                assert not left or min(left) >= latest
        elif kind == "cancel" and model.items:
            pos = sorted(model.items)[op[1] % len(model.items)]
            assert tracker.cancel(Position(*pos)) is True
            assert tracker.cancel(Position(*pos)) is False
            del model.items[pos]
        elif kind == "burst":
            for i in range(op[1]):
                pos = (ledger, entry)
                entry += 1
                at = loop.now_ms + model.tick + 1 + (op[2] + 7 * i) % 3000
                assert tracker.add(Position(*pos), at) is True
                model.items[pos] = at
        elif kind == "reschedule" and model.items:
            pos = sorted(model.items)[op[1] % len(model.items)]
            assert tracker.cancel(Position(*pos)) is True
            del model.items[pos]
            pos = (ledger, entry)
            entry += 1
            at = loop.now_ms + model.tick + op[2]
            assert tracker.add(Position(*pos), at) is True
            model.items[pos] = at
        assert len(tracker) == len(model.items)
        slots = sum(p.indexed for p in tracker.scheduled_sources().indexes)
        assert slots <= 2 * len(model.items) + indexed.COMPACT_FLOOR   # stale slots bounded
        for pos in list(model.items)[:5]:
            assert tracker.contains(Position(*pos))
    loop.now_ms += 10_000
    rest: list[tuple[int, int]] = []
    for _ in range(200):
        await settle()
        batch = tracker.get_scheduled(1000)
        rest += batch
        if not batch and not tracker.has_message_available() and \
                not getattr(tracker, "pending_loads", 0):
            break
    assert sorted(rest) == sorted(model.items)
    assert len(tracker) == 0
    await tracker.close()


SETTINGS = settings(max_examples=int(os.environ.get("HORAE_HYPOTHESIS_EXAMPLES", "400")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(ops=OPS, strict=st.booleans(), tick=st.sampled_from([1, 10, 100]), floor=FLOORS,
       step=STEPS)
def test_in_memory_tracker_matches_the_model(ops: list[tuple], strict: bool, tick: int,  # type: ignore[type-arg]
                                             floor: int, step: int) -> None:
    loop = FakeLoop(T0)
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=tick, strict=strict,
                                             on_due=DueCounter(), loop=loop,
                                             clock_ms=loop.clock_ms)

    async def settle() -> None:
        return None

    with mock.patch.object(indexed, "COMPACT_FLOOR", floor), \
            mock.patch.object(indexed, "SWEEP_STEP", step):
        asyncio.run(run(tracker, loop, ops, strict, tick, settle))


@SETTINGS
@given(ops=OPS, strict=st.booleans(), tick=st.sampled_from([1, 10, 100]),
       max_buckets=st.sampled_from([-1, 2]), floor=FLOORS, step=STEPS,
       min_take=st.sampled_from([1, bucket.EARLIEST_MIN_TAKE]))
def test_bucket_tracker_matches_the_model(ops: list[tuple], strict: bool, tick: int,  # type: ignore[type-arg]
                                          max_buckets: int, floor: int, step: int,
                                          min_take: int) -> None:
    """``min_take`` 1: every hand-out tries the earliest run (its count and guesses) before
    the merge, as takes of a dispatcher's size do."""
    async def scenario() -> None:
        clock_loop = FakeLoop(T0)
        tracker = BucketDelayedDeliveryTracker(
            cursor=FakeCursor(), snapshots=FakeSnapshotStore(), tick_time_ms=tick,
            strict=strict, on_due=DueCounter(), loop=asyncio.get_running_loop(),
            clock_ms=clock_loop.clock_ms, min_index_count_per_bucket=3,
            time_step_per_segment_ms=200, max_indexes_per_segment=2,
            max_num_buckets=max_buckets)

        async def settle() -> None:
            await tracker.wait_idle()

        await run(tracker, clock_loop, ops, strict, tick, settle)

    with mock.patch.object(indexed, "COMPACT_FLOOR", floor), \
            mock.patch.object(indexed, "SWEEP_STEP", step), \
            mock.patch.object(bucket, "EARLIEST_MIN_TAKE", min_take):
        asyncio.run(scenario())
